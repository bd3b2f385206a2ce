"""A model call that raises marks the turn FAILED; when a middleware before `ConvMemMiddleware`
(``ModelRetryMiddleware``) retries it, or the run is resumed, and the model answers, the turn
completes as any other, and a turn whose retries run out stays FAILED."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import ModelRetryMiddleware
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from scripted_models import FlakyModel, flaky

from convmem import ConversationMemory, TurnStatus
from langchain_convmem import ConvMemMiddleware, ConvMemSessions, ConvMemStore

CONFIG: RunnableConfig = {"configurable": {"thread_id": "t1"}}


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def weather_call(city: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"id": "c1", "name": "weather", "args": {"city": city}}])


def ask(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


def retried_agent(
    model: FlakyModel,
    sessions: ConvMemSessions,
    *,
    max_retries: int = 2,
    on_failure: Literal["error", "continue"] = "continue",
) -> Any:
    retry = ModelRetryMiddleware(
        max_retries=max_retries, initial_delay=0.0, jitter=False, on_failure=on_failure
    )
    return create_agent(
        model, [weather], middleware=[retry, ConvMemMiddleware(sessions)], checkpointer=InMemorySaver()
    )


def statuses(memory: ConversationMemory) -> list[tuple[str, TurnStatus]]:
    return [(m.text, m.status) for m in memory.messages()]


def test_a_model_call_retried_by_an_outer_middleware_completes_the_turn() -> None:
    sessions = ConvMemSessions()
    agent = retried_agent(flaky("Hello!", failing_calls={1}), sessions)
    agent.invoke(ask("Hi"), CONFIG)
    assert statuses(sessions.memory("t1")) == [("Hi", TurnStatus.COMPLETED), ("Hello!", TurnStatus.COMPLETED)]


async def test_a_model_call_retried_by_an_outer_middleware_completes_the_turn_async() -> None:
    sessions = ConvMemSessions()
    agent = retried_agent(flaky("Hello!", failing_calls={1}), sessions)
    await agent.ainvoke(ask("Hi"), CONFIG)
    assert statuses(sessions.memory("t1")) == [("Hi", TurnStatus.COMPLETED), ("Hello!", TurnStatus.COMPLETED)]


def test_a_retry_after_a_tool_step_completes_every_step_of_the_turn() -> None:
    sessions = ConvMemSessions()
    agent = retried_agent(flaky(weather_call("Oslo"), "Sunny in Oslo.", failing_calls={2}), sessions)
    agent.invoke(ask("Weather in Oslo?"), CONFIG)
    assert [status for _, status in statuses(sessions.memory("t1"))] == [TurnStatus.COMPLETED] * 4


def test_a_question_whose_call_was_retried_is_found_by_a_later_search() -> None:
    sessions = ConvMemSessions()
    agent = retried_agent(flaky("Noted.", failing_calls={1}), sessions)
    agent.invoke(ask("My bike is a red Bianchi."), {"configurable": {"thread_id": "t1", "user_id": "ana"}})
    found = ConvMemStore(sessions.store).search(
        ConvMemStore.conversations_namespace("ana"), query="Which bike do I ride?"
    )
    assert "My bike is a red Bianchi." in [item.value["text"] for item in found]


def test_a_run_that_raised_and_is_resumed_completes_its_turn() -> None:
    sessions = ConvMemSessions()
    model = flaky("Hello!", failing_calls={1})
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver())
    with pytest.raises(ConnectionError):
        agent.invoke(ask("Hi"), CONFIG)
    assert statuses(sessions.memory("t1")) == [("Hi", TurnStatus.FAILED)]
    agent.invoke(None, CONFIG)  # the checkpoint resumes the failed model call
    assert statuses(sessions.memory("t1")) == [("Hi", TurnStatus.COMPLETED), ("Hello!", TurnStatus.COMPLETED)]


@pytest.mark.parametrize("on_failure", ["error", "continue"])
def test_a_turn_whose_retries_run_out_stays_failed(on_failure: Literal["error", "continue"]) -> None:
    sessions = ConvMemSessions()
    agent = retried_agent(flaky("never", failing_calls={1, 2, 3}), sessions, on_failure=on_failure)
    if on_failure == "error":
        with pytest.raises(ConnectionError):
            agent.invoke(ask("Hi"), CONFIG)
    else:  # the retry middleware answers with the error
        assert "failed after 3 attempts" in agent.invoke(ask("Hi"), CONFIG)["messages"][-1].content
    assert statuses(sessions.memory("t1"))[0] == ("Hi", TurnStatus.FAILED)


async def test_a_turn_whose_retries_run_out_stays_failed_async() -> None:
    sessions = ConvMemSessions()
    agent = retried_agent(flaky("never", failing_calls={1, 2, 3}), sessions)
    await agent.ainvoke(ask("Hi"), CONFIG)
    assert statuses(sessions.memory("t1"))[0] == ("Hi", TurnStatus.FAILED)


def test_a_failed_turn_stays_failed_when_the_next_turn_is_retried_and_completes() -> None:
    sessions = ConvMemSessions()
    agent = retried_agent(flaky("Hello!", failing_calls={1, 2}), sessions, max_retries=1)
    agent.invoke(ask("Hi"), CONFIG)  # both attempts fail
    agent.invoke(ask("Hi again"), CONFIG)  # answered at once
    assert statuses(sessions.memory("t1"))[0] == ("Hi", TurnStatus.FAILED)
    assert statuses(sessions.memory("t1"))[-2:] == [
        ("Hi again", TurnStatus.COMPLETED),
        ("Hello!", TurnStatus.COMPLETED),
    ]

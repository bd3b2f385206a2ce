"""ConvMemMiddleware with langchain.agents.create_agent and fake tool-calling models."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.structured_output import ToolStrategy
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from pydantic import BaseModel
from scripted_models import ScriptedToolModel, flaky, scripted

from convmem import ConversationMemory, InvalidSessionIdError, MemoryConfig, TurnStatus
from langchain_convmem import ConvMemMiddleware, ConvMemSessions
from langchain_convmem._convert import MEMORY_MESSAGE_ID


def weather_call(city: str, call_id: str) -> AIMessage:
    return AIMessage("", tool_calls=[{"id": call_id, "name": "weather", "args": {"city": city}}])


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def thread(name: str) -> RunnableConfig:
    return {"configurable": {"thread_id": name}}


def ask(text: str) -> Any:
    """The agent input for one new user message."""
    return {"messages": [HumanMessage(text)]}


def stored(memory: ConversationMemory) -> list[tuple[str, str, TurnStatus]]:
    return [(m.role.value, m.text, m.status) for m in memory.messages()]


def assert_pairs_intact(messages: list[BaseMessage]) -> None:
    called = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    assert called == answered
    window = [m for m in messages if not isinstance(m, SystemMessage)]
    assert isinstance(window[0], HumanMessage)


@pytest.fixture
def sessions() -> Iterator[ConvMemSessions]:
    yield ConvMemSessions()


def test_a_tool_round_trip_is_stored_completed(sessions: ConvMemSessions) -> None:
    model = scripted(weather_call("Paris", "c1"), "It is sunny in Paris.")
    agent = create_agent(model, [weather], middleware=[ConvMemMiddleware(sessions)])
    result = agent.invoke(ask("Weather in Paris?"), thread("t1"))
    assert result["messages"][-1].content == "It is sunny in Paris."
    assert stored(sessions.memory("t1")) == [
        ("user", "Weather in Paris?", TurnStatus.COMPLETED),
        ("assistant", "", TurnStatus.COMPLETED),
        ("tool", "sunny in Paris", TurnStatus.COMPLETED),
        ("assistant", "It is sunny in Paris.", TurnStatus.COMPLETED),
    ]
    assert sessions.memory("t1").messages()[1].tool_calls[0]["args"] == {"city": "Paris"}


def test_steps_are_running_until_the_final_answer(sessions: ConvMemSessions) -> None:
    model = scripted(weather_call("Oslo", "c1"), "Cold but sunny.")
    statuses: list[list[TurnStatus]] = []
    original = model._generate

    def generate(messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        statuses.append([m.status for m in sessions.memory("t1").messages()])
        return original(messages, *args, **kwargs)

    object.__setattr__(model, "_generate", generate)
    agent = create_agent(model, [weather], middleware=[ConvMemMiddleware(sessions)])
    agent.invoke(ask("Weather in Oslo?"), thread("t1"))
    assert statuses == [[TurnStatus.RUNNING], [TurnStatus.RUNNING] * 3]


def test_without_a_checkpointer_the_history_comes_from_the_memory(sessions: ConvMemSessions) -> None:
    model = scripted("Nice to meet you, Ana.", "You are Ana.")
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)])
    agent.invoke(ask("I am Ana."), thread("t1"))
    agent.invoke(ask("Who am I?"), thread("t1"))
    memory, *conversation = [m for m in model.calls[-1] if not isinstance(m, SystemMessage)]
    assert memory.id == MEMORY_MESSAGE_ID and "name: Ana" in str(memory.content)
    assert [m.content for m in conversation] == ["I am Ana.", "Nice to meet you, Ana.", "Who am I?"]
    assert len(sessions.memory("t1").messages()) == 4


def test_the_context_memory_message_carries_what_the_memory_knows(sessions: ConvMemSessions) -> None:
    model = scripted("Hello Ana.", "You are Ana.")
    agent = create_agent(model, [], system_prompt="Agent prompt.", middleware=[ConvMemMiddleware(sessions)])
    agent.invoke(ask("My name is Ana."), thread("t1"))
    agent.invoke(ask("Who am I?"), thread("t1"))
    context = sessions.memory("t1").build_context("Who am I?", include_query=False)
    shown = model.calls[-1]
    assert shown[0] == SystemMessage("Agent prompt.")
    assert "Ana" in context.memory_text and "Ana" not in context.system_text
    assert isinstance(shown[1], HumanMessage) and shown[1].content == context.memory_text
    assert not any(isinstance(m, SystemMessage) and "Ana" in str(m.content) for m in shown)


def test_with_a_checkpointer_nothing_is_stored_twice(sessions: ConvMemSessions) -> None:
    model = scripted(weather_call("Rome", "c1"), "Sunny in Rome.", "You asked about Rome.")
    agent = create_agent(
        model, [weather], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver()
    )
    agent.invoke(ask("Weather in Rome?"), thread("t1"))
    agent.invoke(ask("What did I ask?"), thread("t1"))
    texts = [m.text for m in sessions.memory("t1").messages()]
    assert texts == [
        "Weather in Rome?",
        "",
        "sunny in Rome",
        "Sunny in Rome.",
        "What did I ask?",
        "You asked about Rome.",
    ]


def test_the_model_sees_a_trimmed_window_with_tool_pairs_intact() -> None:
    sessions = ConvMemSessions(config=MemoryConfig(keep_recent_turns=2, system_prompt="Use tools."))
    replies: list[AIMessage | str] = []
    for index in range(4):
        replies += [weather_call(f"city{index}", f"call-{index}"), f"Sunny in city{index}."]
    model = scripted(*replies)
    agent = create_agent(
        model, [weather], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver()
    )
    for index in range(4):
        agent.invoke(ask(f"Weather in city{index}?"), thread("t1"))
    last_call = model.calls[-1]
    assert isinstance(last_call[0], SystemMessage) and str(last_call[0].content).startswith("Use tools.")
    memory, *asked = [m for m in last_call if isinstance(m, HumanMessage)]
    assert memory.id == MEMORY_MESSAGE_ID
    assert "(Some earlier conversation is not included here.)" in str(memory.content)
    assert [m.content for m in asked] == ["Weather in city2?", "Weather in city3?"]
    assert_pairs_intact(last_call)
    for call in model.calls:
        assert_pairs_intact(call)
    assert len(sessions.memory("t1").messages()) == 16


def test_a_tight_budget_keeps_the_current_tool_exchange_whole() -> None:
    sessions = ConvMemSessions()
    replies: list[AIMessage | str] = [weather_call(f"c{i}", f"id-{i}") for i in range(6)] + ["Done."]
    model = scripted(*replies)
    agent = create_agent(model, [weather], middleware=[ConvMemMiddleware(sessions, budget=120)])
    agent.invoke(ask("Weather everywhere?"), thread("t1"))
    for call in model.calls:
        assert_pairs_intact(call)
    assert (
        isinstance(model.calls[-1][0], HumanMessage) and model.calls[-1][0].content == "Weather everywhere?"
    )
    assert len(sessions.memory("t1").messages()) == 14


def test_threads_are_separate_sessions(sessions: ConvMemSessions) -> None:
    model = scripted(*[f"answer {i}" for i in range(10)])
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)])
    agent.invoke(ask("I am in thread a"), thread("a"))
    agent.invoke(ask("I am in thread b"), thread("b"))
    assert [m.content for m in model.calls[-1]] == ["I am in thread b"]


def test_concurrent_threads_do_not_cross_talk(sessions: ConvMemSessions) -> None:
    errors: list[BaseException] = []

    def talk(name: str) -> None:
        try:
            model = scripted(*[f"{name} answer {i}" for i in range(5)])
            agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)])
            for index in range(5):
                agent.invoke(ask(f"{name} question {index}"), thread(name))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    workers = [threading.Thread(target=talk, args=(f"t{n}",)) for n in range(5)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == []
    for n in range(5):
        texts = [m.text for m in sessions.memory(f"t{n}").messages()]
        assert all(text.startswith(f"t{n} ") for text in texts) and len(texts) == 10


async def test_async_agent_with_tools(sessions: ConvMemSessions) -> None:
    model = scripted(weather_call("Lima", "c1"), "Sunny in Lima.", "You asked about Lima.")
    agent = create_agent(
        model, [weather], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver()
    )
    await agent.ainvoke(ask("Weather in Lima?"), thread("t1"))
    result = await agent.ainvoke(ask("What did I ask?"), thread("t1"))
    assert result["messages"][-1].content == "You asked about Lima."
    assert [s for _, _, s in stored(sessions.memory("t1"))] == [TurnStatus.COMPLETED] * 6


async def test_async_threads_do_not_cross_talk(sessions: ConvMemSessions) -> None:
    async def talk(name: str) -> None:
        model = scripted(*[f"{name} answer {i}" for i in range(3)])
        agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)])
        for index in range(3):
            await agent.ainvoke(ask(f"{name} question {index}"), thread(name))

    await asyncio.gather(*(talk(f"a{n}") for n in range(4)))
    for n in range(4):
        assert all(m.text.startswith(f"a{n} ") for m in sessions.memory(f"a{n}").messages())


def test_a_failing_model_marks_the_turn_failed(sessions: ConvMemSessions) -> None:
    class Broken(ScriptedToolModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("provider down")

    agent = create_agent(Broken(messages=iter([]), calls=[]), [], middleware=[ConvMemMiddleware(sessions)])
    with pytest.raises(RuntimeError, match="provider down"):
        agent.invoke(ask("Hello?"), thread("t1"))
    assert stored(sessions.memory("t1")) == [("user", "Hello?", TurnStatus.FAILED)]


def test_another_writers_running_turn_is_not_cancelled_by_a_new_question() -> None:
    memory = ConversationMemory("fixed")
    memory.add_turn("Asked in another tab", status="running")
    agent = create_agent(scripted("Here now."), [], middleware=[ConvMemMiddleware(memory=memory)])
    agent.invoke(ask("Anyone?"))
    assert stored(memory) == [
        ("user", "Asked in another tab", TurnStatus.RUNNING),
        ("user", "Anyone?", TurnStatus.COMPLETED),
        ("assistant", "Here now.", TurnStatus.COMPLETED),
    ]


def test_a_run_left_unfinished_in_a_thread_is_cancelled_by_the_threads_next_question(
    sessions: ConvMemSessions,
) -> None:
    model = scripted(weather_call("Oslo", "c1"), "Hello again.")
    agent = create_agent(
        model,
        [weather],
        middleware=[ConvMemMiddleware(sessions)],
        checkpointer=InMemorySaver(),
        interrupt_before=["tools"],
    )
    agent.invoke(ask("Weather in Oslo?"), thread("t1"))  # stops before the tool runs
    assert [s for _, _, s in stored(sessions.memory("t1"))] == [TurnStatus.RUNNING] * 2
    agent.invoke(ask("Never mind. Hello!"), thread("t1"))
    assert stored(sessions.memory("t1")) == [
        ("user", "Weather in Oslo?", TurnStatus.CANCELLED),
        ("assistant", "", TurnStatus.CANCELLED),
        ("user", "Never mind. Hello!", TurnStatus.COMPLETED),
        ("assistant", "Hello again.", TurnStatus.COMPLETED),
    ]


def test_messages_stored_outside_langchain_are_not_duplicated() -> None:
    memory = ConversationMemory("fixed")
    memory.add_turn("I live in Hangzhou.", "Noted.")
    model = scripted("First.", "Second.")
    agent = create_agent(
        model, [], middleware=[ConvMemMiddleware(memory=memory)], checkpointer=InMemorySaver()
    )
    agent.invoke(ask("Where do I live?"), thread("x"))
    agent.invoke(ask("Again?"), thread("x"))
    assert [m.text for m in memory.messages()] == [
        "I live in Hangzhou.",
        "Noted.",
        "Where do I live?",
        "First.",
        "Again?",
        "Second.",
    ]


def test_missing_thread_id_gives_a_clear_error(sessions: ConvMemSessions) -> None:
    agent = create_agent(scripted("hi"), [], middleware=[ConvMemMiddleware(sessions)])
    with pytest.raises(InvalidSessionIdError, match="thread_id"):
        agent.invoke(ask("hi"))


def test_user_id_in_config_scopes_the_session(sessions: ConvMemSessions) -> None:
    agent = create_agent(scripted("a", "b"), [], middleware=[ConvMemMiddleware(sessions)])
    agent.invoke(ask("for ana"), {"configurable": {"thread_id": "1", "user_id": "ana"}})
    agent.invoke(ask("for bo"), {"configurable": {"thread_id": "1", "user_id": "bo"}})
    assert [m.text for m in sessions.memory("1", "ana").messages()] == ["for ana", "a"]


def test_without_langchain_the_middleware_explains_what_to_install() -> None:
    script = (
        "import sys\n"
        "sys.modules['langchain'] = None\n"
        "sys.modules['langchain.agents'] = None\n"
        "sys.modules['langchain.agents.middleware'] = None\n"
        "import langchain_convmem\n"
        "langchain_convmem.ConvMemChatMessageHistory()\n"
        "try:\n"
        "    langchain_convmem.ConvMemMiddleware()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert "needs the 'langchain' package" in result.stdout
    assert "pip install" in result.stdout


def test_an_empty_human_message_is_a_turn(sessions: ConvMemSessions) -> None:
    model = scripted("Did you mean to say something?")
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)])
    agent.invoke({"messages": [HumanMessage("")]}, thread("empty"))
    assert stored(sessions.memory("empty")) == [
        ("user", "", TurnStatus.COMPLETED),
        ("assistant", "Did you mean to say something?", TurnStatus.COMPLETED),
    ]
    assert [m.content for m in model.calls[0] if isinstance(m, HumanMessage)] == [""]


class City(BaseModel):
    city: str


def test_a_structured_response_completes_the_turn(sessions: ConvMemSessions) -> None:
    answer = AIMessage("", tool_calls=[{"id": "s1", "name": "City", "args": {"city": "Paris"}}])
    agent = create_agent(
        scripted(answer, "Hello again."),
        [],
        middleware=[ConvMemMiddleware(sessions)],
        response_format=ToolStrategy(City),
        checkpointer=InMemorySaver(),
    )
    result = agent.invoke(ask("Where is the Louvre?"), thread("so"))
    assert result["structured_response"] == City(city="Paris")
    statuses = [status for _, _, status in stored(sessions.memory("so"))]
    assert statuses == [TurnStatus.COMPLETED] * 3


def test_a_structured_turn_is_not_cancelled_by_the_next_one(sessions: ConvMemSessions) -> None:
    paris = AIMessage("", tool_calls=[{"id": "s1", "name": "City", "args": {"city": "Paris"}}])
    also_paris = AIMessage("", tool_calls=[{"id": "s2", "name": "City", "args": {"city": "Paris"}}])
    agent = create_agent(
        scripted(paris, also_paris),
        [],
        middleware=[ConvMemMiddleware(sessions)],
        response_format=ToolStrategy(City),
        checkpointer=InMemorySaver(),
    )
    agent.invoke(ask("Where is the Louvre?"), thread("so2"))
    agent.invoke(ask("And the Orsay?"), thread("so2"))
    assert TurnStatus.CANCELLED not in {status for _, _, status in stored(sessions.memory("so2"))}


def test_a_reused_message_id_without_a_checkpointer_is_still_new_input(sessions: ConvMemSessions) -> None:
    model = scripted("First answer.", "Second answer.")
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)])
    agent.invoke({"messages": [HumanMessage("one", id="msg-1")]}, thread("ids2"))
    agent.invoke({"messages": [HumanMessage("two", id="msg-1")]}, thread("ids2"))
    assert [text for _, text, _ in stored(sessions.memory("ids2"))] == [
        "one",
        "First answer.",
        "two",
        "Second answer.",
    ]
    assert [m.content for m in model.calls[1] if isinstance(m, HumanMessage)] == ["one", "two"]


@tool
def hand_over(question: str, runtime: ToolRuntime) -> Command:
    """Hand the question over to billing."""
    return Command(
        update={
            "messages": [
                ToolMessage(f"handed over: {question}", tool_call_id=runtime.tool_call_id),
                AIMessage("(transferred to billing)"),
            ]
        }
    )


@pytest.mark.parametrize("model_fails", [False, True])
def test_an_ai_message_a_tools_command_adds_does_not_end_the_turn(
    sessions: ConvMemSessions, model_fails: bool
) -> None:
    """A handoff note the tool put in the state is a step: the model is called after it,
    and its answer (or its failure) settles the turn."""
    call = AIMessage("", tool_calls=[{"id": "h1", "name": "hand_over", "args": {"question": "refund"}}])
    model = flaky(call, "Billing here: refunded.", failing_calls={2} if model_fails else set())
    agent = create_agent(
        model, [hand_over], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver()
    )
    if model_fails:
        with pytest.raises(ConnectionError):
            agent.invoke(ask("Refund please"), thread("t"))
    else:
        agent.invoke(ask("Refund please"), thread("t"))
    log = sessions.memory("t").messages()
    expected = TurnStatus.FAILED if model_fails else TurnStatus.COMPLETED
    assert {m.status for m in log} == {expected}
    assert [m.reply_to_seq for m in log[1:]] == [1] * (len(log) - 1)
    assert log[-1].text == ("(transferred to billing)" if model_fails else "Billing here: refunded.")


@tool
def broken_lookup(city: str) -> str:
    """Look the city up (the service is down)."""
    raise RuntimeError("the lookup service is down")


@pytest.mark.parametrize("use_async", [False, True])
def test_a_tool_error_that_ends_the_run_marks_the_turn_failed(
    sessions: ConvMemSessions, use_async: bool
) -> None:
    """An error the tool node does not handle ends the run, as a model's does: FAILED, not
    left RUNNING for the next question to cancel."""
    call = AIMessage("", tool_calls=[{"id": "b1", "name": "broken_lookup", "args": {"city": "Oslo"}}])
    agent = create_agent(
        scripted(call, "never reached"), [broken_lookup], middleware=[ConvMemMiddleware(sessions)]
    )
    with pytest.raises(RuntimeError, match="service is down"):
        if use_async:
            asyncio.run(agent.ainvoke(ask("Weather in Oslo?"), thread("t")))
        else:
            agent.invoke(ask("Weather in Oslo?"), thread("t"))
    assert {m.status for m in sessions.memory("t").messages()} == {TurnStatus.FAILED}


@tool
def book_table(time: str) -> str:
    """Book a table, once a person approves."""
    approved = interrupt({"book at": time})
    return f"booked at {time}" if approved else "not booked"


def test_a_tool_that_interrupts_leaves_the_turn_running_until_it_is_resumed(
    sessions: ConvMemSessions,
) -> None:
    call = AIMessage("", tool_calls=[{"id": "t1", "name": "book_table", "args": {"time": "19:00"}}])
    agent = create_agent(
        scripted(call, "Booked for 19:00."),
        [book_table],
        middleware=[ConvMemMiddleware(sessions)],
        checkpointer=InMemorySaver(),
    )
    assert agent.invoke(ask("Book a table at 19:00."), thread("t"))["__interrupt__"]
    assert {m.status for m in sessions.memory("t").messages()} == {TurnStatus.RUNNING}
    agent.invoke(Command(resume=True), thread("t"))
    log = sessions.memory("t").messages()
    assert {m.status for m in log} == {TurnStatus.COMPLETED}
    assert [m.text for m in log][-2:] == ["booked at 19:00", "Booked for 19:00."]

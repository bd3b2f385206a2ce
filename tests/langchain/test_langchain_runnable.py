"""with_convmem / ConvMemRunnable: context built for the new input, turns recorded with status."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncGenerator, Callable, Generator
from pathlib import Path
from typing import Any, cast

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda

from convmem import ConversationMemory, InvalidMessageError, InvalidSessionIdError, MemoryConfig, TurnStatus
from langchain_convmem import ConvMemRunnable, ConvMemSessions, with_convmem

PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Answer briefly."), MessagesPlaceholder("history"), ("human", "{question}")]
)


def runnable(func: Callable[..., Any]) -> Runnable[Any, Any]:
    """A RunnableLambda, typed loosely for these tests."""
    return RunnableLambda(func)


def config(session: str = "s1", **extra: Any) -> RunnableConfig:
    return {"configurable": {"session_id": session, **extra}}


class Spy:
    """Records the messages each model call was given."""

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def __call__(self, prompt_value: Any) -> Any:
        messages = prompt_value.to_messages() if hasattr(prompt_value, "to_messages") else list(prompt_value)
        self.calls.append(messages)
        return prompt_value


def fake_model(*answers: str) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=itertools.cycle(answers or ("ok",)))


def keyed_chain(
    sessions: ConvMemSessions, spy: Spy, model: Runnable[Any, Any] | None = None
) -> ConvMemRunnable:
    return with_convmem(
        PROMPT | runnable(spy) | (model or fake_model("noted")),
        sessions,
        input_messages_key="question",
        history_messages_key="history",
    )


def log(sessions: ConvMemSessions, session: str = "s1") -> list[tuple[str, str, TurnStatus]]:
    return [(m.role.value, m.text, m.status) for m in sessions.memory(session).messages()]


def test_the_chain_sees_the_history_under_the_prompt_variable() -> None:
    sessions, spy = ConvMemSessions(), Spy()
    chain = keyed_chain(sessions, spy)
    chain.invoke({"question": "My dog is Duoduo."}, config())
    chain.invoke({"question": "What is my dog called?"}, config())
    assert spy.calls[-1] == [
        SystemMessage("Answer briefly."),
        HumanMessage("My dog is Duoduo."),
        AIMessage("noted", id=spy.calls[-1][2].id),
        HumanMessage("What is my dog called?"),
    ]


def test_a_completed_turn_is_recorded_with_its_answer() -> None:
    sessions = ConvMemSessions()
    keyed_chain(sessions, Spy()).invoke({"question": "hi there"}, config())
    assert log(sessions) == [
        ("user", "hi there", TurnStatus.COMPLETED),
        ("assistant", "noted", TurnStatus.COMPLETED),
    ]


def test_a_failing_chain_marks_the_turn_failed_and_reraises() -> None:
    sessions = ConvMemSessions()

    def broken(_: Any) -> str:
        raise RuntimeError("model down")

    chain = with_convmem(
        PROMPT | runnable(broken),
        sessions,
        input_messages_key="question",
        history_messages_key="history",
    )
    with pytest.raises(RuntimeError, match="model down"):
        chain.invoke({"question": "will this work?"}, config())
    assert log(sessions) == [("user", "will this work?", TurnStatus.FAILED)]
    assert sessions.memory("s1").turns()[-1].status is TurnStatus.FAILED


async def test_a_failing_async_chain_marks_the_turn_failed() -> None:
    sessions = ConvMemSessions()

    async def broken(_: Any) -> str:
        raise RuntimeError("model down")

    chain = with_convmem(
        PROMPT | runnable(broken),
        sessions,
        input_messages_key="question",
        history_messages_key="history",
    )
    with pytest.raises(RuntimeError):
        await chain.ainvoke({"question": "async?"}, config())
    assert log(sessions) == [("user", "async?", TurnStatus.FAILED)]


async def test_a_cancelled_async_call_marks_the_turn_cancelled() -> None:
    sessions = ConvMemSessions()
    started = asyncio.Event()

    async def slow(_: Any) -> str:
        started.set()
        await asyncio.sleep(30)
        return "too late"

    chain = with_convmem(
        PROMPT | runnable(slow), sessions, input_messages_key="question", history_messages_key="history"
    )
    task = asyncio.create_task(chain.ainvoke({"question": "long one"}, config()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log(sessions) == [("user", "long one", TurnStatus.CANCELLED)]


def test_the_question_is_running_while_the_chain_runs() -> None:
    sessions = ConvMemSessions()
    during: list[TurnStatus] = []

    def model(_: Any) -> str:
        during.append(sessions.memory("s1").messages()[-1].status)
        return "done"

    with_convmem(
        PROMPT | runnable(model),
        sessions,
        input_messages_key="question",
        history_messages_key="history",
    ).invoke({"question": "q"}, config())
    assert during == [TurnStatus.RUNNING]
    assert sessions.memory("s1").messages()[0].status is TurnStatus.COMPLETED


def test_recall_gets_the_new_input_as_query(monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = ConvMemSessions()
    memory = sessions.memory("s1")
    queries: list[str | None] = []
    original = memory.build_context

    def spy_build(query: str | None = None, budget: int | None = None, **kwargs: Any) -> Any:
        queries.append(query)
        return original(query, budget, **kwargs)

    monkeypatch.setattr(memory, "build_context", spy_build)
    keyed_chain(sessions, Spy()).invoke({"question": "Where do I live?"}, config())
    assert queries == ["Where do I live?"]


def test_the_budget_counts_the_new_input() -> None:
    sessions = ConvMemSessions()
    memory = sessions.memory("s1")
    for index in range(30):
        memory.add_turn(f"question {index} " * 10, f"answer {index} " * 10)
    spy = Spy()
    chain = with_convmem(
        PROMPT | runnable(spy) | fake_model(),
        sessions,
        input_messages_key="question",
        history_messages_key="history",
        budget=300,
    )
    long_question = "why " * 150
    chain.invoke({"question": long_question}, config())
    short = with_convmem(
        PROMPT | runnable(spy) | fake_model(),
        sessions,
        input_messages_key="question",
        history_messages_key="history",
        budget=300,
    )
    short.invoke({"question": "why"}, config())
    history_long, history_short = len(spy.calls[0]), len(spy.calls[1])
    assert history_long < history_short


def test_without_history_key_the_context_precedes_the_input_messages() -> None:
    sessions, spy = ConvMemSessions(config=MemoryConfig(system_prompt="Be kind.")), Spy()
    chain = with_convmem(runnable(spy) | fake_model("fine"), sessions)
    chain.invoke([HumanMessage("first")], config())
    chain.invoke("second", config())
    assert [type(m).__name__ for m in spy.calls[-1]] == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "HumanMessage",
    ]
    assert spy.calls[-1][-1] == HumanMessage("second")


def test_dict_input_without_history_key_gets_the_context_in_the_messages_key() -> None:
    sessions, seen = ConvMemSessions(), []

    def model(value: dict[str, Any]) -> str:
        seen.append(value["messages"])
        return "ok"

    chain = with_convmem(runnable(model), sessions, input_messages_key="messages")
    chain.invoke({"messages": [HumanMessage("one")]}, config())
    chain.invoke({"messages": [HumanMessage("two")]}, config())
    assert seen[-1] == [HumanMessage("one"), AIMessage("ok"), HumanMessage("two")]


def test_dict_output_is_recorded_from_its_messages_key() -> None:
    sessions = ConvMemSessions()
    chain = with_convmem(
        runnable(lambda value: {"answer": AIMessage("from a dict"), "sources": ["a"]}),
        sessions,
        input_messages_key="question",
        output_messages_key="answer",
    )
    chain.invoke({"question": "q"}, config())
    assert log(sessions)[-1] == ("assistant", "from a dict", TurnStatus.COMPLETED)


def test_stream_records_the_whole_answer_when_it_ends() -> None:
    sessions = ConvMemSessions()
    chain = keyed_chain(sessions, Spy(), fake_model("a rather long streamed answer"))
    chunks = list(chain.stream({"question": "stream it"}, config()))
    assert len(chunks) > 3 and all(isinstance(c, AIMessageChunk) for c in chunks)
    assert log(sessions) == [
        ("user", "stream it", TurnStatus.COMPLETED),
        ("assistant", "a rather long streamed answer", TurnStatus.COMPLETED),
    ]


async def test_astream_records_the_whole_answer_when_it_ends() -> None:
    sessions = ConvMemSessions()
    chain = keyed_chain(sessions, Spy(), fake_model("streamed asynchronously"))
    chunks = [chunk async for chunk in chain.astream({"question": "astream it"}, config())]
    assert "".join(str(c.content) for c in chunks) == "streamed asynchronously"
    assert log(sessions)[-1] == ("assistant", "streamed asynchronously", TurnStatus.COMPLETED)


def test_a_stream_abandoned_early_is_recorded_as_cancelled() -> None:
    sessions = ConvMemSessions()
    chain = keyed_chain(sessions, Spy(), fake_model("one two three four"))
    stream = cast(Generator[Any, None, None], chain.stream({"question": "stop me"}, config()))
    next(stream)
    stream.close()
    assert log(sessions)[0] == ("user", "stop me", TurnStatus.CANCELLED)
    assert log(sessions)[-1][2] is TurnStatus.CANCELLED


async def test_an_async_stream_abandoned_early_is_recorded_as_cancelled() -> None:
    sessions = ConvMemSessions()
    chain = keyed_chain(sessions, Spy(), fake_model("one two three four"))
    stream = cast(AsyncGenerator[Any, None], chain.astream({"question": "stop me"}, config()))
    async with contextlib.aclosing(stream):
        async for _ in stream:
            break
    await asyncio.sleep(0)
    assert log(sessions)[0] == ("user", "stop me", TurnStatus.CANCELLED)


def test_an_async_stream_left_open_when_its_event_loop_ends_is_closed_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The stream still referenced when `asyncio.run` ends: the loop closes the generators
    left, and the turn is recorded without an error from closing one twice."""
    sessions = ConvMemSessions()
    chain = keyed_chain(sessions, Spy(), fake_model("one two three four"))

    async def read_one() -> Any:
        stream = chain.astream({"question": "stop me"}, config())
        async for _ in stream:
            break
        return stream

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        kept = asyncio.run(read_one())
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    assert log(sessions)[0] == ("user", "stop me", TurnStatus.CANCELLED)
    del kept


def test_a_stream_that_raises_marks_the_turn_failed() -> None:
    sessions = ConvMemSessions()

    def explode(_: Any) -> Any:
        raise RuntimeError("broken stream")

    chain = with_convmem(
        PROMPT | runnable(explode),
        sessions,
        input_messages_key="question",
        history_messages_key="history",
    )
    with pytest.raises(RuntimeError):
        list(chain.stream({"question": "q"}, config()))
    assert log(sessions) == [("user", "q", TurnStatus.FAILED)]


async def test_sessions_run_concurrently_without_cross_talk() -> None:
    sessions = ConvMemSessions()
    chain = with_convmem(
        runnable(
            lambda messages: " | ".join(str(m.content) for m in messages if isinstance(m, HumanMessage))
        ),
        sessions,
    )

    async def talk(name: str) -> str:
        answer = ""
        for index in range(4):
            answer = await chain.ainvoke(f"{name}-{index}", config(name))
        return answer

    answers = await asyncio.gather(*(talk(f"user{n}") for n in range(6)))
    for n, answer in enumerate(answers):
        assert answer == " | ".join(f"user{n}-{i}" for i in range(4))


def test_batch_runs_each_input_in_its_own_session() -> None:
    sessions = ConvMemSessions()
    chain = with_convmem(runnable(lambda messages: f"{len(messages)} messages"), sessions)
    chain.batch(["a", "b"], [config("x"), config("y")])
    assert [m.text for m in sessions.memory("x").messages()] == ["a", "1 messages"]
    assert [m.text for m in sessions.memory("y").messages()] == ["b", "1 messages"]


def test_user_id_scopes_the_session() -> None:
    sessions = ConvMemSessions()
    chain = with_convmem(runnable(lambda messages: str(len(messages))), sessions)
    chain.invoke("hello", config("1", user_id="ana"))
    assert chain.invoke("hello", config("1", user_id="bo")) == "1"
    assert sessions.memory("1", "ana").user_id == "ana"


def test_persists_in_sqlite(tmp_path: Path) -> None:
    chain = with_convmem(runnable(lambda messages: "ok"), path=tmp_path / "chat.db")
    chain.invoke("remember this", config())
    reopened = ConversationMemory.open("s1", path=tmp_path / "chat.db")
    assert [m.text for m in reopened.messages()] == ["remember this", "ok"]


def test_config_specs_name_the_session_and_user() -> None:
    chain = with_convmem(runnable(lambda messages: "ok"))
    assert {"session_id", "user_id"} <= {spec.id for spec in chain.config_specs}


def test_missing_session_id_gives_a_clear_error() -> None:
    chain = with_convmem(runnable(lambda messages: "ok"))
    with pytest.raises(InvalidSessionIdError, match=r"config\['configurable'\]\['session_id'\]"):
        chain.invoke("hi")


def test_bad_input_is_refused_before_anything_is_stored() -> None:
    sessions = ConvMemSessions()
    chain = with_convmem(runnable(lambda messages: "ok"), sessions)
    with pytest.raises(InvalidMessageError):
        chain.invoke(42, config())
    with pytest.raises(InvalidMessageError):
        chain.invoke([("human", "a tuple")], config())
    assert sessions.memory("s1").messages() == []


def test_history_key_needs_a_dict_input() -> None:
    chain = with_convmem(runnable(lambda value: "ok"), history_messages_key="history")
    with pytest.raises(InvalidMessageError, match="must be a dict"):
        chain.invoke("plain string", config())


def test_unrecordable_output_fails_the_turn_with_a_clear_error() -> None:
    sessions = ConvMemSessions()
    chain = with_convmem(runnable(lambda messages: 42), sessions)
    with pytest.raises(InvalidMessageError, match="cannot record"):
        chain.invoke("q", config())
    assert log(sessions) == [("user", "q", TurnStatus.FAILED)]

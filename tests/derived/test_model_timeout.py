"""A hung model: summaries and fact extraction give up at ``model_timeout``, inline and in the
background, lose nothing, are retried later, and one hung session never starves the others.

Nothing here is timed: a test shows that a call returned while the scripted model still
hangs (``in_flight``), and releases the model when it ends."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
from collections.abc import Callable, Iterator, Sequence

import pytest
from scripted_llm import AsyncHangingLLM, HangingLLM

from convmem import (
    ConfigError,
    ConversationMemory,
    Fact,
    InMemoryStore,
    LLMFactExtractor,
    LLMSummarizer,
    MemoryConfig,
    Message,
    ModelTimeoutError,
    RuleFactExtractor,
)
from convmem._derived.background import ModelCalls, model_calls

SUMMARY = "The user is called Quill and lives in Oslo."


def answering(answer: str) -> Callable[[str], str]:
    """A model that answers every prompt at once, always the same."""
    return lambda prompt: answer


def config(**changes: object) -> MemoryConfig:
    """Summarize after every evicted turn, keep one turn raw, give a model 0.2 s."""
    return MemoryConfig(
        keep_recent_turns=1, summary_trigger="turns", summary_every_turns=1, language="en", model_timeout=0.2
    ).replace(**changes)


@pytest.fixture
def models() -> Iterator[list[HangingLLM]]:
    """Hanging models made by a test; each is released when the test ends."""
    made: list[HangingLLM] = []
    yield made
    for model in made:
        model.release()


def hanging(models: list[HangingLLM], answer: str = SUMMARY, *, asynchronous: bool = False) -> HangingLLM:
    model = (AsyncHangingLLM if asynchronous else HangingLLM)(answer)
    models.append(model)
    return model


def hung_memory(
    models: list[HangingLLM], session_id: str = "s", store: InMemoryStore | None = None, **changes: object
) -> tuple[ConversationMemory, HangingLLM, HangingLLM]:
    summary_model, fact_model = hanging(models), hanging(models, "[]")
    memory = ConversationMemory(
        session_id,
        store or InMemoryStore(),
        config(**changes),
        summarizer=LLMSummarizer(summary_model),
        fact_extractor=LLMFactExtractor(fact_model),
    )
    return memory, summary_model, fact_model


def test_the_model_timeout_is_validated() -> None:
    assert MemoryConfig().model_timeout == 30.0
    for bad in (0, -1, float("nan"), float("inf"), "30", True):
        with pytest.raises(ConfigError, match="model_timeout"):
            MemoryConfig(model_timeout=bad)  # type: ignore[arg-type]


def test_an_inline_add_returns_while_the_model_still_hangs(
    models: list[HangingLLM], caplog: pytest.LogCaptureFixture
) -> None:
    memory, summary_model, fact_model = hung_memory(models)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        memory.add_turn("My name is Quill and I live in Oslo.", "Hello Quill.")
        memory.add_turn("What should I cook tonight?", "Try a risotto.")
    assert fact_model.in_flight == 1 and summary_model.in_flight == 1  # still hanging
    assert [m.text for m in memory.messages()][-1] == "Try a risotto."
    assert len(memory.messages()) == 4
    assert "model_timeout" in caplog.text
    window = memory.build_context(query="what should I cook?").messages
    assert "Try a risotto." in [m["content"] for m in window]


def test_the_work_is_retried_once_the_model_answers(models: list[HangingLLM]) -> None:
    store = InMemoryStore()
    memory, summary_model, fact_model = hung_memory(models, store=store)
    memory.add_turn("My name is Quill and I live in Oslo.", "Hello Quill.")
    memory.add_turn("What should I cook tonight?", "Try a risotto.")
    assert memory.summary().text == ""
    summary_model.release()
    fact_model.release()
    later = ConversationMemory(
        "s",
        store,
        config(),
        summarizer=LLMSummarizer(answering(SUMMARY)),
        fact_extractor=LLMFactExtractor(answering('[{"key": "name", "value": "Quill", "seq": 1}]')),
    )
    while summary_model.in_flight or fact_model.in_flight:  # the late calls end; their answers are dropped
        threading.Event().wait(0.01)
    later.add_turn("Thanks!", "You're welcome.")
    assert later.summary().text == SUMMARY
    assert [(f.key, f.value) for f in later.facts()] == [("name", "Quill")]


def test_a_hung_call_holds_one_thread_per_session_and_kind(models: list[HangingLLM]) -> None:
    store = InMemoryStore()
    summary_model, fact_model = hanging(models), hanging(models, "[]")
    for attempt in range(4):  # a new memory each time: no backoff holds the retry back
        memory = ConversationMemory(
            "s",
            store,
            config(),
            summarizer=LLMSummarizer(summary_model),
            fact_extractor=LLMFactExtractor(fact_model),
        )
        memory.add_turn(f"Question {attempt}: what is a risotto?", "A rice dish.")
    assert len(summary_model.prompts) == 1 and len(fact_model.prompts) == 1
    assert summary_model.in_flight == 1 and fact_model.in_flight == 1
    assert model_calls().late() >= 2


def test_summarize_now_raises_a_model_timeout(models: list[HangingLLM]) -> None:
    memory, summary_model, _ = hung_memory(models, summary_trigger="never")
    memory.add_turn("My name is Quill and I live in Oslo.", "Hello Quill.")
    memory.add_turn("What should I cook tonight?", "Try a risotto.")
    with pytest.raises(ModelTimeoutError, match="model_timeout"):
        memory.summarize_now()
    assert summary_model.in_flight == 1


def test_a_hung_session_does_not_starve_the_others_in_the_background(models: list[HangingLLM]) -> None:
    store = InMemoryStore()
    # More hung sessions (two kinds each) than the worker pool has threads, twice over.
    hung = [
        hung_memory(models, f"hung-{i}", store, background=True, background_timeout=30)[0] for i in range(10)
    ]
    for memory in hung:
        memory.add_turn("My name is Quill and I live in Oslo.", "Hello Quill.")
        memory.add_turn("What should I cook tonight?", "Try a risotto.")
    for memory in hung:
        assert memory.flush(timeout=60)
    healthy = ConversationMemory(
        "healthy",
        store,
        config(background=True, background_timeout=30),
        summarizer=LLMSummarizer(answering(SUMMARY)),
        fact_extractor=LLMFactExtractor(answering('[{"key": "name", "value": "Ada", "seq": 1}]')),
    )
    healthy.add_turn("My name is Ada.", "Hello Ada.")
    healthy.add_turn("What should I cook tonight?", "Try a risotto.")
    assert healthy.flush(timeout=60)
    assert healthy.summary().text == SUMMARY
    assert [(f.key, f.value) for f in healthy.facts()] == [("name", "Ada")]
    assert all(model.in_flight == 1 for model in models)  # the hung ones still hang
    for memory in [*hung, healthy]:
        memory.close()


@pytest.mark.parametrize("asynchronous_model", [True, False], ids=["async model", "sync model"])
def test_an_async_add_returns_while_the_model_still_hangs(
    models: list[HangingLLM], asynchronous_model: bool
) -> None:
    async def scenario() -> None:
        memories = []
        for index in range(8):  # more than the event loop's executor has threads
            summary_model = hanging(models, asynchronous=asynchronous_model)
            fact_model = hanging(models, "[]", asynchronous=asynchronous_model)
            memory = ConversationMemory(
                f"s{index}",
                InMemoryStore(),
                config(),
                summarizer=LLMSummarizer(summary_model),
                fact_extractor=LLMFactExtractor(fact_model),
            )
            await memory.aadd_turn("My name is Quill and I live in Oslo.", "Hello Quill.")
            await memory.aadd_turn("What should I cook tonight?", "Try a risotto.")
            assert summary_model.in_flight == 1 and fact_model.in_flight == 1
            memories.append(memory)
        # The hung calls hold no thread of the loop's executor: it still runs work at once.
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), timeout=60) == "free"
        assert [len(await m.amessages()) for m in memories] == [4] * 8

    asyncio.run(scenario())


class HangingRules:
    """The rule extractor behind a model call that hangs (a model that reads facts)."""

    def __init__(self, model: HangingLLM) -> None:
        self.model = model
        self.rules = RuleFactExtractor()

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        self.model("extract facts")
        return self.rules.extract(messages)

    async def aextract(self, messages: Sequence[Message]) -> list[Fact]:
        return self.extract(messages)


def test_an_edit_with_a_hung_model_drops_the_old_facts_and_reads_the_new_ones_later(
    models: list[HangingLLM],
) -> None:
    store = InMemoryStore()
    memory = ConversationMemory(
        "s", store, config(summary_trigger="never"), fact_extractor=RuleFactExtractor()
    )
    memory.add_turn("I live in Oslo.", "Nice.")
    assert [(f.key, f.value) for f in memory.facts()] == [("city", "Oslo")]

    model = hanging(models)
    editing = ConversationMemory(
        "s", store, config(summary_trigger="never"), fact_extractor=HangingRules(model)
    )
    editing.replace_message(1, {"role": "user", "content": "I live in Rome."})
    assert model.in_flight == 1  # the edit returned while the model hung
    assert editing.facts() == []  # nothing the old text said is served

    model.release()
    while model.in_flight:
        threading.Event().wait(0.01)
    later = ConversationMemory(
        "s", store, config(summary_trigger="never"), fact_extractor=RuleFactExtractor()
    )
    later.add_turn("Thanks!", "You're welcome.")
    assert [(f.key, f.value) for f in later.facts()] == [("city", "Rome")]


def test_past_the_limit_of_late_calls_no_model_call_starts(models: list[HangingLLM]) -> None:
    calls = ModelCalls(max_late=3)
    model = hanging(models)
    for key in range(3):
        with pytest.raises(ModelTimeoutError, match="took longer"):
            calls.call(key, lambda: model("hello"), timeout=0.05, what="a call")
    with pytest.raises(ModelTimeoutError, match="3 model calls in this process"):
        calls.call("another session", lambda: model("hello"), timeout=0.05, what="a call")
    assert len(model.prompts) == 3
    model.release()
    while model.in_flight:
        threading.Event().wait(0.01)
    assert calls.call("another session", lambda: "answered", timeout=5, what="a call") == "answered"
    assert calls.late() == 0


def test_a_late_async_call_whose_event_loop_closed_holds_no_key(models: list[HangingLLM]) -> None:
    """A call left running in a loop that is then closed never ends: it must not hold its
    key (and count against the process's limit of late calls) for the life of the process."""
    before = model_calls().late()
    summary_model = hanging(models, asynchronous=True)
    fact_model = hanging(models, "[]", asynchronous=True)
    store = InMemoryStore()

    def memory_of_a_request() -> ConversationMemory:  # a new one: no backoff holds a retry back
        return ConversationMemory(
            "closed loop",
            store,
            config(),
            summarizer=LLMSummarizer(summary_model),
            fact_extractor=LLMFactExtractor(fact_model),
        )

    memory = memory_of_a_request()
    loop = asyncio.new_event_loop()
    loop.run_until_complete(memory.aadd_turn("My name is Quill and I live in Oslo.", "Hello Quill."))
    loop.run_until_complete(memory.aadd_turn("What should I cook tonight?", "Try a risotto."))
    assert model_calls().late() == before + 2  # both calls outlived their deadline
    loop.close()  # with the calls still pending
    assert model_calls().late() == before
    asyncio.run(memory_of_a_request().aadd_turn("Thanks!", "You're welcome."))  # new calls start
    assert len(summary_model.prompts) == 2 and len(fact_model.prompts) == 2


def test_a_call_whose_caller_is_cancelled_holds_its_key_until_it_ends_and_its_failure_is_read() -> None:
    calls = ModelCalls()
    reported: list[str] = []

    async def scenario() -> None:
        asyncio.get_running_loop().set_exception_handler(
            lambda _, context: reported.append(context["message"])
        )
        started, release = asyncio.Event(), asyncio.Event()

        async def failing_model() -> str:
            started.set()
            await release.wait()
            raise RuntimeError("model exploded")

        async def answering_model() -> str:
            return "answered"

        caller = asyncio.create_task(calls.acall("key", failing_model, timeout=30, what="a call"))
        await asyncio.wait_for(started.wait(), 10)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        with pytest.raises(ModelTimeoutError, match="still running"):  # no second call beside it
            await calls.acall("key", answering_model, timeout=30, what="a call")
        release.set()

        async def ended() -> None:
            while calls.late():
                await asyncio.sleep(0)

        await asyncio.wait_for(ended(), 10)
        gc.collect()
        assert await calls.acall("key", answering_model, timeout=30, what="a call") == "answered"

    asyncio.run(scenario())
    gc.collect()
    assert reported == []  # nothing like "Task exception was never retrieved"

"""Background derived work run as asyncio tasks: per event loop, waited for by `flush` and
`aflush` from any thread, finished or cancelled by `close`.

Every wait here has a deadline, so a regression fails instead of hanging the suite."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Sequence

import pytest

from convmem import ConversationMemory, InMemoryStore, MemoryConfig, Message, RuleFactExtractor
from convmem._derived.facts import Fact

BACKGROUND = MemoryConfig(
    keep_recent_turns=1, summary_trigger="turns", summary_every_turns=1, background=True
)


class GatedExtractor(RuleFactExtractor):
    """The rule extractor, whose async calls wait until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.ended = 0

    async def aextract(self, messages: Sequence[Message]) -> list[Fact]:
        try:
            while not self.gate.is_set():
                await asyncio.sleep(0.01)
            return self.extract(messages)
        finally:
            self.ended += 1


def cities(memory: ConversationMemory) -> list[str]:
    return [fact.value for fact in memory.facts() if fact.key == "city"]


def test_a_memory_used_from_a_new_loop_after_its_loop_stopped_with_tasks_pending_catches_up() -> None:
    memory = ConversationMemory("s", InMemoryStore(), BACKGROUND)
    stopped = asyncio.new_event_loop()
    try:
        # The loop runs only the append: its tasks are still pending when it stops.
        stopped.run_until_complete(memory.aadd_turn("My dog is called Rex.", "Nice."))

        async def next_request() -> bool:
            await memory.aadd_turn("I live in Oslo.", "Cool.")
            return await asyncio.wait_for(memory.aflush(), 10)

        assert asyncio.run(next_request())
        assert cities(memory) == ["Oslo"]
        assert memory.summary().covers_through_seq == 2
        assert memory.flush(10)
        # Run again, the stopped loop ends its own tasks: late, and harmless.
        assert stopped.run_until_complete(asyncio.wait_for(memory.aflush(), 10))
        assert cities(memory) == ["Oslo"]
    finally:
        stopped.close()


# The closed loop's tasks never run: Python warns of their coroutines when they are freed.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_memory_whose_loop_was_closed_with_tasks_pending_runs_its_work_again() -> None:
    memory = ConversationMemory("s", InMemoryStore(), BACKGROUND)
    closed = asyncio.new_event_loop()
    closed.run_until_complete(memory.aadd_turn("I live in Oslo.", "Cool."))
    closed.close()

    async def next_request() -> bool:
        await memory.aadd_turn("My dog is called Rex.", "Nice.")
        return await asyncio.wait_for(memory.aflush(), 10)

    assert asyncio.run(next_request())
    assert cities(memory) == ["Oslo"]
    gc.collect()


def test_threads_each_running_a_loop_share_a_memory_and_each_aflush_returns() -> None:
    memory = ConversationMemory("s", InMemoryStore(), BACKGROUND)
    flushed: dict[int, object] = {}

    async def user(index: int) -> None:
        for turn in range(10):
            await memory.aadd_turn(f"I live in City{index}x{turn}.", "ok")
            await asyncio.sleep(0)
        flushed[index] = await asyncio.wait_for(memory.aflush(), 10)

    def run(index: int) -> None:
        try:
            asyncio.run(user(index))
        except BaseException as exc:  # reported by the assertion below
            flushed[index] = exc

    threads = [threading.Thread(target=run, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert flushed == {0: True, 1: True}
    last_said = [m.text for m in memory.messages() if m.role.value == "user"][-1]
    assert cities(memory) == [last_said.removeprefix("I live in ").rstrip(".")]


def test_flush_from_another_thread_waits_for_the_async_tasks() -> None:
    extractor = GatedExtractor()
    memory = ConversationMemory("s", InMemoryStore(), MemoryConfig(background=True), fact_extractor=extractor)

    async def scenario() -> tuple[bool, bool]:
        await memory.aadd_turn("I live in Oslo.", "Cool.")
        while_pending = await asyncio.to_thread(memory.flush, 0.2)
        extractor.gate.set()
        return while_pending, await asyncio.to_thread(memory.flush, 10)

    assert asyncio.run(scenario()) == (False, True)
    assert cities(memory) == ["Oslo"]


def test_flush_in_the_loop_s_own_thread_says_false_while_its_tasks_are_pending() -> None:
    extractor = GatedExtractor()
    memory = ConversationMemory("s", InMemoryStore(), MemoryConfig(background=True), fact_extractor=extractor)

    async def scenario() -> tuple[bool, bool]:
        await memory.aadd_turn("I live in Oslo.", "Cool.")
        blocked = memory.flush(5)  # sync, under a coroutine: the tasks cannot run meanwhile
        extractor.gate.set()
        return blocked, await asyncio.wait_for(memory.aflush(), 10)

    assert asyncio.run(scenario()) == (False, True)


def test_close_finishes_the_async_tasks_and_a_closed_memory_updates_inline() -> None:
    extractor = GatedExtractor()
    memory = ConversationMemory("s", InMemoryStore(), MemoryConfig(background=True), fact_extractor=extractor)

    async def scenario() -> None:
        await memory.aadd_turn("I live in Oslo.", "Cool.")
        threading.Timer(0.1, extractor.gate.set).start()
        await asyncio.wait_for(asyncio.to_thread(memory.close), 10)
        assert cities(memory) == ["Oslo"]
        await asyncio.wait_for(memory.aadd_turn("I moved to Bergen.", "Nice."), 10)
        assert cities(memory) == ["Bergen"]  # updated before aadd_turn returned

    asyncio.run(scenario())


def test_close_cancels_the_async_tasks_it_cannot_finish_in_time() -> None:
    extractor = GatedExtractor()
    memory = ConversationMemory("s", InMemoryStore(), MemoryConfig(background=True), fact_extractor=extractor)

    async def scenario() -> None:
        await memory.aadd_turn("I live in Oslo.", "Cool.")
        await asyncio.to_thread(memory._derived.close, 0.1)  # the memory's own close waits 5 s
        # Cancelled: nothing of this memory is left pending in the loop.
        assert await asyncio.wait_for(memory.aflush(), 10)
        assert cities(memory) == []
        extractor.gate.set()

        async def model_call_ended() -> None:  # its caller was cancelled, not the call itself
            while not extractor.ended:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(model_call_ended(), 10)
        await asyncio.wait_for(memory.aadd_turn("My dog is called Rex.", "Nice."), 10)
        assert cities(memory) == ["Oslo"]  # the next append caught up

    asyncio.run(scenario())

"""A scripted language model for tests of the LLM-backed summarizer and fact extractor."""

from __future__ import annotations

import asyncio
import threading


class FakeLLM:
    """A scripted model: returns the queued answers in order and records every prompt."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.answers:
            raise AssertionError(f"unexpected extra prompt: {prompt[:80]!r}")
        return self.answers.pop(0)


class AsyncFakeLLM(FakeLLM):
    async def __call__(self, prompt: str) -> str:  # type: ignore[override]
        await asyncio.sleep(0)
        return FakeLLM.__call__(self, prompt)


class HangingLLM:
    """A model that hangs: each call blocks until `release` (at most `hold_seconds`, so a
    failing test cannot hang the suite), then returns `answer`; later calls return at once.

    ``in_flight`` is how many calls have not returned: a test shows that the memory went
    on while the model still hung, without timing anything.
    """

    def __init__(self, answer: str = "[]", *, hold_seconds: float = 120.0) -> None:
        self.answer = answer
        self.hold_seconds = hold_seconds
        self.released = threading.Event()
        self.prompts: list[str] = []
        self._lock = threading.Lock()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def release(self) -> None:
        self.released.set()

    def _enter(self, prompt: str) -> None:
        with self._lock:
            self.prompts.append(prompt)
            self._in_flight += 1

    def _leave(self) -> str:
        with self._lock:
            self._in_flight -= 1
        return self.answer

    def __call__(self, prompt: str) -> str:
        self._enter(prompt)
        self.released.wait(self.hold_seconds)
        return self._leave()


class AsyncHangingLLM(HangingLLM):
    """`HangingLLM` as an ``async def`` model: it hangs in the event loop, not in a thread."""

    async def __call__(self, prompt: str) -> str:  # type: ignore[override]
        self._enter(prompt)
        deadline = asyncio.get_running_loop().time() + self.hold_seconds
        while not self.released.is_set() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        return self._leave()

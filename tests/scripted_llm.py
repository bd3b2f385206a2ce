"""A scripted language model for tests of the LLM-backed summarizer and fact extractor."""

from __future__ import annotations

import asyncio


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

"""Fake LangChain chat models: one answers from a script (or, flaky, fails the calls it is told
to), one answers the question it was shown; all accept tools and record their calls."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field


class ScriptedToolModel(GenericFakeChatModel):
    """Answers from a script, accepts tools, and records what each call was shown."""

    calls: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedToolModel:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        self.calls.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def scripted(*replies: AIMessage | str) -> ScriptedToolModel:
    return ScriptedToolModel(messages=iter(replies), calls=[])


class FlakyModel(ScriptedToolModel):
    """A `ScriptedToolModel` whose calls numbered in ``failing_calls`` (from 1) raise
    `ConnectionError` instead of answering, as a model behind a flaky network does."""

    failing_calls: set[int] = Field(default_factory=set)
    attempts: int = 0

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        self.attempts += 1
        if self.attempts in self.failing_calls:
            raise ConnectionError(f"call {self.attempts}: the connection dropped")
        return super()._generate(messages, stop, run_manager, **kwargs)


def flaky(*replies: AIMessage | str, failing_calls: set[int]) -> FlakyModel:
    return FlakyModel(messages=iter(replies), calls=[], failing_calls=failing_calls)


class EchoModel(GenericFakeChatModel):
    """Answers "answer to <the last human message it was shown>", so a test can tell which
    question the model saw last; records its calls.

    ``hold`` maps a question to an event: answering that question first sets ``started[question]``
    and then waits for the event (sync: a ``threading.Event``; async: an ``asyncio.Event``), so
    a test can run another request while this one is in flight.
    """

    calls: list[list[BaseMessage]] = Field(default_factory=list)
    hold: dict[str, Any] = Field(default_factory=dict)
    started: dict[str, Any] = Field(default_factory=dict)
    messages: Any = Field(default_factory=lambda: iter(()))

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> EchoModel:
        return self

    def _answer(self, messages: list[BaseMessage]) -> ChatResult:
        self.calls.append(list(messages))
        answer = AIMessage(f"answer to {self._question(messages)}")
        return ChatResult(generations=[ChatGeneration(message=answer)])

    @staticmethod
    def _question(messages: list[BaseMessage]) -> str:
        return next((str(m.text) for m in reversed(messages) if m.type == "human"), "")

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        question = self._question(messages)
        if question in self.hold:
            self.started[question].set()
            assert self.hold[question].wait(30), "the test never released the held request"
        return self._answer(messages)

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        question = self._question(messages)
        if question in self.hold:
            self.started[question].set()
            await asyncio.wait_for(self.hold[question].wait(), 30)
        return self._answer(messages)

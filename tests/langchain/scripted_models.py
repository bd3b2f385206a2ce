"""A fake LangChain chat model that answers from a script, accepts tools and records its calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
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

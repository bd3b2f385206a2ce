"""LangChain models as convmem parts: a ``complete`` callable and a token counter."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_core.language_models import BaseLanguageModel
from langchain_core.messages import BaseMessage

from convmem import ConfigError, Message
from convmem.integration import MAX_INT_OPTION

from ._convert import from_convmem_message

__all__ = [
    "ChatModelTokenCounter",
    "LangChainComplete",
    "complete_fn_from_langchain",
]

# What an image or audio part costs, whatever its payload: a count of its
# base64 characters would call one photo tens of thousands of tokens.
DEFAULT_MEDIA_PART_TOKENS = 85


def _check_model(model: object, what: str) -> BaseLanguageModel[Any]:
    if not isinstance(model, BaseLanguageModel):
        raise ConfigError(
            f"{what} needs a LangChain chat model or LLM (BaseChatModel / BaseLLM), got {type(model).__name__}"
        )
    return model


def _answer_text(answer: object) -> str:
    if isinstance(answer, BaseMessage):
        return str(answer.text)
    if isinstance(answer, str):
        return answer
    raise ConfigError(
        f"the model returned {type(answer).__name__}, not a message or a string: {answer!r:.80}"
    )


def _model_label(model: BaseLanguageModel[Any]) -> str:
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    kind = getattr(model, "_llm_type", type(model).__name__)
    return f"{kind}:{name}" if isinstance(name, str) and name else str(kind)


class LangChainComplete:
    """A convmem ``complete(prompt) -> str`` backed by a LangChain chat model or LLM.

    Calling it runs ``model.invoke(prompt)`` and returns the reply's text
    (reasoning and other non-text blocks are left out); ``await
    complete.acomplete(prompt)`` uses ``model.ainvoke``.
    """

    def __init__(self, model: BaseLanguageModel[Any]) -> None:
        self.model = _check_model(model, "complete_fn_from_langchain")

    def __repr__(self) -> str:
        return f"LangChainComplete({_model_label(self.model)!r})"

    def __call__(self, prompt: str) -> str:
        return _answer_text(self.model.invoke(prompt))

    async def acomplete(self, prompt: str) -> str:
        """The reply's text to `prompt`, from ``model.ainvoke``: calling the object, awaited."""
        return _answer_text(await self.model.ainvoke(prompt))


def complete_fn_from_langchain(
    model: BaseLanguageModel[Any], *, asynchronous: bool = False
) -> Callable[[str], str] | Callable[[str], Awaitable[str]]:
    """Turn a LangChain ``BaseChatModel`` or ``BaseLLM`` into a convmem ``complete`` callable.

    The result feeds the LLM summarizer and fact extractor::

        summarizer = LLMSummarizer(complete_fn_from_langchain(ChatOpenAI(model="gpt-4o-mini")))

    By default it is a sync callable (convmem's async methods run it in a
    thread); ``asynchronous=True`` returns an ``async def`` that awaits
    ``model.ainvoke`` instead, for async-only pipelines.
    """
    complete = LangChainComplete(model)
    if not asynchronous:
        return complete

    async def acomplete(prompt: str) -> str:
        return await complete.acomplete(prompt)

    return acomplete


class ChatModelTokenCounter:
    """convmem's `TokenCounter` on top of a LangChain model's own token counting.

    ``count_text`` is ``model.get_num_tokens(text)``; ``count_message`` is
    ``model.get_num_tokens_from_messages([message])`` minus what the model
    charges for an empty list (its reply priming, which convmem adds once per
    request), so per-message role and framing overhead is the model's own.
    Image, audio and other non-text parts cost ``media_part_tokens`` each
    instead of being counted by their base64 payload.

    Counting happens once per message, when it is stored; a counter that calls
    a remote tokenizer API makes every ``add`` wait for it.
    """

    def __init__(
        self, model: BaseLanguageModel[Any], *, media_part_tokens: int = DEFAULT_MEDIA_PART_TOKENS
    ) -> None:
        self.model = _check_model(model, "ChatModelTokenCounter")
        if (
            not isinstance(media_part_tokens, int)
            or isinstance(media_part_tokens, bool)
            or not 0 <= media_part_tokens <= MAX_INT_OPTION
        ):
            raise ConfigError(
                f"media_part_tokens must be a non-negative int (0 to {MAX_INT_OPTION}), "
                f"got {media_part_tokens!r:.60}"
            )
        self.media_part_tokens = media_part_tokens
        self.name = f"langchain:{_model_label(self.model)}"
        self._list_overhead: int | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ChatModelTokenCounter({self.name!r})"

    def count_text(self, text: str) -> int:
        """``model.get_num_tokens(text)``; 0 for empty text, without asking the model."""
        return int(self.model.get_num_tokens(text)) if text else 0

    def _empty_list_tokens(self) -> int:
        with self._lock:
            if self._list_overhead is None:
                try:
                    self._list_overhead = int(self.model.get_num_tokens_from_messages([]))
                except Exception:  # a model that cannot count an empty request charges nothing for it
                    self._list_overhead = 0
            return self._list_overhead

    def count_message(self, message: Message) -> int:
        """The model's count of `message` alone, less its reply priming; media parts cost
        ``media_part_tokens`` each."""
        media_parts = 0
        content = message.content
        if not isinstance(content, str):
            kept: list[Any] = []
            for part in content:
                if isinstance(part, str) or part.get("type") == "text":
                    kept.append(part)
                else:
                    media_parts += 1
            content = kept
        text_only = dataclasses.replace(message, content=content)
        counted = int(self.model.get_num_tokens_from_messages([from_convmem_message(text_only)]))
        return max(0, counted - self._empty_list_tokens()) + media_parts * self.media_part_tokens

"""Any LlamaIndex `LLM` as the ``complete(prompt) -> str`` callable convmem's
LLM summarizer and fact extractor take."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.base import BaseLLM

from convmem import ConfigError, FactExtractor, Summarizer
from convmem.integration import is_component

__all__ = [
    "acomplete_fn_from_llamaindex",
    "check_llm",
    "complete_fn_from_llamaindex",
    "described",
    "model_component",
]


def check_llm(llm: Any) -> BaseLLM:
    if not isinstance(llm, BaseLLM):
        raise ConfigError(
            f"llm must be a llama_index LLM (e.g. OpenAI(), MockLLM()), got {type(llm).__name__}"
        )
    return llm


def complete_fn_from_llamaindex(llm: BaseLLM) -> Callable[[str], str]:
    """A sync ``complete(prompt) -> str`` that asks `llm` (chat and completion models alike).

    From async code convmem runs it in a worker thread; use
    `acomplete_fn_from_llamaindex` for the model's native async client::

        from convmem import LLMSummarizer
        summarizer = LLMSummarizer(complete_fn_from_llamaindex(llm))
    """
    model = check_llm(llm)

    def complete(prompt: str) -> str:
        return model.complete(prompt).text

    return complete


def acomplete_fn_from_llamaindex(llm: BaseLLM) -> Callable[[str], Awaitable[str]]:
    """An async ``complete(prompt) -> str`` that awaits ``llm.acomplete``."""
    model = check_llm(llm)

    async def complete(prompt: str) -> str:
        return (await model.acomplete(prompt)).text

    return complete


def described(value: Any) -> str:
    """`value` as an error message names it: a short value by its repr, an object by its type."""
    if isinstance(value, (str, bytes, int, float)):
        return f"{type(value).__name__} {value!r:.60}"
    return type(value).__name__


# What each model component takes besides a LlamaIndex LLM, and the class that wraps
# a complete(prompt) -> str callable into one.
_COMPONENTS = {
    "summarizer": (Summarizer, "LLMSummarizer"),
    "fact_extractor": (FactExtractor, "LLMFactExtractor"),
}


def model_component(value: Any, kind: str) -> Any:
    """A convmem summarizer or fact extractor for `value`: a convmem one used as is, or
    one built around a LlamaIndex `LLM` (``kind`` is ``"summarizer"`` or ``"fact_extractor"``).
    Anything else is a `ConfigError` saying what to pass instead."""
    protocol, wrapper = _COMPONENTS[kind]
    if value is None or is_component(kind, value):
        return value
    if not isinstance(value, BaseLLM):
        expected = f"{kind} must be a llama_index LLM or a convmem {protocol.__name__}"
        if isinstance(value, BaseEmbedding):
            hint = "an embedding model finds earlier turns: pass it as embedder="
        elif callable(value):
            hint = (
                f"pass the LLM itself ({kind}=llm), or wrap a complete(prompt) -> str callable: "
                f"{kind}=convmem.{wrapper}(complete)"
            )
        else:
            hint = "e.g. OpenAI(model=...) or MockLLM()"
        raise ConfigError(f"{expected}, got {described(value)}; {hint}")
    complete = complete_fn_from_llamaindex(value)
    if kind == "summarizer":
        try:
            from convmem import LLMSummarizer
        except ImportError:  # pragma: no cover - depends on the installed convmem
            raise ConfigError("this convmem has no LLM summarizer; pass a Summarizer object") from None
        return LLMSummarizer(complete)
    try:
        from convmem import LLMFactExtractor
    except ImportError:
        raise ConfigError("this convmem has no LLM fact extractor; pass a FactExtractor object") from None
    return LLMFactExtractor(complete)

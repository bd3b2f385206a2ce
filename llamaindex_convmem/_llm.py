"""Any LlamaIndex `LLM` as the ``complete(prompt) -> str`` callable convmem's
LLM summarizer and fact extractor take."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from llama_index.core.base.llms.base import BaseLLM

from convmem import ConfigError

__all__ = ["acomplete_fn_from_llamaindex", "complete_fn_from_llamaindex", "model_component"]


def _check_llm(llm: Any) -> BaseLLM:
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
    model = _check_llm(llm)

    def complete(prompt: str) -> str:
        return model.complete(prompt).text

    return complete


def acomplete_fn_from_llamaindex(llm: BaseLLM) -> Callable[[str], Awaitable[str]]:
    """An async ``complete(prompt) -> str`` that awaits ``llm.acomplete``."""
    model = _check_llm(llm)

    async def complete(prompt: str) -> str:
        return (await model.acomplete(prompt)).text

    return complete


def model_component(value: Any, kind: str) -> Any:
    """A convmem summarizer or fact extractor for `value`: used as is, or built
    around a LlamaIndex `LLM` (``kind`` is ``"summarizer"`` or ``"fact_extractor"``)."""
    if value is None or not isinstance(value, BaseLLM):
        return value
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

"""LlamaIndex's ``tokenizer_fn`` convention as a convmem `TokenCounter`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from convmem import ConfigError, TextTokenCounter

__all__ = ["TokenizerFnCounter"]


class TokenizerFnCounter(TextTokenCounter):
    """Counts tokens with a LlamaIndex-style ``tokenizer_fn(text) -> list of tokens``.

    A message costs what convmem charges any message (per-message overhead,
    role, name, tool calls); only the text is counted by `tokenizer_fn`::

        from transformers import AutoTokenizer
        counter = TokenizerFnCounter(AutoTokenizer.from_pretrained("...").encode)
    """

    def __init__(self, tokenizer_fn: Callable[[str], Sequence[Any]], *, name: str | None = None) -> None:
        if not callable(tokenizer_fn):
            raise ConfigError(
                f"tokenizer_fn must be a callable text -> list of tokens, got {type(tokenizer_fn).__name__}"
            )
        self.tokenizer_fn = tokenizer_fn
        self.name = name or f"tokenizer_fn:{_describe(tokenizer_fn)}"

    def count_text(self, text: str) -> int:
        return len(self.tokenizer_fn(text))


def _describe(fn: Callable[..., Any]) -> str:
    target = getattr(fn, "func", fn)  # functools.partial, e.g. LlamaIndex's own tiktoken tokenizer
    owner = getattr(target, "__self__", None)
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or type(target).__module__
    encoding = getattr(owner, "name", None)
    return f"{module}.{qualname}" + (f"[{encoding}]" if isinstance(encoding, str) else "")

"""LlamaIndex's ``tokenizer_fn`` convention as a convmem `TokenCounter`."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from convmem import ConfigError
from convmem.integration import TextTokenCounter

__all__ = ["TokenizerFnCounter"]

# convmem message fields, as TextTokenCounter.count_fields receives them.
Content = str | list[str | dict[str, Any]]
ToolCall = dict[str, Any]


class TokenizerFnCounter(TextTokenCounter):
    """Counts tokens with a LlamaIndex-style ``tokenizer_fn(text) -> list of tokens``.

    A message costs what `ChatMemoryBuffer` charges for it: the tokens of its
    text, with no per-message or role overhead the tokenizer never asked for,
    so the same history and ``token_limit`` keep the same messages. Unlike
    `ChatMemoryBuffer`, a message's name, tool calls and tool call id are
    tokenized too (they reach the model), and images cost
    ``media_part_tokens``::

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

    def count_fields(
        self,
        role: str,
        content: Content,
        *,
        name: str | None = None,
        tool_calls: tuple[ToolCall, ...] | list[ToolCall] = (),
        tool_call_id: str | None = None,
    ) -> int:
        total = self.count_content(content)
        for text in (name, tool_call_id):
            if text:
                total += self.count_text(text)
        for call in tool_calls:
            args = json.dumps(call.get("args", {}), ensure_ascii=False, sort_keys=True)
            total += self.count_text(str(call.get("name", ""))) + self.count_text(args)
        return total


def _describe(fn: Callable[..., Any]) -> str:
    target = getattr(fn, "func", fn)  # functools.partial, e.g. LlamaIndex's own tiktoken tokenizer
    owner = getattr(target, "__self__", None)
    qualname = getattr(target, "__qualname__", None) or type(target).__qualname__
    module = getattr(target, "__module__", None) or type(target).__module__
    encoding = getattr(owner, "name", None)
    return f"{module}.{qualname}" + (f"[{encoding}]" if isinstance(encoding, str) else "")

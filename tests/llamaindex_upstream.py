"""Where the installed LlamaIndex (and the pydantic it runs on) breaks an upstream contract.

The contract tests mark a memory's test as an expected failure only where the dependency's
bug is, so a fresh install that resolves other versions runs them as plain tests. Each
bug is found by its behaviour (checked once per process) when that is cheap, else by the
version it was seen on: there the expected failure is strict, elsewhere it is not (a fixed
release shows up as XPASS instead of failing the suite, and a still broken one as XFAIL).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence

import pytest
from llama_index.core import __version__ as LLAMA_INDEX_CORE
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import ChatMemoryBuffer

__all__ = [
    "Deviation",
    "chat_memory_buffer_get_takes_input_first",
    "mark_deviation",
    "seen_on",
    "simple_chat_store_cannot_serialize",
]


@functools.cache
def simple_chat_store_cannot_serialize() -> bool:
    """Whether ``ChatMemoryBuffer.to_string`` fails once it holds a message (the
    ``SimpleChatStore`` serializer under pydantic 2.14 with llama-index-core 0.14.25)."""
    memory = ChatMemoryBuffer.from_defaults(chat_history=[ChatMessage(role=MessageRole.USER, content="x")])
    try:
        memory.to_string()
    except Exception:  # the bug raises pydantic's serialization error
        return True
    return False


@functools.cache
def chat_memory_buffer_get_takes_input_first() -> bool:
    """Whether ``ChatMemoryBuffer.get`` takes ``input`` first (llama-index-core 0.14), so
    ``get(initial_tokens)`` passes the int as the input."""
    parameters = [name for name in inspect.signature(ChatMemoryBuffer.get).parameters if name != "self"]
    return parameters[:1] == ["input"]


def seen_on(version: str) -> bool:
    """Whether the installed llama-index-core is the release a bug was seen on."""
    return str(LLAMA_INDEX_CORE) == version


class Deviation:
    """A contract some memories miss: which ones, why, and whether the bug is surely here."""

    def __init__(
        self, kinds: Sequence[str], reason: str, *, present: bool = True, certain: bool = True
    ) -> None:
        self.kinds = tuple(kinds) if present else ()
        self.reason = reason
        self.certain = certain


def mark_deviation(request: pytest.FixtureRequest, deviations: dict[str, Deviation], kind: str) -> None:
    """Mark the running test an expected failure for `kind` when its deviation applies here."""
    deviation = deviations.get(request.function.__name__)
    if deviation is not None and kind in deviation.kinds:
        request.node.add_marker(pytest.mark.xfail(strict=deviation.certain, reason=deviation.reason))

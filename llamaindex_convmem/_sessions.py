"""One `ConversationMemory` per session for a LlamaIndex object that may serve several.

LlamaIndex objects pick their session per call (``chat_store_key`` of a
buffer, ``session_id`` passed to a memory block). Everything here is keyed by
that id, and nothing about one call is remembered for the next, so one object
serving several sessions cannot leak one session into another.
"""

from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding

from convmem import (
    ApproximateCounter,
    ConfigError,
    ConversationMemory,
    InMemoryStore,
    MemoryConfig,
    Recall,
    Store,
    TiktokenCounter,
    TokenCounter,
    default_counter,
    open_store,
    validate_id,
)

from ._embeddings import LlamaIndexEmbedder
from ._llm import model_component
from ._tokenizer import TokenizerFnCounter

__all__ = ["SessionMemories", "counter_from_name", "resolve_counter"]

STORE_MEMORY = "memory"
STORE_SQLITE = "sqlite"
STORE_CUSTOM = "custom"


def coerce_memory_config(value: Any, default: Callable[[], MemoryConfig]) -> MemoryConfig:
    """A `MemoryConfig` from a field value: None (the default), a dict (as saved by
    `to_dict`) or a `MemoryConfig`; anything else is a `ConfigError`."""
    if value is None:
        return default()
    if isinstance(value, dict):
        return MemoryConfig.from_dict(value)
    if not isinstance(value, MemoryConfig):
        raise ConfigError(f"memory_config must be a MemoryConfig or a dict, got {type(value).__name__}")
    return value


def resolve_counter(
    counter: TokenCounter | None, tokenizer_fn: Callable[[str], Sequence[Any]] | None
) -> TokenCounter:
    """The counter to use: `counter`, else one around `tokenizer_fn`, else convmem's default."""
    if counter is not None and tokenizer_fn is not None:
        raise ConfigError("give counter or tokenizer_fn, not both")
    if counter is not None:
        if not isinstance(counter, TokenCounter):
            raise ConfigError(
                f"counter must be a convmem TokenCounter (e.g. TiktokenCounter()), got {type(counter).__name__}"
            )
        return counter
    if tokenizer_fn is not None:
        return TokenizerFnCounter(tokenizer_fn)
    return default_counter()


def counter_from_name(name: str) -> TokenCounter | None:
    """Rebuild a counter from its ``name`` (tiktoken and approximate ones); None when it cannot be."""
    default = default_counter()
    if name == default.name:
        return default
    if name.startswith("tiktoken:"):
        return TiktokenCounter(name.removeprefix("tiktoken:"))
    if name == ApproximateCounter.name:
        return ApproximateCounter()
    return None


def _core_parameters() -> Mapping[str, inspect.Parameter]:
    return inspect.signature(ConversationMemory.__init__).parameters


class SessionMemories:
    """The sessions of one store, each as a `ConversationMemory` sharing config and components."""

    def __init__(
        self,
        *,
        path: str | os.PathLike[str] | None,
        store: Store | None,
        config: MemoryConfig,
        counter: TokenCounter,
        user_id: str | None,
        summarizer: Any = None,
        fact_extractor: Any = None,
        embedder: Any = None,
        recall: Any = None,
        memory_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        if path is not None and store is not None:
            raise ConfigError("give path (a SQLite file) or store, not both")
        if store is not None and not isinstance(store, Store):
            raise ConfigError(f"store must be a convmem Store (e.g. SQLiteStore), got {type(store).__name__}")
        if store is not None:
            self.store: Store = store
            self.store_kind = STORE_CUSTOM
        elif path is not None:
            self.store = open_store(path)
            self.store_kind = STORE_SQLITE
        else:
            self.store = InMemoryStore()
            self.store_kind = STORE_MEMORY
        self.config = config
        self.counter = counter
        self.user_id = None if user_id is None else validate_id(user_id, "user_id")
        if embedder is not None and recall is not None:
            raise ConfigError("give embedder (recall with default settings) or recall, not both")
        if embedder is not None:
            recall = _recall_for(embedder, None if self.store_kind != STORE_SQLITE else path)
        self.core_kwargs = self._core_kwargs(summarizer, fact_extractor, recall, memory_kwargs or {})
        self._lock = threading.Lock()
        self._memories: dict[str, ConversationMemory] = {}

    @staticmethod
    def _core_kwargs(
        summarizer: Any, fact_extractor: Any, recall: Any, memory_kwargs: Mapping[str, Any]
    ) -> dict[str, Any]:
        wanted = {
            "summarizer": model_component(summarizer, "summarizer"),
            "fact_extractor": model_component(fact_extractor, "fact_extractor"),
            "recall": recall,
        }
        kwargs = {name: value for name, value in wanted.items() if value is not None}
        reserved = {"session_id", "store", "config", "user_id", "counter"} & set(memory_kwargs)
        if reserved:
            raise ConfigError(f"memory_kwargs may not set {sorted(reserved)}; pass them as arguments")
        kwargs.update(memory_kwargs)
        accepted = _core_parameters()
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
        unsupported = sorted(name for name in kwargs if name not in accepted and not takes_any)
        if unsupported:
            raise ConfigError(
                f"this convmem's ConversationMemory does not accept {unsupported}; "
                f"it accepts {sorted(n for n in accepted if n != 'self')}"
            )
        return kwargs

    def memory(self, session_id: str) -> ConversationMemory:
        """The memory of `session_id` (created on first use, then reused)."""
        memory = self._memories.get(session_id)
        if memory is not None:
            return memory
        with self._lock:
            memory = self._memories.get(session_id)
            if memory is None:
                memory = ConversationMemory(
                    session_id,
                    self.store,
                    self.config,
                    user_id=self.user_id,
                    counter=self.counter,
                    **self.core_kwargs,
                )
                self._memories[session_id] = memory
            return memory

    def close(self) -> None:
        """Close every session's memory (background workers); the store stays open."""
        with self._lock:
            memories = list(self._memories.values())
            self._memories.clear()
        for memory in memories:
            memory.close()


def _recall_for(embedder: Any, path: str | os.PathLike[str] | None) -> Any:
    """convmem recall with default settings around `embedder` (a LlamaIndex
    `BaseEmbedding` or a convmem embedder); vectors live next to a SQLite file."""
    if isinstance(embedder, BaseEmbedding):
        embedder = LlamaIndexEmbedder(embedder)
    index_dir = None if path is None else Path(os.fspath(path) + ".vectors")
    return Recall(embedder, index_dir=index_dir)

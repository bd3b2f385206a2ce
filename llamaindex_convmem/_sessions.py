"""The sessions of a LlamaIndex buffer or memory block, from its fields.

LlamaIndex objects pick their session per call (``chat_store_key`` of a
buffer, ``session_id`` passed to a memory block). Their memories come from
convmem's `SessionRegistry`, keyed by that id (bounded, least recently used
closed), and nothing about one call is remembered for the next, so one object
serving several sessions cannot leak one session into another.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from llama_index.core.base.embeddings.base import BaseEmbedding

from convmem import (
    ApproximateCounter,
    ConfigError,
    MemoryConfig,
    Recall,
    SessionRegistry,
    TiktokenCounter,
    TokenCounter,
    default_counter,
    validate_id,
)

from ._embeddings import LlamaIndexEmbedder
from ._llm import model_component
from ._tokenizer import TokenizerFnCounter

__all__ = [
    "SessionFields",
    "coerce_memory_config",
    "counter_from_name",
    "open_sessions",
    "resolve_counter",
    "store_kind",
]

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


class SessionFields(Protocol):
    """The convmem fields a buffer and a memory block share."""

    path: str | os.PathLike[str] | None
    store: Any
    user_id: str | None
    memory_config: MemoryConfig
    summarizer: Any
    fact_extractor: Any
    embedder: Any
    recall: Any
    memory_kwargs: dict[str, Any]


def store_kind(fields: SessionFields) -> str:
    """Where the sessions live, as `to_dict` records it (a custom store must be passed again)."""
    if fields.store is not None:
        return STORE_CUSTOM
    return STORE_SQLITE if fields.path is not None else STORE_MEMORY


def open_sessions(fields: SessionFields, counter: TokenCounter) -> SessionRegistry:
    """convmem's bounded registry of the sessions `fields` describe, every memory with
    the same config, counter and models (a LlamaIndex LLM becomes an LLM summarizer or
    fact extractor; an embedder becomes one `Recall` shared by every session)."""
    if fields.user_id is not None:
        validate_id(fields.user_id, "user_id")
    if fields.embedder is not None and fields.recall is not None:
        raise ConfigError("give embedder (recall with default settings) or recall, not both")
    reserved = {"session_id", "store", "config", "user_id", "counter"} & set(fields.memory_kwargs)
    if reserved:
        raise ConfigError(f"memory_kwargs may not set {sorted(reserved)}; pass them as arguments")
    recall = fields.recall
    if fields.embedder is not None:
        recall = _recall_for(fields.embedder, fields.path if fields.store is None else None)
    components = {
        "summarizer": model_component(fields.summarizer, "summarizer"),
        "fact_extractor": model_component(fields.fact_extractor, "fact_extractor"),
        "recall": recall,
    }
    options = {name: value for name, value in components.items() if value is not None}
    options.update(fields.memory_kwargs)
    return SessionRegistry(
        fields.path, store=fields.store, config=fields.memory_config, counter=counter, **options
    )


def _recall_for(embedder: Any, path: str | os.PathLike[str] | None) -> Any:
    """convmem recall with default settings around `embedder` (a LlamaIndex
    `BaseEmbedding` or a convmem embedder); vectors live next to a SQLite file."""
    if isinstance(embedder, BaseEmbedding):
        embedder = LlamaIndexEmbedder(embedder)
    index_dir = None if path is None else Path(os.fspath(path) + ".vectors")
    return Recall(embedder, index_dir=index_dir)

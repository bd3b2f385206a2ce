"""The sessions of a LlamaIndex buffer or memory block, from its fields.

LlamaIndex objects pick their session per call (``chat_store_key`` of a
buffer, ``session_id`` passed to a memory block). Their memories come from
convmem's `SessionRegistry`, keyed by that id (bounded, least recently used
closed), and nothing about one call is remembered for the next, so one object
serving several sessions cannot leak one session into another.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.utils import get_tokenizer

from convmem import (
    ApproximateCounter,
    ConfigError,
    InvalidSessionIdError,
    MemoryConfig,
    Recall,
    SessionRegistry,
    TiktokenCounter,
    TokenCounter,
)
from convmem.integration import default_counter, is_component, validate_id

from ._embeddings import LlamaIndexEmbedder
from ._llm import described, model_component
from ._tokenizer import TokenizerFnCounter

__all__ = [
    "SessionFields",
    "coerce_memory_config",
    "counter_from_name",
    "llamaindex_counter",
    "open_sessions",
    "resolve_counter",
    "session_id_for_key",
    "store_kind",
]

STORE_MEMORY = "memory"
STORE_SQLITE = "sqlite"
STORE_CUSTOM = "custom"


# Keys convmem cannot use as ids (and keys that look like a hashed one) become
# this prefix + the key's SHA-256: valid ids map to themselves, so existing
# sessions keep their names, and no other key can produce a hashed id.
HASHED_KEY_PREFIX = "llamaindex-key-sha256:"


def session_id_for_key(key: str) -> str:
    """The convmem session id of a LlamaIndex ``chat_store_key`` / ``session_id``.

    LlamaIndex takes any string as a key; convmem ids are 1-256 characters
    without control characters. A usable id is its own session id; any other
    key (empty, blank, longer than 256 characters, with a newline, or starting
    with ``HASHED_KEY_PREFIX``) becomes ``HASHED_KEY_PREFIX`` + the SHA-256 of
    its UTF-8 bytes, so two different keys never share a session::

        session_id_for_key("user-42")  # 'user-42'
        session_id_for_key("")         # 'llamaindex-key-sha256:e3b0c442...'
    """
    if not isinstance(key, str):
        raise TypeError(f"a chat_store_key must be a str, got {type(key).__name__}: {key!r:.60}")
    if not key.startswith(HASHED_KEY_PREFIX):
        try:
            return validate_id(key, "chat_store_key")
        except InvalidSessionIdError:
            pass
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()
    return HASHED_KEY_PREFIX + digest


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


def llamaindex_counter() -> TokenizerFnCounter:
    """LlamaIndex's own way of counting (``get_tokenizer()``: the tokenizer of
    ``Settings``, tiktoken's cl100k by default), as `ChatMemoryBuffer` counts."""
    return TokenizerFnCounter(get_tokenizer())


def resolve_counter(
    counter: TokenCounter | None,
    tokenizer_fn: Callable[[str], Sequence[Any]] | None,
    default: Callable[[], TokenCounter] = default_counter,
) -> TokenCounter:
    """The counter to use: `counter`, else one around `tokenizer_fn`, else `default()`."""
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
    return default()


def counter_from_name(name: str) -> TokenCounter | None:
    """Rebuild a counter from its ``name`` (tiktoken and approximate ones); None when it cannot be."""
    default = default_counter()
    if name == default.name:
        return default
    if name.startswith("tiktoken:"):
        return TiktokenCounter(name.removeprefix("tiktoken:"))
    if name == ApproximateCounter.name:
        return ApproximateCounter()
    llamaindex_default = llamaindex_counter()
    if name == llamaindex_default.name:  # tokenizer_fn=get_tokenizer(), LlamaIndex's default
        return llamaindex_default
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
    recall = _checked_recall(fields.recall)
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


def _checked_recall(recall: Any) -> Any:
    if recall is None or isinstance(recall, Recall):
        return recall
    hint = (
        "pass it as embedder="
        if isinstance(recall, BaseEmbedding) or is_component("embedder", recall)
        else "e.g. Recall(embedder)"
    )
    raise ConfigError(f"recall must be a convmem Recall, got {described(recall)}; {hint}")


def _recall_for(embedder: Any, path: str | os.PathLike[str] | None) -> Any:
    """convmem recall with default settings around `embedder` (a LlamaIndex
    `BaseEmbedding` or a convmem embedder); vectors live next to a SQLite file."""
    if isinstance(embedder, BaseEmbedding):
        embedder = LlamaIndexEmbedder(embedder)
    elif not is_component("embedder", embedder):  # looked up, not read: no dimension probe
        hint = (
            "an LLM summarizes or extracts facts: pass it as summarizer= or fact_extractor="
            if isinstance(embedder, BaseLLM)
            else "e.g. HuggingFaceEmbedding(...) or convmem's SentenceTransformerEmbedder()"
        )
        raise ConfigError(
            "embedder must be a llama_index BaseEmbedding or a convmem Embedder, "
            f"got {described(embedder)}; {hint}"
        )
    index_dir = None if path is None else Path(os.fspath(path) + ".vectors")
    return Recall(embedder, index_dir=index_dir)

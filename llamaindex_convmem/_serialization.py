"""Saving and loading a `ConvMemChatMemoryBuffer`: ``to_dict``, ``from_dict``, pickling, deepcopy.

What is saved is configuration and, in `SimpleChatStore`'s form, the current
session's history: never a model, a store or a secret. Those are passed again
when loading (``from_dict(data, store=..., summarizer=...)``), or, for pickling
and copying, carried along as the objects they are.
"""

from __future__ import annotations

import logging
import os
import pickle
import warnings
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.storage.chat_store import BaseChatStore
from pydantic import ValidationError

from convmem import (
    ApproximateCounter,
    ConfigError,
    ConversationMemory,
    ConvMemError,
    MemoryConfig,
    TiktokenCounter,
    TokenCounter,
)

from ._chat_store import simple_chat_store_dict
from ._sessions import STORE_CUSTOM, counter_from_name, llamaindex_counter, store_kind

__all__ = [
    "BASE64_STOP",
    "SavedBuffer",
    "buffer_dict",
    "buffer_from_dict",
    "construct",
    "picklable_state",
    "runtime_objects",
]


class SavedBuffer(Protocol):
    """What saving and loading read and call of a buffer (`ConvMemChatMemoryBuffer`)."""

    token_limit: int
    chat_store_key: str
    path: str | os.PathLike[str] | None
    user_id: str | None
    memory_config: MemoryConfig
    note_omitted_history: bool
    store: Any
    counter: Any
    summarizer: Any
    fact_extractor: Any
    embedder: Any
    recall: Any
    memory_kwargs: dict[str, Any]

    @property
    def tokenizer_fn(self) -> Any: ...

    @property
    def model_fields_set(self) -> set[str]: ...

    @property
    def token_counter(self) -> TokenCounter: ...

    @property
    def memory(self) -> ConversationMemory: ...

    @property
    def mirror(self) -> BaseChatStore | None: ...

    def class_name(self) -> str: ...

    def get_all(self) -> list[ChatMessage]: ...

    def set(self, messages: Sequence[ChatMessage]) -> None: ...

    def _use_mirror(self, chat_store: BaseChatStore) -> None: ...


_Buffer = TypeVar("_Buffer", bound=SavedBuffer)

logger = logging.getLogger("llamaindex_convmem")

# The second key of `to_dict`. A workflow Context saved with workflows'
# PickleSerializer stores this buffer as JSON, yet loads every value by trying
# pickle.loads(base64.b64decode(text)) first. Lenient base64 drops the JSON
# punctuation and decodes our fixed leading text into a pickle stream whose
# opcode at byte 201 asks for a memo of 1.5 billion entries: tens of GB before
# the JSON fallback is reached. A complete "==" pad ends lenient decoding, and
# "a==" three times completes one whatever the position, so the bogus stream
# stops within its first bytes and fails at once.
BASE64_STOP = "a==a==a=="

# Fields that hold objects, not configuration: passed again to `from_dict`, carried by pickling.
_RUNTIME_FIELDS = ("store", "summarizer", "fact_extractor", "embedder", "recall", "memory_kwargs")
# The models among them: which were set is saved, to warn when they are not given again.
_MODELS = ("summarizer", "fact_extractor", "embedder")


def construct(cls: type[_Buffer], values: dict[str, Any]) -> _Buffer:
    """``cls(**values)``, raising convmem's own error rather than pydantic's wrapper of it."""
    try:
        return cls(**values)
    except ValidationError as exc:
        errors = exc.errors()
        original = errors[0].get("ctx", {}).get("error") if len(errors) == 1 else None
        if isinstance(original, ConvMemError):
            raise original from None
        raise


def buffer_dict(buffer: SavedBuffer) -> dict[str, Any]:
    """The buffer's configuration as JSON-safe data, with the current session's history."""
    return {
        "class_name": buffer.class_name(),
        "base64_stop": BASE64_STOP,
        "token_limit": buffer.token_limit,
        "chat_store_key": buffer.chat_store_key,
        "path": buffer.path,
        "user_id": buffer.user_id,
        "memory_config": buffer.memory_config.to_dict(),
        "note_omitted_history": buffer.note_omitted_history,
        "counter_name": buffer.token_counter.name,
        "store_kind": store_kind(buffer),
        "models": [name for name in _MODELS if getattr(buffer, name) is not None],
        # The history in SimpleChatStore's form, so ChatMemoryBuffer.from_dict reads it too.
        "chat_store": simple_chat_store_dict({buffer.chat_store_key: buffer.get_all()}),
    }


def buffer_from_dict(cls: type[_Buffer], data: dict[str, Any], kwargs: dict[str, Any]) -> _Buffer:
    """A buffer from `buffer_dict` data (or a `ChatMemoryBuffer.to_dict()`), `kwargs` supplying
    what is not saved; a saved history is imported into an empty session."""
    values = {**data, **kwargs}
    # A BaseChatStore passed here is the user's store to mirror into; the data's
    # "chat_store" (a dict) is the saved history either way.
    mirror = kwargs.get("chat_store")
    if isinstance(mirror, BaseChatStore):
        values["chat_store"] = data.get("chat_store")
    else:
        mirror = None
    values.pop("class_name", None)
    values.pop("base64_stop", None)
    history = values.pop("chat_history", None)
    chat_store = values.pop("chat_store", None)
    counter_name = values.pop("counter_name", None)
    kind = values.pop("store_kind", None)
    _warn_of_models_not_given(values.pop("models", None), values)
    if kind == STORE_CUSTOM and values.get("store") is None:
        raise ConfigError(
            "this buffer was saved with a custom convmem store; pass it again: from_dict(data, store=...)"
        )
    if isinstance(counter_name, str) and values.get("counter") is None and values.get("tokenizer_fn") is None:
        counter = counter_from_name(counter_name)
        if counter is not None and counter.name == llamaindex_counter().name:
            counter = None  # the default: made again, never pickled with its tables
        elif counter is None:
            warnings.warn(
                f"the buffer was saved counting with {counter_name!r}; pass tokenizer_fn= or counter= "
                "to from_dict to count the same way (using the default counter now)",
                RuntimeWarning,
                stacklevel=3,
            )
        values["counter"] = counter
    if "config" in values and "memory_config" not in values:
        values["memory_config"] = values.pop("config")
    buffer = construct(cls, values)
    messages = _saved_history(history, chat_store, buffer.chat_store_key)
    if messages and not buffer.memory.stats().message_count:
        buffer.set(messages)
    if mirror is not None:
        # After the saved history: what the buffer held when saved wins over the mirror's copy.
        buffer._use_mirror(mirror)
    return buffer


def _warn_of_models_not_given(saved: Any, values: dict[str, Any]) -> None:
    """Say which models the buffer was saved with and is made again without (an agent
    ``Context`` reloaded from JSON passes none: its buffer then summarizes offline, reads
    facts by rule and recalls by words alone)."""
    missing = (
        [name for name in saved if name in _MODELS and values.get(name) is None]
        if isinstance(saved, list)
        else []
    )
    if missing:
        given = ", ".join(f"{name}=..." for name in missing)
        warnings.warn(
            f"the buffer was saved with {' and '.join(missing)}, which a saved buffer does not keep; "
            f"pass them again to from_dict(data, {given}) (using convmem's offline defaults now)",
            RuntimeWarning,
            stacklevel=4,  # the caller of from_dict
        )


def runtime_objects(buffer: SavedBuffer) -> dict[str, Any]:
    """The objects a copy of `buffer` needs besides its data: stores, models, the counter it was given."""
    runtime = {name: getattr(buffer, name) for name in _RUNTIME_FIELDS}
    runtime["chat_store"] = buffer.mirror
    if "tokenizer_fn" in buffer.model_fields_set:
        runtime["tokenizer_fn"] = buffer.tokenizer_fn
    elif buffer.counter is not None and type(buffer.counter) not in (TiktokenCounter, ApproximateCounter):
        # tiktoken and approximate counters come back from "counter_name" in the data;
        # pickling a tiktoken one would add its whole BPE table (over 1 MB) to every pickle.
        runtime["counter"] = buffer.counter
    return {name: value for name, value in runtime.items() if value is not None}


def picklable_state(buffer: SavedBuffer) -> dict[str, Any]:
    """``__getstate__``: the data, and every runtime object that pickles (others are left out)."""
    state: dict[str, Any] = {"data": buffer_dict(buffer)}
    for name, value in runtime_objects(buffer).items():
        try:
            pickle.dumps(value)
        except Exception:
            logger.warning("not pickling %s of ConvMemChatMemoryBuffer: it cannot be pickled", name)
            continue
        state[name] = value
    return state


def _saved_history(history: Any, chat_store: Any, session_id: str) -> list[ChatMessage]:
    if history:
        return [m if isinstance(m, ChatMessage) else ChatMessage.model_validate(m) for m in history]
    if isinstance(chat_store, dict):
        from llama_index.core.storage.chat_store.loading import load_chat_store

        return load_chat_store(chat_store).get_messages(session_id)
    if isinstance(chat_store, BaseChatStore):
        return chat_store.get_messages(session_id)
    return []

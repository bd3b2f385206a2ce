"""Memories for code that serves many sessions: a bounded registry, and one way to
turn a wrapper's options (``memory=`` or what builds one) into a memory.

A `ConversationMemory` keeps per-session state worth reusing between calls
(a background worker, parsed facts), so a server or a framework wrapper should
not build a new one per request; nor may it keep one per session forever.
`SessionRegistry` keeps the most recently used ones and closes the rest.
"""

from __future__ import annotations

import functools
import inspect
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, TypeVar

from ._config import MemoryConfig
from ._errors import ConfigError, InvalidSessionIdError
from ._memory import ConversationMemory, open_store
from ._options import check_int
from ._stores.base import Store, require_sync_store, validate_id
from ._stores.memory import InMemoryStore
from ._tokens import TokenCounter, default_counter

__all__ = ["DEFAULT_MAX_CACHED_SESSIONS", "SessionRegistry", "memory_from_options", "store_from_options"]

DEFAULT_MAX_CACHED_SESSIONS = 1024
"""How many sessions' memories a `SessionRegistry` keeps unless told otherwise."""

_Registry = TypeVar("_Registry", bound="SessionRegistry")

# Set per registry or per session, not through a registry's memory options.
_NOT_MEMORY_OPTIONS = frozenset({"self", "session_id", "store", "config", "user_id", "counter"})


def store_from_options(path: str | os.PathLike[str] | None, store: Store | None) -> Store:
    """The store a wrapper's ``path=`` / ``store=`` name: the SQLite file `path` (shared
    with every memory on it, see `open_store`), `store` itself, or with neither a new
    `InMemoryStore`. Giving both is a `ConfigError`."""
    if path is not None and store is not None:
        raise ConfigError("pass path= (a SQLite file) or store=, not both")
    if store is not None:
        require_sync_store(store, "a SessionRegistry or memory_from_options")
        return store
    return open_store(path) if path is not None else InMemoryStore()


@functools.cache
def _memory_options() -> frozenset[str]:
    parameters = inspect.signature(ConversationMemory.__init__).parameters
    return frozenset(parameters) - _NOT_MEMORY_OPTIONS


def _check_config(config: object) -> MemoryConfig:
    if config is None:
        return MemoryConfig()
    if not isinstance(config, MemoryConfig):
        raise ConfigError(f"config must be a MemoryConfig, got {type(config).__name__}")
    return config


def _check_memory_options(options: Mapping[str, object]) -> None:
    unknown = sorted(set(options) - _memory_options())
    if unknown:
        raise ConfigError(
            f"ConversationMemory does not accept {unknown} here; besides the store, config, "
            f"user_id and counter it takes {sorted(_memory_options())}"
        )


def _refuse_both(chosen: str, built: str, options: Mapping[str, object]) -> None:
    given = sorted(name for name, value in options.items() if value is not None)
    if given:
        raise ConfigError(f"pass {chosen}= or the options to build {built}, not both (also got {given})")


def memory_from_options(
    memory: ConversationMemory | None = None,
    session_id: str | None = None,
    *,
    path: str | os.PathLike[str] | None = None,
    store: Store | None = None,
    config: MemoryConfig | None = None,
    user_id: str | None = None,
    counter: TokenCounter | None = None,
    **memory_options: Any,
) -> ConversationMemory:
    """The memory a wrapper serves: `memory` as given, or a new one built from the options.

    A wrapper takes a ready `ConversationMemory` or the options that build one
    (``path`` or ``store``, ``config``, ``user_id``, ``counter`` and any other
    `ConversationMemory` argument), never both::

        memory_from_options(None, "s1", path="chat.db")   # a new memory on chat.db
        memory_from_options(existing)                     # `existing`, checked

    Raises `ConfigError` naming what is wrong: options given with `memory`,
    `memory` not a `ConversationMemory`, a `session_id` other than the
    memory's, ``path`` with ``store``, or an option `ConversationMemory` does
    not take; `InvalidSessionIdError` when a new memory has no `session_id`.
    """
    named = {"path": path, "store": store, "config": config, "user_id": user_id, "counter": counter}
    if memory is not None:
        _refuse_both("memory", "one", {**named, **memory_options})
        if not isinstance(memory, ConversationMemory):
            raise ConfigError(f"memory must be a ConversationMemory, got {type(memory).__name__}")
        if session_id is not None and session_id != memory.session_id:
            raise ConfigError(
                f"session_id {session_id!r} differs from the memory's session {memory.session_id!r}"
            )
        return memory
    if session_id is None:
        raise InvalidSessionIdError("session_id is missing: a new memory needs the id of its conversation")
    _check_memory_options(memory_options)
    return ConversationMemory(
        session_id,
        store_from_options(path, store),
        _check_config(config),
        user_id=user_id,
        counter=counter,
        **memory_options,
    )


class SessionRegistry:
    """One `ConversationMemory` per session of one store, for the most recently used sessions::

        sessions = SessionRegistry("chat.db", config=MemoryConfig(budget=2048))
        sessions.memory("session-1").add_turn("Hi!", "Hello!")
        sessions.memory("session-2", user_id="ana").build_context("What did I say?")

    Every memory shares the store (the SQLite file ``path``, any convmem
    ``store``, or with neither one in-process `InMemoryStore`), the config,
    the counter and ``memory_options`` (other `ConversationMemory` arguments,
    e.g. ``summarizer=`` or a ``recall=`` serving every session).

    A session's memory is made on its first lookup and reused after it. The
    memories of the ``max_cached_sessions`` most recently used sessions are
    kept (`DEFAULT_MAX_CACHED_SESSIONS`, 1024, by default); a lookup of one
    more session evicts the least recently used memory and closes it (its
    background work is finished). Eviction loses nothing: the session stays
    in the store and its next lookup makes a new memory, and a request still
    holding the evicted memory can go on with it (a closed memory updates its
    summary and facts inline instead of in the background). Closing happens
    outside the lock that lookups take, so a slow close never holds up a
    lookup of a cached session.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        store: Store | None = None,
        config: MemoryConfig | None = None,
        counter: TokenCounter | None = None,
        max_cached_sessions: int = DEFAULT_MAX_CACHED_SESSIONS,
        **memory_options: Any,
    ) -> None:
        check_int("max_cached_sessions", max_cached_sessions)
        _check_memory_options(memory_options)
        self.config = _check_config(config)
        self.store = store_from_options(path, store)
        self.counter = counter or default_counter()
        self.max_cached_sessions = max_cached_sessions
        self._memory_options = dict(memory_options)
        self._memories: OrderedDict[tuple[str, str | None], ConversationMemory] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def from_options(
        cls: type[_Registry],
        sessions: _Registry | None,
        *,
        path: str | os.PathLike[str] | None = None,
        store: Store | None = None,
        config: MemoryConfig | None = None,
        counter: TokenCounter | None = None,
        **memory_options: Any,
    ) -> _Registry:
        """`sessions` as given, or a new registry built from the options; giving both
        is a `ConfigError` naming the options (as `memory_from_options` does for a memory)."""
        if sessions is None:
            return cls(path, store=store, config=config, counter=counter, **memory_options)
        named = {"path": path, "store": store, "config": config, "counter": counter}
        _refuse_both("sessions", "them", {**named, **memory_options})
        if not isinstance(sessions, cls):
            raise ConfigError(f"sessions must be a {cls.__name__}, got {type(sessions).__name__}")
        return sessions

    def __repr__(self) -> str:
        return f"{type(self).__name__}(store={self.store!r})"

    def __len__(self) -> int:
        """How many sessions' memories are kept now."""
        return len(self._memories)

    def memory(self, session_id: str, user_id: str | None = None) -> ConversationMemory:
        """The memory of `session_id` (of `user_id`, if given): made on first use, then reused."""
        key = (
            validate_id(session_id, "session_id"),
            None if user_id is None else validate_id(user_id, "user_id"),
        )
        with self._lock:
            memory = self._memories.get(key)
            if memory is not None:
                self._memories.move_to_end(key)
                return memory
        created = ConversationMemory(
            key[0], self.store, self.config, user_id=key[1], counter=self.counter, **self._memory_options
        )
        with self._lock:
            # Another thread may have made this session's memory meanwhile: keep one.
            memory = self._memories.setdefault(key, created)
            self._memories.move_to_end(key)
            unused = [] if memory is created else [created]
            while len(self._memories) > self.max_cached_sessions:
                unused.append(self._memories.popitem(last=False)[1])
        for evicted in unused:
            # Another thread may still be using it: a closed memory updates its derived
            # state inline from then on, so that thread loses nothing but the background.
            evicted.close()
        return memory

    def close(self) -> None:
        """Close every kept memory (finishing background work); the store stays open.
        Later lookups make new memories."""
        with self._lock:
            memories = list(self._memories.values())
            self._memories.clear()
        for memory in memories:
            memory.close()

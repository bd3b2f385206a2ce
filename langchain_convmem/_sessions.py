"""`ConvMemSessions`: one store, one memory per session, handed out by session id."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from convmem import (
    BudgetError,
    ConfigError,
    ConversationMemory,
    InMemoryStore,
    InvalidSessionIdError,
    MemoryConfig,
    Store,
    TokenCounter,
    open_store,
    validate_id,
)

if TYPE_CHECKING:
    from ._history import ConvMemChatMessageHistory

__all__ = ["ConvMemSessions", "check_budget", "sessions_from_options", "storage_session_id"]

DEFAULT_MAX_CACHED_SESSIONS = 1024


def check_budget(budget: object) -> int | None:
    if budget is None:
        return None
    if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
        raise BudgetError(f"budget must be a positive int or None (use the config's budget), got {budget!r}")
    return budget


def storage_session_id(session_id: object, user_id: object = None) -> str:
    """The id a session is stored under: ``session_id``, or ``user/session`` for a user.

    LangChain factories often key a conversation by ``(user_id, conversation_id)``,
    where two users may both have a conversation ``"1"``; keeping the user in the
    stored id keeps those conversations apart. ``/`` and ``%`` in a user id are
    escaped so that two different pairs never map to the same id.
    """
    session = validate_id(session_id, "session_id")
    if user_id is None:
        return session
    user = validate_id(user_id, "user_id").replace("%", "%25").replace("/", "%2F")
    return validate_id(f"{user}/{session}", "user_id + session_id")


class ConvMemSessions:
    """Maps a ``session_id`` (and optional ``user_id``) to a conversation memory.

    Every session shares one store: a SQLite file (``path``), any convmem
    `Store` (``store``), or, with neither, one in-process `InMemoryStore`.
    Calling the object returns a `ConvMemChatMessageHistory`, so it is a
    ``get_session_history`` for `RunnableWithMessageHistory`::

        get_session_history = ConvMemSessions("chat.db", config=MemoryConfig(budget=2048))
        chain = RunnableWithMessageHistory(prompt | model, get_session_history, ...)

    With ``history_factory_config`` listing ``session_id`` and ``user_id``,
    LangChain passes both; a user's sessions are stored as ``user/session``.
    Extra keyword arguments (e.g. ``counter``) go to every `ConversationMemory`.
    Memories are kept for the most recent ``max_cached_sessions`` sessions so
    their derived state is not rebuilt on every call.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        store: Store | None = None,
        config: MemoryConfig | None = None,
        counter: TokenCounter | None = None,
        budget: int | None = None,
        max_cached_sessions: int = DEFAULT_MAX_CACHED_SESSIONS,
        **memory_options: Any,
    ) -> None:
        if path is not None and store is not None:
            raise ConfigError("pass path= (a SQLite file) or store=, not both")
        if config is not None and not isinstance(config, MemoryConfig):
            raise ConfigError(f"config must be a MemoryConfig, got {type(config).__name__}")
        if not isinstance(max_cached_sessions, int) or max_cached_sessions <= 0:
            raise ConfigError(f"max_cached_sessions must be a positive int, got {max_cached_sessions!r}")
        self.store: Store = (
            open_store(path) if path is not None else store if store is not None else InMemoryStore()
        )
        self.config = config or MemoryConfig()
        self.counter = counter
        self.budget = check_budget(budget)
        self.max_cached_sessions = max_cached_sessions
        self._memory_options = memory_options
        self._memories: OrderedDict[tuple[str, str | None], ConversationMemory] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ConvMemSessions(store={self.store!r})"

    def memory(self, session_id: str, user_id: str | None = None) -> ConversationMemory:
        """The `ConversationMemory` of one session (created on first use, then reused)."""
        if session_id is None:
            raise InvalidSessionIdError(
                "session_id is missing; pass the id of the conversation (e.g. config="
                "{'configurable': {'session_id': 'abc'}} for a runnable)"
            )
        if user_id == "":  # LangChain config specs often default to "": no user
            user_id = None
        key = (storage_session_id(session_id, user_id), user_id)
        with self._lock:
            memory = self._memories.get(key)
            if memory is not None:
                self._memories.move_to_end(key)
                return memory
        memory = ConversationMemory(
            key[0], self.store, self.config, user_id=user_id, counter=self.counter, **self._memory_options
        )
        with self._lock:
            existing = self._memories.get(key)
            if existing is not None:  # another thread made it first: keep one memory per session
                return existing
            self._memories[key] = memory
            while len(self._memories) > self.max_cached_sessions:
                _, evicted = self._memories.popitem(last=False)
                evicted.close()
        return memory

    def history(self, session_id: str, user_id: str | None = None) -> ConvMemChatMessageHistory:
        """A new chat history on the session's memory (cheap: the memory is shared).

        Its ``messages`` is pinned (see `ConvMemChatMessageHistory`):
        `RunnableWithMessageHistory` asks for one history per invocation, and
        a pinned one keeps that invocation's reads identical even when another
        turn of the same session finishes in between.
        """
        from ._history import ConvMemChatMessageHistory

        return ConvMemChatMessageHistory(
            memory=self.memory(session_id, user_id), budget=self.budget, pin_messages=True
        )

    def __call__(self, session_id: str, user_id: str | None = None) -> ConvMemChatMessageHistory:
        """`get_session_history` for `RunnableWithMessageHistory` (see `history`)."""
        return self.history(session_id, user_id)


def sessions_from_options(
    sessions: ConvMemSessions | None,
    *,
    path: str | os.PathLike[str] | None,
    store: Store | None,
    config: MemoryConfig | None,
    counter: TokenCounter | None,
    memory_options: dict[str, Any],
) -> ConvMemSessions:
    """The `ConvMemSessions` a wrapper serves: the one given, or one built from the
    store options; giving both is a `ConfigError`."""
    given = [
        name
        for name, value in (("path", path), ("store", store), ("config", config), ("counter", counter))
        if value is not None
    ] + sorted(memory_options)
    if sessions is None:
        return ConvMemSessions(path, store=store, config=config, counter=counter, **memory_options)
    if given:
        raise ConfigError(f"pass sessions= or the options to build them, not both (also got {given})")
    if not isinstance(sessions, ConvMemSessions):
        raise ConfigError(f"sessions must be a ConvMemSessions, got {type(sessions).__name__}")
    return sessions

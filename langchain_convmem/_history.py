"""`ConvMemChatMessageHistory`, a LangChain chat history whose messages fit a token
budget, and `ConvMemSessions`, the ``get_session_history`` that hands them out."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import inspect
import os
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, overload

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from convmem import (
    BudgetError,
    BuiltContext,
    ConfigError,
    ConversationMemory,
    InvalidSessionIdError,
    MemoryConfig,
    SessionRegistry,
    Store,
    TokenCounter,
)
from convmem.integration import MAX_INT_OPTION, memory_from_options, validate_id

from ._convert import context_to_langchain, from_convmem_message, to_convmem_messages

__all__ = [
    "ConvMemChatMessageHistory",
    "ConvMemSessions",
    "check_budget",
    "check_config_keys",
    "check_key",
    "check_options",
    "memory_building",
    "split_storage_session_id",
    "storage_session_id",
]

# Options every wrapper passes on to the memory (or the session registry) it builds.
_MEMORY_BUILDING = ("max_cached_sessions",)


def check_options(owner: Callable[..., Any], options: Mapping[str, object]) -> None:
    """Refuse, at construction, an option `owner` does not take.

    Wrappers pass ``**memory_options`` on to `ConversationMemory`; a misspelled
    option would otherwise surface on the first call. The error names the
    option, the closest accepted one, and every option accepted.
    """
    own = [
        name
        for name, parameter in inspect.signature(owner).parameters.items()
        if parameter.kind not in (parameter.VAR_KEYWORD, parameter.VAR_POSITIONAL) and name != "self"
    ]
    memory = [
        name
        for name, parameter in inspect.signature(ConversationMemory).parameters.items()
        if parameter.kind is parameter.KEYWORD_ONLY or name in {"config", "store"}
    ]
    accepted = sorted({*own, *memory, *_MEMORY_BUILDING})
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        name = unknown[0]
        close = difflib.get_close_matches(name, accepted, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        owner_name = getattr(owner, "__qualname__", repr(owner)).removesuffix(".__init__")
        raise ConfigError(
            f"{owner_name} got unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(u) for u in unknown)}{hint}; it accepts: {', '.join(accepted)}"
        )


@overload
def check_key(name: str, value: object, *, holds: str, or_none: Literal[False] = False) -> str: ...


@overload
def check_key(name: str, value: object, *, holds: str, or_none: bool) -> str | None: ...


def check_key(name: str, value: object, *, holds: str, or_none: bool = False) -> str | None:
    """Refuse, at construction, a key argument no dict can be read by: anything but a
    non-empty str (or None, with `or_none`). `holds` says what the key looks up, for the
    message; a wrong key would otherwise surface on the first call."""
    if or_none and value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        allowed = "None or a non-empty str" if or_none else "a non-empty str"
        raise ConfigError(f"{name} must be {allowed} ({holds}), got {value!r:.60}")
    return value


def check_config_keys(session_id_key: object, user_id_key: object) -> tuple[str, str]:
    """The ``config["configurable"]`` keys naming the session and the user, checked (`check_key`)."""
    return (
        check_key(
            "session_id_key", session_id_key, holds="the config['configurable'] key naming the session"
        ),
        check_key("user_id_key", user_id_key, holds="the config['configurable'] key naming the user"),
    )


def memory_building(options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` as `ConversationMemory` takes them: a LangChain ``Embeddings`` given as
    ``embedder`` is wrapped in `LangChainEmbedder`, and an embedder of no known kind is a
    `ConfigError` here rather than a warning at every search."""
    if options.get("embedder") is None:
        return dict(options)
    from ._embeddings import as_embedder  # loads numpy: only for a memory with an embedder

    return {**options, "embedder": as_embedder(options["embedder"])}


def check_budget(budget: object) -> int | None:
    if budget is None:
        return None
    if not isinstance(budget, int) or isinstance(budget, bool) or not 0 < budget <= MAX_INT_OPTION:
        raise BudgetError(
            f"budget must be a positive int (1 to {MAX_INT_OPTION}) or None (use the config's budget), "
            f"got {budget!r:.60}"
        )
    return budget


def storage_session_id(session_id: object, user_id: object = None) -> str:
    """The id a session is stored under: ``session_id``, or ``user/session`` for a user.

    LangChain factories often key a conversation by ``(user_id, conversation_id)``,
    where two users may both have a conversation ``"1"``; keeping the user in the
    stored id keeps those conversations apart. The mapping is one-to-one, so no
    request can reach another pair's session:

    - with a user, ``user/session``, where ``%`` and ``/`` in the user id are
      escaped (``%25``, ``%2F``): the first ``/`` ends the user;
    - without a user, the session id itself when it holds no ``/`` (the ids
      stored so far), else ``/`` + the session id: an empty user part, which no
      user id produces, so ``("alice/x", no user)`` never reads alice's ``x``.

    `split_storage_session_id` is the inverse.
    """
    session = validate_id(session_id, "session_id")
    if user_id is None:
        if "/" not in session:
            return session
        return validate_id("/" + session, "session_id (stored as '/' + session_id)")
    user = validate_id(user_id, "user_id").replace("%", "%25").replace("/", "%2F")
    return validate_id(f"{user}/{session}", "user_id + session_id")


_ESCAPES = re.compile("%(25|2F)")


def split_storage_session_id(stored: str) -> tuple[str, str | None]:
    """The ``(session_id, user_id)`` that `storage_session_id` stored under `stored`."""
    user, slash, session = stored.partition("/")
    if not slash:
        return stored, None
    if not user:
        return session, None
    return session, _ESCAPES.sub(lambda escape: "/" if escape[1] == "2F" else "%", user)


@contextlib.contextmanager
def _quiet_base_class_deprecation() -> Iterator[None]:
    """Silence LangChain's deprecation notice for `BaseChatMessageHistory` while our
    own instance is initialised, and nowhere else.

    langchain-core marks `BaseChatMessageHistory` deprecated (since 1.6.4) and
    wraps its ``__init__``; it warns for direct instances only, but versions
    differ, and a subclass is not what the notice is about. The suppression is
    a context variable, so other threads and other classes still warn.
    """
    try:
        from langchain_core._api.deprecation import suppress_langchain_deprecation_warning
    except ImportError:  # older langchain-core: nothing is emitted for subclasses
        yield
        return
    with suppress_langchain_deprecation_warning():
        yield


@dataclasses.dataclass(frozen=True)
class _Snapshot:
    log_position: tuple[Any, ...]
    context: BuiltContext
    messages: tuple[BaseMessage, ...]


class ConvMemChatMessageHistory(BaseChatMessageHistory):
    """A chat history that hands a model the managed context, not the whole log.

    ``messages`` is what the model should see now, within the token budget: a
    leading `SystemMessage` with the configured system prompt, known facts, the
    rolling summary and recalled turns (when there are any), then the recent
    window of whole turns (tool calls kept with their results). Everything
    added is kept in the log: ``full_messages`` returns it.

    It works wherever a LangChain chat history does::

        from langchain_core.runnables.history import RunnableWithMessageHistory

        history = ConvMemChatMessageHistory()                      # in memory, new session
        history = ConvMemChatMessageHistory("s1", path="chat.db")  # SQLite, persistent
        chain = RunnableWithMessageHistory(
            prompt | model,
            ConvMemChatMessageHistory.factory(path="chat.db"),     # session_id -> history
            input_messages_key="question",
            history_messages_key="history",
        )

    ``messages`` must not change between `RunnableWithMessageHistory`'s two
    reads: one before running the chain, one before writing the new turn, whose
    input it slices by the length it read. It is built once and kept while the
    session's log does not change (a summary or facts updated in the background
    meanwhile do not change it); a write by this object rebuilds it, and so, by
    default, does a write by anyone else. With ``pin_messages=True`` only this
    object's own writes (and `refresh`) rebuild it: histories made by `factory`
    are pinned, one per invocation, so concurrent turns on one session cannot
    shift each other's slicing.

    Like `InMemoryChatMessageHistory`, it can be created with no arguments or
    with ``messages=[...]``, and two histories are equal when their messages are.

    LangChain has deprecated `BaseChatMessageHistory` (langchain-core 1.6.4)
    and `RunnableWithMessageHistory` (1.3.3) for removal in 2.0, and points new
    code at agent memory (https://docs.langchain.com/oss/python/langchain/short-term-memory).
    This class keeps existing chains working; for ``create_agent`` use
    `ConvMemMiddleware`, and for a LangGraph graph `ConvMemNode`, which build
    the same managed context.

    Args:
        session_id: The conversation's id (a new random id when omitted).
        messages: Messages to add right away.
        memory: Use this `ConversationMemory` instead of building one (then
            give none of the options below that build one).
        path: Keep the session in this SQLite file (see `ConversationMemory.open`).
        store: Keep the session in this convmem `Store` (default: in memory).
        config: The `MemoryConfig` (budget, system prompt, window size, ...).
        user_id: The user the session belongs to.
        counter: The token counter (default: tiktoken cl100k_base).
        budget: Token budget of ``messages`` (default: ``config.budget``).
        pin_messages: Keep ``messages`` until this object writes, whatever
            other writers do (see above).
        **memory_options: Passed on to `ConversationMemory` (``embedder`` may be
            a LangChain ``Embeddings``: it is wrapped in `LangChainEmbedder`).
    """

    def __init__(
        self,
        session_id: str | None = None,
        *,
        messages: Sequence[BaseMessage] | None = None,
        memory: ConversationMemory | None = None,
        path: str | os.PathLike[str] | None = None,
        store: Store | None = None,
        config: MemoryConfig | None = None,
        user_id: str | None = None,
        counter: TokenCounter | None = None,
        budget: int | None = None,
        pin_messages: bool = False,
        **memory_options: Any,
    ) -> None:
        check_options(ConvMemChatMessageHistory.__init__, memory_options)
        with _quiet_base_class_deprecation():
            super().__init__()
        if memory is None and session_id is None:
            session_id = uuid.uuid4().hex  # like InMemoryChatMessageHistory(): a new conversation
        self.memory = memory_from_options(
            memory,
            session_id,
            path=path,
            store=store,
            config=config,
            user_id=user_id,
            counter=counter,
            **memory_building(memory_options),
        )
        self.budget = check_budget(budget)
        self.pin_messages = bool(pin_messages)
        self._snapshot: _Snapshot | None = None
        if messages:
            self.add_messages(messages)

    @classmethod
    def factory(
        cls, path: str | os.PathLike[str] | None = None, *, budget: int | None = None, **options: Any
    ) -> ConvMemSessions:
        """A ``get_session_history(session_id, user_id=None)`` for `RunnableWithMessageHistory`:
        ``ConvMemSessions(path, budget=budget, **options)`` (``store``, ``config``,
        ``counter``, ``max_cached_sessions`` and `ConversationMemory` options).

        All sessions share one store (the SQLite file ``path``, ``store``, or one
        in-memory store); each call returns a new, pinned history (see
        ``pin_messages``) for the requested session::

            get_session_history = ConvMemChatMessageHistory.factory(path="chat.db")
            get_session_history("session-1").messages
        """
        return ConvMemSessions(path, budget=budget, **options)

    # -- identity -------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The session this history reads and writes."""
        return self.memory.session_id

    @property
    def user_id(self) -> str | None:
        """The user the session belongs to; ``None`` when the history was made without one."""
        return self.memory.user_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.memory!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, BaseChatMessageHistory):
            return self.messages == other.messages
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    # -- reading --------------------------------------------------------------------

    def _log_position(self) -> tuple[Any, ...]:
        stats = self.memory.stats()
        return (stats.created_at, stats.last_seq, stats.message_count)

    def _current(self) -> _Snapshot:
        # Read the position before building: a write that lands in between then
        # only causes one extra rebuild, never a stale snapshot.
        snapshot = self._snapshot
        if snapshot is not None and self.pin_messages:
            return snapshot
        position = self._log_position()
        if snapshot is not None and snapshot.log_position == position:
            return snapshot
        context = self.memory.build_context(None, self.budget)
        snapshot = _Snapshot(position, context, tuple(context_to_langchain(context)))
        self._snapshot = snapshot
        return snapshot

    def refresh(self) -> None:
        """Rebuild ``messages`` at the next read (for a pinned history that should see others' writes)."""
        self._snapshot = None

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The managed context as LangChain messages (a new list on every read)."""
        return list(self._current().messages)

    async def aget_messages(self) -> list[BaseMessage]:
        """Async ``messages``."""
        snapshot = await asyncio.to_thread(self._current)
        return list(snapshot.messages)

    @property
    def context(self) -> BuiltContext:
        """The `BuiltContext` behind ``messages``: ``history.context.explain()`` shows
        where every token went and what was left out."""
        return self._current().context

    async def aget_context(self) -> BuiltContext:
        """Async ``context``."""
        snapshot = await asyncio.to_thread(self._current)
        return snapshot.context

    def build_context(self, query: str | None = None, budget: int | None = None) -> BuiltContext:
        """A fresh context for `query` (recall searches for it), as `ConversationMemory.build_context`."""
        return self.memory.build_context(query, budget if budget is not None else self.budget)

    async def abuild_context(self, query: str | None = None, budget: int | None = None) -> BuiltContext:
        """Async `build_context`."""
        return await self.memory.abuild_context(query, budget if budget is not None else self.budget)

    @property
    def full_messages(self) -> list[BaseMessage]:
        """Every message of the session, oldest first (the raw log, never trimmed)."""
        return [from_convmem_message(m) for m in self.memory.messages()]

    async def aget_full_messages(self) -> list[BaseMessage]:
        """Async ``full_messages``."""
        return [from_convmem_message(m) for m in await self.memory.amessages()]

    # -- writing --------------------------------------------------------------------

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append messages to the log, atomically: all are stored or, on an error, none."""
        converted = to_convmem_messages(messages)
        self.memory.add_messages(converted)
        self._snapshot = None

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async ``add_messages``."""
        converted = to_convmem_messages(messages)
        await self.memory.aadd_messages(converted)
        self._snapshot = None

    def clear(self) -> None:
        """Delete the session: its log and everything derived from it."""
        self.memory.clear()
        self._snapshot = None

    async def aclear(self) -> None:
        """Async ``clear``."""
        await self.memory.aclear()
        self._snapshot = None


class ConvMemSessions(SessionRegistry):
    """Maps a ``session_id`` (and optional ``user_id``) to a conversation memory.

    Every session shares one store: a SQLite file (``path``), any convmem
    `Store` (``store``), or, with neither, one in-process `InMemoryStore`.
    Calling the object returns a `ConvMemChatMessageHistory`, so it is a
    ``get_session_history`` for `RunnableWithMessageHistory`::

        get_session_history = ConvMemSessions("chat.db", config=MemoryConfig(budget=2048))
        chain = RunnableWithMessageHistory(prompt | model, get_session_history, ...)

    With ``history_factory_config`` listing ``session_id`` and ``user_id``,
    LangChain passes both; a user's sessions are stored as ``user/session``
    (see `storage_session_id`: no other pair maps to the same stored id).

    It is convmem's `SessionRegistry` and takes its arguments (``store``,
    ``config``, ``counter``, ``max_cached_sessions``, and `ConversationMemory`
    options such as ``summarizer`` for every memory; ``embedder`` may be a
    LangChain ``Embeddings``), plus the ``budget`` of the histories it hands out. Memories are kept for the most recent
    ``max_cached_sessions`` sessions (1024 by default) so their derived state
    is not rebuilt on every call, and the least recently used is closed
    beyond that.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, budget: int | None = None, **options: Any
    ) -> None:
        check_options(ConvMemSessions.__init__, options)
        super().__init__(path, **memory_building(options))
        self.budget = check_budget(budget)

    def memory(self, session_id: str, user_id: str | None = None) -> ConversationMemory:
        """The `ConversationMemory` of one session (created on first use, then reused)."""
        if session_id is None:
            raise InvalidSessionIdError(
                "session_id is missing; pass the id of the conversation (e.g. config="
                "{'configurable': {'session_id': 'abc'}} for a runnable)"
            )
        if user_id == "":  # LangChain config specs often default to "": no user
            user_id = None
        return super().memory(storage_session_id(session_id, user_id), user_id)

    def history(self, session_id: str, user_id: str | None = None) -> ConvMemChatMessageHistory:
        """A new chat history on the session's memory (cheap: the memory is shared).

        Its ``messages`` is pinned (see `ConvMemChatMessageHistory`):
        `RunnableWithMessageHistory` asks for one history per invocation, and
        a pinned one keeps that invocation's reads identical even when another
        turn of the same session finishes in between.
        """
        return ConvMemChatMessageHistory(
            memory=self.memory(session_id, user_id), budget=self.budget, pin_messages=True
        )

    def __call__(self, session_id: str, user_id: str | None = None) -> ConvMemChatMessageHistory:
        """`get_session_history` for `RunnableWithMessageHistory` (see `history`)."""
        return self.history(session_id, user_id)

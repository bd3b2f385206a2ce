"""What a store can do beyond the `Store` contract, declared by the store and asked by its users.

Each capability is a small runtime-checkable protocol. A store declares one by naming
it among its bases, and the code that could use it asks ``offers(store, Capability)``
(``isinstance``, remembered for the store's class), never the store's class. The check
looks at method names, so a store that has a capability's methods undeclared counts as
having it::

    class MyStore(Store, ReadsSession):
        def read_session(self, session_id, keys): ...

    snapshot = read_session(store, "s1", ["summary"])  # one call where the store reads whole

The capabilities of a sync store are sync; `AsyncReadsSession` is the one async
stores declare. `convmem.testing` runs the contract of each capability a store
declares.
"""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from .._models import Message
from .base import SessionSnapshot, SessionStats, StateRecord, Store

if TYPE_CHECKING:
    from .._recall.embedder import Embedder
    from .._recall.index_rows import HistoryTables
    from .._recall.index_scope import IndexScope
    from .._recall.vector_index import VectorIndex

__all__ = [
    "AsyncReadsSession",
    "HasFileLocation",
    "HostsHistoryIndex",
    "HostsVectors",
    "ListsUserSessions",
    "LogRead",
    "ReadsLogs",
    "ReadsSession",
    "ReadsStates",
    "ReadsUserScope",
    "offers",
    "read_session",
]


@runtime_checkable
class ReadsSession(Protocol):
    """Reads a session's stats and some of its state records in one call (one round trip):
    what every build reads."""

    def read_session(self, session_id: str, keys: Sequence[str]) -> SessionSnapshot:
        """The session's `Store.stats` and those of its `keys` state records it has."""
        ...


@runtime_checkable
class AsyncReadsSession(Protocol):
    """`ReadsSession` of an `AsyncStore`."""

    async def read_session(self, session_id: str, keys: Sequence[str]) -> SessionSnapshot:
        """`ReadsSession.read_session` as a coroutine."""
        ...


@runtime_checkable
class ReadsStates(Protocol):
    """Reads one state record of many sessions in one call (a user's facts, for each build)."""

    def get_states(self, session_ids: Sequence[str], key: str) -> dict[str, StateRecord]:
        """The `key` record of each of `session_ids` that has one."""
        ...


@runtime_checkable
class ListsUserSessions(Protocol):
    """Lists a user's sessions with their stats in one call."""

    def user_session_stats(self, user_id: str) -> list[SessionStats]:
        """`Store.stats` of every session of `user_id`, sorted by session id."""
        ...


@runtime_checkable
class ReadsUserScope(Protocol):
    """Reads what a build of a user's session reads before recall in one call: the
    session's stats and state records, the stats of the user's sessions and one state
    record (their facts) of each, where `read_session`, `user_session_stats` and
    `get_states` would take a round trip each."""

    def read_user_scope(
        self, session_id: str, keys: Sequence[str], user_id: str, user_key: str
    ) -> SessionSnapshot:
        """`read_session(session_id, keys)` with `SessionSnapshot.user_sessions` (as
        `user_session_stats(user_id)`) and `SessionSnapshot.user_states` (the `user_key`
        records of `session_id` and of the user's sessions, as `get_states`) filled."""
        ...


@dataclasses.dataclass(frozen=True)
class LogRead:
    """A session's whole log as one read gave it, between two reads of its stats.

    ``stats`` were read before the messages and ``stats_after`` after them: when
    their ``generation`` is the same, ``messages`` are that generation's log (later
    appends may be in it too); when it differs, the log changed while it was read.
    """

    stats: SessionStats
    messages: list[Message]
    stats_after: SessionStats


@runtime_checkable
class ReadsLogs(Protocol):
    """Reads the whole logs of many sessions in one call (one round trip): what the first
    search of a returning user reads where recall indexes in the process (Redis), one
    log per session of the user."""

    def read_logs(self, session_ids: Sequence[str]) -> dict[str, LogRead]:
        """The `LogRead` of each of `session_ids` (each id once; a session never written
        reads as empty): its stats, ``messages(session_id)`` and its stats again."""
        ...


@runtime_checkable
class HostsHistoryIndex(Protocol):
    """Keeps recall's keyword index of each user's history itself (SQLite tables in its file,
    PostgreSQL rows), so a new process answers a returning user's first query from it
    instead of reading the user's logs."""

    def history_tables(self) -> HistoryTables | None:
        """The tables, or None when this store was opened to leave the index to recall
        (``lexical_index="process"``: BM25 in each process, from the logs)."""
        ...


@runtime_checkable
class HostsVectors(Protocol):
    """Can keep recall's vectors (``Recall(index_factory=store.vector_index_factory(embedder))``)."""

    def vector_index_factory(self, embedder: Embedder | str) -> Callable[[IndexScope], VectorIndex]:
        """An ``index_factory`` for `Recall` whose indexes keep `embedder`'s vectors in this store."""
        ...


@runtime_checkable
class HasFileLocation(Protocol):
    """Lives in a file, beside which recall's vector index files go."""

    def vector_index_dir(self) -> Path:
        """The folder for the FAISS files of this store's sessions."""
        ...


@dataclasses.dataclass(frozen=True)
class UserTotals:
    """A user and what their sessions hold; ``user_id`` None stands for sessions written
    without one."""

    user_id: str | None
    sessions: int
    messages: int
    tokens: int
    first_at: float | None
    last_at: float | None


@runtime_checkable
class PagesSessions(Protocol):
    """Lists users and sessions a page at a time, a query each, without reading a log
    (what an inspector's list pages ask of a large store)."""

    def users_page(self, offset: int, limit: int) -> tuple[list[UserTotals], int]:
        """Users ordered by id (sessions without a user last), and how many there are."""
        ...

    def sessions_page(self, user_id: str | None, offset: int, limit: int) -> tuple[list[SessionStats], int]:
        """The stats of `user_id`'s sessions (None: sessions without a user) ordered by id,
        and how many there are."""
        ...


def offers(store: object, capability: type) -> bool:
    """``isinstance(store, capability)``, for a capability of this module.

    A runtime protocol's check looks up each of its methods on every call, several
    microseconds each, and a build asks a few: the answer is remembered for the store's
    class. A store whose class answers attribute lookups itself (``__getattr__``, as a
    wrapper does) is checked each time."""
    kind = type(store)
    known = _CLASS_OFFERS.get(kind)
    if known is None:
        known = _CLASS_OFFERS.setdefault(kind, ({}, hasattr(kind, "__getattr__")))
    answers, dynamic = known
    if dynamic:
        return isinstance(store, capability)
    found = answers.get(capability)
    if found is None:
        found = answers[capability] = isinstance(store, capability)
    return found


# Per store class (kept while the class lives): whether it has each capability, and
# whether its instances answer attribute lookups themselves.
_CLASS_OFFERS: weakref.WeakKeyDictionary[type, tuple[dict[type, bool], bool]] = weakref.WeakKeyDictionary()


def read_session(store: Store, session_id: str, keys: Sequence[str]) -> SessionSnapshot:
    """The session's `Store.stats` and its `keys` state records (those it has): in one call
    where the store `ReadsSession` (Redis, PostgreSQL), else a read of each."""
    if offers(store, ReadsSession):
        return cast(ReadsSession, store).read_session(session_id, keys)
    stats = store.stats(session_id)
    states = {key: record for key in keys if (record := store.get_state(session_id, key)) is not None}
    return SessionSnapshot(stats, states)

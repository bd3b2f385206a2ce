"""`StoreCatalog`: a store as a person browses it, users -> sessions -> messages, a page at a time.

A list page never reads a log: users and sessions come from what the store
keeps about each session (`SessionStats`: counts, tokens, dates, owner), and a
session's messages are read one page (a range of seqs) at a time. Only
building a context or searching reads more, as the memory itself would.

Listing users needs every session's owner, which the `Store` protocol gives
one session at a time. A store that pages its sessions itself (`PagesSessions`:
a SQLite file answers from its ``sessions`` table) gives a page a query; any
other store is scanned once (``store.sessions()`` and a ``stats`` per session,
reported to a ``progress`` callback) and the listing kept for
`rescan_after_seconds`, so paging through it does not scan again.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Generic, TypeVar, cast

from .._config import MemoryConfig
from .._derived.facts import Fact
from .._derived.records import FACTS_KEY, SUMMARY_KEY, Summary, parse_facts
from .._derived.user_scope import UserFacts
from .._errors import ConfigError
from .._models import Message
from .._stores.base import SessionStats, Store, validate_id
from .._stores.capabilities import PagesSessions, UserTotals, offers
from .._tokens import TokenCounter, default_counter

if TYPE_CHECKING:
    from .._context.report import BuiltContext
    from .._recall.engine import Recall
    from .._recall.render import RecalledItem

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "Page",
    "Progress",
    "SessionDetail",
    "StoreCatalog",
    "UserRow",
]

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000

_Item = TypeVar("_Item")

Progress = Callable[[int, int], None]
"""Called as ``progress(done, total)`` while a store is scanned."""


@dataclasses.dataclass(frozen=True)
class Page(Generic[_Item]):
    """One page of a listing: its items, which page it is (from 1), and how many there are in all."""

    items: tuple[_Item, ...]
    number: int
    size: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages

    @property
    def first(self) -> int:
        """The place of the page's first item in the whole listing, from 1 (0 when empty)."""
        return (self.number - 1) * self.size + 1 if self.total else 0


UserRow = UserTotals
"""A user and what their sessions hold (``user_id`` None: sessions written without one)."""


@dataclasses.dataclass(frozen=True)
class SessionDetail:
    """What a session's page shows besides its messages."""

    stats: SessionStats
    summary: Summary
    facts: tuple[Fact, ...]
    """The facts this session stated (current values, newest first)."""


def check_page(number: object, size: object) -> tuple[int, int]:
    """`number` (from 1) and `size` (1 to `MAX_PAGE_SIZE`) as ints, or `ConfigError` naming the bad one."""
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise ConfigError(f"page must be an int >= 1, got {number!r:.40}")
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_PAGE_SIZE:
        raise ConfigError(f"page size must be an int from 1 to {MAX_PAGE_SIZE}, got {size!r:.40}")
    return number, size


def _user_row(user_id: str | None, sessions: Sequence[SessionStats]) -> UserRow:
    created = [s.created_at for s in sessions if s.created_at is not None]
    updated = [s.updated_at for s in sessions if s.updated_at is not None]
    return UserRow(
        user_id,
        len(sessions),
        sum(s.message_count for s in sessions),
        sum(s.total_tokens for s in sessions),
        min(created) if created else None,
        max(updated) if updated else None,
    )


class _PagedListing:
    """Users and sessions of a store that pages them itself (`PagesSessions`): a query a page."""

    def __init__(self, store: PagesSessions) -> None:
        self.store = store

    def users(self, number: int, size: int) -> Page[UserRow]:
        users, total = self.store.users_page((number - 1) * size, size)
        return Page(tuple(users), number, size, total)

    def sessions(self, user_id: str | None, number: int, size: int) -> Page[SessionStats]:
        stats, total = self.store.sessions_page(user_id, (number - 1) * size, size)
        return Page(tuple(stats), number, size, total)


class _ScannedListing:
    """Users and sessions of any store: every session's stats, read once and kept a while."""

    def __init__(self, store: Store, rescan_after_seconds: float, progress: Progress | None) -> None:
        self.store = store
        self.rescan_after_seconds = rescan_after_seconds
        self.progress = progress
        self._lock = threading.Lock()
        self._scanned: tuple[float, dict[str | None, list[SessionStats]]] | None = None

    def forget(self) -> None:
        with self._lock:
            self._scanned = None

    def _by_user(self) -> dict[str | None, list[SessionStats]]:
        with self._lock:
            scanned = self._scanned
        if scanned is not None and time.monotonic() - scanned[0] < self.rescan_after_seconds:
            return scanned[1]
        session_ids = self.store.sessions()
        by_user: dict[str | None, list[SessionStats]] = {}
        for done, session_id in enumerate(session_ids, 1):
            stats = self.store.stats(session_id)
            by_user.setdefault(stats.user_id, []).append(stats)
            if self.progress is not None and (done % 100 == 0 or done == len(session_ids)):
                self.progress(done, len(session_ids))
        with self._lock:
            self._scanned = (time.monotonic(), by_user)
        return by_user

    def users(self, number: int, size: int) -> Page[UserRow]:
        by_user = self._by_user()
        order = sorted(by_user, key=lambda user: (user is None, user or ""))
        start = (number - 1) * size
        items = tuple(_user_row(user, by_user[user]) for user in order[start : start + size])
        return Page(items, number, size, len(order))

    def sessions(self, user_id: str | None, number: int, size: int) -> Page[SessionStats]:
        start = (number - 1) * size
        if user_id is None:
            found = sorted(self._by_user().get(None, []), key=lambda s: s.session_id)
            return Page(tuple(found[start : start + size]), number, size, len(found))
        # A user's sessions are listed by the store itself: only the page's stats are read.
        ids = self.store.sessions(user_id=user_id)
        stats = tuple(self.store.stats(session_id) for session_id in ids[start : start + size])
        return Page(stats, number, size, len(ids))


class StoreCatalog:
    """Read a store for the inspector: users, sessions, messages, summary, facts, contexts, search.

    Args:
        store: any convmem `Store`.
        counter: counts tokens when a context is built (default: `default_counter()`).
        recall: the `Recall` that builds and searches use (default: one made on first
            use, keyword recall with no model); one engine serves every session asked about.
        progress: told ``(done, total)`` while a store without a session table is scanned.
        rescan_after_seconds: how long such a scan is reused before the store is read again.

    Nothing here writes to the store; `forget_session`, `forget_user` and
    `delete_message` are the only writes, and `convmem serve` calls them only
    for a request that carries its write token.
    """

    def __init__(
        self,
        store: Store,
        *,
        counter: TokenCounter | None = None,
        recall: Recall | None = None,
        progress: Progress | None = None,
        rescan_after_seconds: float = 10.0,
    ) -> None:
        if not isinstance(store, Store):
            raise ConfigError(f"store must be a convmem Store, got {type(store).__name__}")
        self.store = store
        self.counter = counter or default_counter()
        self._recall = recall
        self._recall_lock = threading.Lock()
        self._listing: _PagedListing | _ScannedListing = (
            _PagedListing(cast(PagesSessions, store))
            if offers(store, PagesSessions)
            else _ScannedListing(store, rescan_after_seconds, progress)
        )

    def __repr__(self) -> str:
        return f"StoreCatalog({self.store!r})"

    @property
    def recall(self) -> Recall:
        """The recall engine of builds and searches, made on first use."""
        with self._recall_lock:
            if self._recall is None:
                from .._recall.engine import Recall

                self._recall = Recall()
            return self._recall

    # -- lists -----------------------------------------------------------------------

    def users(self, page: int = 1, size: int = DEFAULT_PAGE_SIZE) -> Page[UserRow]:
        """Users by id with their sessions' counts and dates; sessions without a user come last."""
        return self._listing.users(*check_page(page, size))

    def sessions(
        self, user_id: str | None, page: int = 1, size: int = DEFAULT_PAGE_SIZE
    ) -> Page[SessionStats]:
        """The sessions of `user_id` (None: those written without a user), by id."""
        number, size = check_page(page, size)
        if user_id is not None:
            user_id = validate_id(user_id, "user_id")
        return self._listing.sessions(user_id, number, size)

    def messages(self, session_id: str, page: int = 1, size: int = DEFAULT_PAGE_SIZE) -> Page[Message]:
        """Messages with seqs ``(page - 1) * size + 1 .. page * size``, oldest first.

        Pages follow seqs, so a page after a deletion holds fewer messages; `Page.total`
        is the session's last seq.
        """
        number, size = check_page(page, size)
        session_id = validate_id(session_id, "session_id")
        last_seq = self.store.stats(session_id).last_seq
        after = (number - 1) * size
        found = self.store.messages(session_id, after_seq=after, through_seq=after + size)
        return Page(tuple(found), number, size, last_seq)

    # -- one session or user ---------------------------------------------------------

    def session(self, session_id: str) -> SessionDetail:
        """A session's stats, rolling summary and the facts it stated."""
        session_id = validate_id(session_id, "session_id")
        stats = self.store.stats(session_id)
        summary = Summary.from_record(self.store.get_state(session_id, SUMMARY_KEY), session_id)
        facts = parse_facts(self.store.get_state(session_id, FACTS_KEY), session_id).current()
        return SessionDetail(stats, summary, tuple(facts))

    def user_facts(self, user_id: str) -> tuple[Fact, ...]:
        """The user's facts across their sessions, as a memory with that ``user_id`` sees them."""
        user_id = validate_id(user_id, "user_id")
        sessions = self.store.sessions(user_id=user_id)
        if not sessions:
            return ()
        return tuple(UserFacts(self.store, user_id, sessions[0]).book().current())

    # -- reading as a memory does -------------------------------------------------------

    def build_context(self, session_id: str, query: str | None, budget: int) -> BuiltContext:
        """The context a memory on this session builds for `query` within `budget` tokens.

        The memory is made as the session's owner would make it (its ``user_id``, so
        the user's facts and other sessions count) with the default `MemoryConfig`.
        """
        from .._memory import ConversationMemory

        session_id = validate_id(session_id, "session_id")
        owner = self.store.stats(session_id).user_id
        memory = ConversationMemory(
            session_id, self.store, MemoryConfig(), user_id=owner, counter=self.counter, recall=self.recall
        )
        try:
            return memory.build_context(query=query, budget=budget)
        finally:
            memory.close()

    def search(self, user_id: str, query: str, max_tokens: int = 2000) -> tuple[RecalledItem, ...]:
        """What recall finds for `query` across every session of `user_id`, best matches
        within `max_tokens`; each item's ``session_id`` says where it was said."""
        user_id = validate_id(user_id, "user_id")
        if not isinstance(query, str) or not query.strip():
            raise ConfigError(f"a search needs a non-empty query, got {query!r:.60}")
        sessions = self.store.sessions(user_id=user_id)
        if not sessions:
            return ()
        first, *others = sessions
        result = self.recall.search(
            first,
            query,
            store=self.store,
            max_tokens=max_tokens,
            counter=self.counter,
            other_sessions=others,
        )
        # The first session is the asking one, whose items carry no session id: name it.
        return tuple(
            item if item.session_id is not None else dataclasses.replace(item, session_id=first)
            for item in result.items
        )

    # -- writes (convmem serve, with its write token) ------------------------------------

    def forget_session(self, session_id: str) -> None:
        """Delete the session: its log, summary, facts and what recall keeps of it."""
        from .._stores.retention import forget_session

        forget_session(self.store, validate_id(session_id, "session_id"), recall=self._recall)
        self._changed()

    def forget_user(self, user_id: str) -> list[str]:
        """Delete every session of the user; return their ids."""
        from .._stores.retention import forget_user

        deleted = forget_user(self.store, validate_id(user_id, "user_id"), recall=self._recall)
        self._changed()
        return deleted

    def delete_message(self, session_id: str, seq: int) -> Message:
        """Delete one message as the memory does (its summary and facts follow); return it."""
        from .._memory import ConversationMemory

        session_id = validate_id(session_id, "session_id")
        owner = self.store.stats(session_id).user_id
        memory = ConversationMemory(
            session_id, self.store, MemoryConfig(), user_id=owner, counter=self.counter, recall=self.recall
        )
        try:
            (deleted,) = memory.delete_messages([seq])
        finally:
            memory.close()
        self._changed()
        return deleted

    def _changed(self) -> None:
        if isinstance(self._listing, _ScannedListing):
            self._listing.forget()

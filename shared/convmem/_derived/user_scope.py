"""What the sessions of one user share: their facts, read as one book.

A memory created with a ``user_id`` sees the facts the user stated in any of
their sessions (``MemoryConfig.share_facts``). Each session keeps its own
fact book, derived from its own log (so deleting a message, forgetting a
session or expiring it removes exactly the facts it stated); the user's book
is those books merged at read time (`FactBook.merged`): a newer value from any
session supersedes an older one from any other, and a fact stated in two
sessions survives the loss of either.

Sessions are the walls: only sessions the store lists for the user (the
sessions that user owns, see `Store.append`) are read, so nothing of another
user, nor of a session without a user, is ever merged in.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import cast

from .._stores.base import SessionStats, StateRecord, Store
from .._stores.capabilities import ListsUserSessions, ReadsStates, offers
from .facts import FactBook
from .records import FACTS_KEY, forget_fact_of, parse_facts

__all__ = ["UserFacts", "other_session_stats", "owned_others", "user_sessions"]

# Parsed fact books by their stored text (a text always parses to the same book): a
# server that opens a memory per request parses each session's facts once.
_PARSED_KEPT = 4096
_parsed: OrderedDict[str, FactBook] = OrderedDict()
_parsed_lock = threading.Lock()


def _parsed_book(record: StateRecord, session_id: str) -> FactBook:
    with _parsed_lock:
        book = _parsed.get(record.value)
        if book is not None:
            _parsed.move_to_end(record.value)
            return book
    book = parse_facts(record, session_id)
    with _parsed_lock:
        _parsed[record.value] = book
        while len(_parsed) > _PARSED_KEPT:
            _parsed.popitem(last=False)
    return book


def user_sessions(store: Store, user_id: str, current: str) -> list[str]:
    """The sessions of `user_id` in `store`, `current` first (listed even before its
    first message makes the user its owner)."""
    return [current] + [session for session in store.sessions(user_id=user_id) if session != current]


def other_session_stats(store: Store, user_id: str, current: str) -> list[SessionStats]:
    """`stats` of the sessions of `user_id` other than `current`: in one call where the
    store offers ``user_session_stats`` (one query), else a listing and a read per session."""
    if offers(store, ListsUserSessions):
        found = cast(ListsUserSessions, store).user_session_stats(user_id)
    else:
        found = [store.stats(session) for session in store.sessions(user_id=user_id)]
    return owned_others(found, user_id, current)


def owned_others(found: Sequence[SessionStats], user_id: str, current: str) -> list[SessionStats]:
    """The sessions of `found` that `user_id` owns, but `current`: a session forgotten (or
    given to another user) between listing and reading is gone."""
    return [stats for stats in found if stats.session_id != current and stats.user_id == user_id]


def _states(store: Store, sessions: Sequence[str], key: str) -> dict[str, StateRecord]:
    """The `key` state record of each session that has one, in one call where the store
    offers ``get_states`` (one query or round trip), else one read per session."""
    if offers(store, ReadsStates):
        return cast(ReadsStates, store).get_states(sessions, key)
    records = {}
    for session in sessions:
        record = store.get_state(session, key)
        if record is not None:
            records[session] = record
    return records


class UserFacts:
    """The facts of all sessions of one user, as one `FactBook` (read-only).

    Thread-safe. The merged book is kept until a session's facts change (their
    records are read and compared on every read, in one store call where the
    store batches reads).
    """

    def __init__(self, store: Store, user_id: str, session_id: str) -> None:
        self.store = store
        self.user_id = user_id
        self.session_id = session_id
        self._lock = threading.Lock()
        self._merged: tuple[int, FactBook] | None = None

    def sessions(self) -> list[str]:
        """The user's sessions, read from the store on each call: this memory's session first
        (even before its first message), then the others in the store's order."""
        return user_sessions(self.store, self.user_id, self.session_id)

    def book(self, sessions: Sequence[str] | None = None) -> FactBook:
        """The user's facts: every session's book merged, each fact tagged with its session.

        `sessions` are the user's sessions when the caller has just listed them (a build
        reads their stats anyway), this memory's first; None lists them again."""
        if sessions is None:
            sessions = self.sessions()
        return self.book_of(_states(self.store, sessions, FACTS_KEY))

    def book_of(self, records: Mapping[str, StateRecord]) -> FactBook:
        """The user's facts merged from the facts `records` of their sessions, by session id
        (read by the caller, e.g. with a build's snapshot: `ReadsUserScope`); the merged
        book is kept until one of them changes."""
        # Compared by text, not version: a session forgotten and written again restarts
        # its versions, and must not be served from the book of its earlier life. What is
        # kept is not the texts (a server keeps a book for each memory it caches) but each
        # one's length, version and hash: Python keeps a string's hash with it, so a build
        # that reads the same records again compares them in microseconds.
        versions = hash(
            tuple(
                sorted(
                    (session, record.version, len(record.value), hash(record.value))
                    for session, record in records.items()
                )
            )
        )
        with self._lock:
            if self._merged is not None and self._merged[0] == versions:
                return self._merged[1]
        merged = FactBook.merged(
            (session, _parsed_book(record, session)) for session, record in sorted(records.items())
        )
        with self._lock:
            self._merged = (versions, merged)
        return merged

    def forget(self, key: str, speaker: str | None = None) -> bool:
        """Forget the fact `key` (of `speaker`, in a chat of several people) in every session
        of the user; False if none had it."""
        forgotten = False
        for session in self.sessions():
            forgotten = forget_fact_of(self.store, session, key, speaker) or forgotten
        return forgotten

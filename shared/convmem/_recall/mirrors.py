"""Which sessions a `Recall` mirrors in this process, and the user histories they share.

`MirrorTable` keeps the `SessionMirror` of each (store, session) a `Recall` has read,
least recently used first, at most ``max_sessions`` of them, and the keyword index of
each user's history (`HistoryIndex`) that those mirrors put their documents in. A
store is known by a number no other store object gets while it lives (`store_key`),
so two stores with the same session id never share a mirror.

Mirrors dropped from the table that a running add or search still holds are kept
track of (weakly): `take` reaches them too, so a forgotten session's vectors are never
saved again by a call that started before it was forgotten.
"""

from __future__ import annotations

import functools
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import ConfigError
from .._stores.base import Store
from .._stores.capabilities import LogRead, ReadsLogs, offers
from .config import RecallConfig
from .history_index import HistoryIndex, SlotView
from .lexical import BM25TextIndex
from .plan import Blocking, Plan
from .rank import without_speakers
from .units import SessionMirror

__all__ = ["MirrorKey", "MirrorTable", "query_to_embed", "read_logs", "speakers_of"]

logger = logging.getLogger("convmem")

# (the store's number, or None for messages given without a store; the session id)
MirrorKey = tuple[int | None, str]


class MirrorTable:
    """The mirrors of one `Recall`, by (store, session), and its users' keyword histories.

    Thread-safe: every method takes `lock` itself, except those that say "lock held".
    """

    def __init__(self, max_sessions: int, *, embeds: bool) -> None:
        self.max_sessions = max_sessions
        self.embeds = embeds
        self.lock = threading.Lock()
        # key -> mirror, least recently used first.
        self._sessions: OrderedDict[MirrorKey, SessionMirror] = OrderedDict()
        self._keys_of: dict[str, set[MirrorKey]] = {}
        self._evicted: weakref.WeakValueDictionary[MirrorKey, SessionMirror] = weakref.WeakValueDictionary()
        # The keyword index of each user's history in this process, by (store key, owner):
        # a user's sessions score as one collection, in one pass (see `HistoryIndex`).
        self._histories: dict[tuple[int | None, tuple[str, str]], HistoryIndex] = {}
        self._store_keys: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._next_store_key = 1

    # -- finding a mirror ------------------------------------------------------------

    def store_key(self, store: Store | None) -> int | None:
        """A number for `store` that no other store object gets while this one lives (lock held)."""
        if store is None:
            return None
        try:
            key = self._store_keys.get(store)
        except TypeError:  # neither hashable nor weakly referenceable: go by identity
            return id(store)
        if key is None:
            key = self._next_store_key
            self._next_store_key += 1
            self._store_keys[store] = key
        return key

    def locked_store_key(self, store: Store) -> int | None:
        """`store_key`, taking the lock."""
        with self.lock:
            return self.store_key(store)

    def resolve(self, session_id: str) -> SessionMirror | None:
        """The mirror of `session_id` for a call that names no store (lock held).

        The one store this table mirrors the session for, else what `add` fed without
        a store; a session mirrored for several stores needs the store named.
        """
        keys = self._keys_of.get(session_id, set())
        named = [key for key in keys if key[0] is not None]
        if len(named) > 1:
            raise ConfigError(
                f"this Recall mirrors session {session_id!r:.80} for {len(named)} stores; pass "
                "store= to say which one"
            )
        key = named[0] if named else (None, session_id)
        return self._sessions.get(key)

    def find(self, session_id: str, store: Store | None = None) -> SessionMirror | None:
        """The mirror of a session of `store` (or of the one store it is mirrored for), if any."""
        with self.lock:
            if store is None:
                return self.resolve(session_id)
            return self._sessions.get((self.store_key(store), session_id))

    def unread(self, store: Store, session_ids: Sequence[str]) -> list[str]:
        """Those of `session_ids` with no mirror here (or one that must read its log again),
        when the store `ReadsLogs` and there are at least two: what `read_logs` reads in
        one call (a returning user's first search in a process; three round trips per
        session otherwise). Empty otherwise, as on every search after the first."""
        if not offers(store, ReadsLogs):
            return []
        with self.lock:
            key = self.store_key(store)
            unread = [
                session_id
                for session_id in session_ids
                if (state := self._sessions.get((key, session_id))) is None or state.needs_full_read
            ]
        return unread if len(unread) > 1 else []

    def get(self, session_id: str, store: Store | None = None) -> tuple[SessionMirror, list[SessionMirror]]:
        """The mirror of a session of `store`, made (or taken from what `add` fed without a
        store) when there is none, and the least recently used mirrors it pushed out of the
        table (beyond `max_sessions`), already detached from their histories."""
        with self.lock:
            if store is None:
                state = self.resolve(session_id)
                key = (None, session_id) if state is None else state.key
            else:
                key = (self.store_key(store), session_id)
                state = self._sessions.get(key)
                if state is None:
                    # Messages add() was given without a store: checked against the log on first read.
                    state = self._sessions.pop((None, session_id), None)
                    if state is not None:
                        self._keys_of[session_id].discard(state.key)
            if state is None:
                state = self._evicted.pop(key, None) or SessionMirror(session_id, embeds=self.embeds)
            state.key = key
            self._sessions[key] = state
            self._sessions.move_to_end(key)
            self._keys_of.setdefault(session_id, set()).add(key)
            evicted = []
            while len(self._sessions) > self.max_sessions:
                old_key, old = self._sessions.popitem(last=False)
                self._forget_key(old_key)
                self._evicted[old_key] = old
                evicted.append(old)
        for old in evicted:
            self.detach(old)
        return state, evicted

    def all(self) -> list[SessionMirror]:
        """Every mirror in the table."""
        with self.lock:
            return list(self._sessions.values())

    def only_store(self) -> Store | None:
        """The one store this table has served, if it has served exactly one (else None)."""
        with self.lock:
            stores = list(self._store_keys.keys())
        return stores[0] if len(stores) == 1 else None

    # -- forgetting ---------------------------------------------------------------------

    def take(
        self,
        session_id: str,
        store: Store | None,
        tenant_of: Callable[[Store], str | None],
        *,
        one_store: bool,
    ) -> list[SessionMirror]:
        """Remove every mirror of `session_id` from the table (dropped ones a call still
        holds included) and return them, detached: of `store`'s data when given (the
        object itself and any store of the same tenant, see `tenant_of`), else of every
        store. With `one_store`, a session mirrored for several stores and no store named
        is a `ConfigError` (whose copy would be meant is unclear)."""
        with self.lock:
            wanted = set(self._keys_of.get(session_id, set()))
            tenant = None if store is None else self._tenant_keys(store, tenant_of)
            if tenant is not None:
                wanted = {key for key in wanted if key[0] in tenant}
            elif one_store and len({key for key in wanted if key[0] is not None}) > 1:
                raise ConfigError(
                    f"this Recall mirrors session {session_id!r:.80} for several stores; pass store= "
                    "to say whose vectors to delete from the shared vector store"
                )
            for key in wanted:
                self._forget_key(key)
            states = [state for key in wanted if (state := self._sessions.pop(key, None)) is not None]
            for key in [key for key in list(self._evicted.keys()) if key[1] == session_id]:
                if tenant is None or key[0] in tenant:
                    state = self._evicted.pop(key, None)
                    if state is not None:
                        states.append(state)
        for state in states:
            self.detach(state)
        return states

    def _tenant_keys(self, store: Store, tenant_of: Callable[[Store], str | None]) -> set[int | None]:
        """The keys of the stores this table serves that hold `store`'s data (lock held): the
        object itself and any store of the same tenant; None stands for no store named."""
        keys: set[int | None] = {None, self.store_key(store)}
        tenant = tenant_of(store)
        if tenant is not None:
            for other, key in list(self._store_keys.items()):
                if other is not store and tenant_of(other) == tenant:
                    keys.add(key)
        return keys

    def _forget_key(self, key: MirrorKey) -> None:
        keys = self._keys_of.get(key[1])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._keys_of[key[1]]

    # -- a user's history -------------------------------------------------------------

    def attach(self, state: SessionMirror, user_id: str | None) -> None:
        """Keep the session's keyword documents in its owner's `HistoryIndex` (the user's, or
        the session's own without a user), moving them there when the owner changed. An
        index the store keeps stays where it is."""
        owner = ("user", user_id) if user_id is not None else ("session", state.session_id)
        views = state.slot_views
        if state.history_owner == owner and views is not None and views[0].alive:
            return
        store_key = state.key[0]
        if store_key is None:
            return
        with self.lock:
            history = self._histories.get((store_key, owner))
            if history is None:
                history = self._histories[(store_key, owner)] = HistoryIndex()
            fresh = history.acquire()
        with state.lock:
            if fresh is None:  # every slot of this user taken: the session scores on its own
                state.use_lexical((BM25TextIndex(), BM25TextIndex()), refill=bool(state.order))
            else:
                state.use_lexical(fresh, refill=bool(state.order))
            state.history_owner = owner
        if views is not None:
            self._release(views[0])

    def detach(self, state: SessionMirror) -> None:
        """Take the session's documents out of its user's history (it is dropped or
        forgotten); read again, it is mirrored afresh."""
        with state.lock:
            views = state.slot_views
            if views is None:
                return
            state.use_lexical((BM25TextIndex(), BM25TextIndex()), refill=False)
            state.history_owner = None
            state.needs_full_read = True
        self._release(views[0])

    def _release(self, view: SlotView) -> None:
        with self.lock:
            view.release()
            for key, history in list(self._histories.items()):
                if history is view.history and not len(history):
                    del self._histories[key]


def speakers_of(mirrors: Sequence[SessionMirror]) -> dict[str, str]:
    """The named speakers (``lowercased name -> name``) of the mirrors' sessions."""
    speakers: dict[str, str] = {}
    for mirror in mirrors:
        with mirror.lock:
            speakers.update(mirror.speakers)
    return speakers


def query_to_embed(query: str, mirrors: Sequence[SessionMirror], config: RecallConfig) -> Plan[str]:
    """What the query's vector embeds: with the speaker boost on, the query with the
    speakers it names (in any of `mirrors`) put as "they" (see `RecallConfig.speaker_weight`)."""
    if not config.speaker_weight:
        return query
    speakers: dict[str, str] = yield Blocking(functools.partial(speakers_of, mirrors))
    return without_speakers(query, speakers) if speakers else query


def read_logs(store: Store, session_ids: Sequence[str]) -> dict[str, LogRead]:
    """``store.read_logs(session_ids)`` (see `MirrorTable.unread`), or nothing when it fails
    (logged: each log is then read on its own, and only a damaged one is left out)."""
    assert isinstance(store, ReadsLogs)
    try:
        return store.read_logs(session_ids)
    except Exception as exc:  # each session's own read may still succeed
        logger.warning("recall could not read %d session logs at once: %s", len(session_ids), exc)
        return {}

"""Recall over a history a store keeps (`HistoryTables`): `KeptHistories`.

A store that keeps recall's keyword index (`HostsHistoryIndex`: SQLite and
PostgreSQL unless opened with ``lexical_index="process"``) is searched where
the data is. A search reads, in this order: the index rows of the user's
sessions (where each session's indexing stands), the postings of the query's
terms over the whole history, the unit rows of the best candidates and, while
rendering, the messages it shows. Nothing else of the user's logs is read, so
a new process answers a returning user's first message in a few queries.

Writing is `catch_up`: after an append (the memory's derived state calls it,
inline or in the background) the messages after the session's cursor are read
and their rows written in one transaction, checked against the log's
generation and the cursor (see `HistoryTables.write`). A search first checks
each session's cursor against the stats the build read anyway: a session the
index lacks or that is behind its log (a crash between the two writes, work
still queued in the background, a file written before this index existed) is
indexed from its log before the search; one whose rows are stale (another
generation) or unreadable is indexed afresh with a warning, and so, quietly, are
those made by an earlier version of the tokenizer (`kept_cursors`).

Ranking, the evidence gate and rendering are those of the in-process path
(`search.conclude`); the BM25 is `scoring`'s, on the statistics of the whole
history, so both paths rank alike.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .._stores.base import SessionStats, Store
from .._tokens import TokenCounter
from .conclude import Shown, conclude
from .config import RecallConfig, RecallFilters
from .index_rows import (
    EXCHANGE_KIND,
    KEY_SHIFT,
    PASSAGE_KIND,
    UNIT_COLUMNS,
    HistoryTables,
    IndexBatch,
    IndexCursor,
    IndexedHistory,
    IndexedSession,
    IndexGap,
    PostingColumns,
    WritesBatches,
    derive,
    owner_key,
)
from .joined import GROUP_SHIFT
from .kept_cursors import plan_indexing, read_cursor, remake_outdated
from .kept_postings import PostingsCache
from .kept_rows import Excerpts, Fetched, KeptLines, Lines, RowCache
from .lexical import CollectionStats, LexicalScores, no_scores, query_terms
from .passages import PART_BITS, best_message_scores, best_of_each_message
from .rank import Evidence, named_speakers
from .render import CachedLine, RecallResult
from .scoring import TermPostings, bm25, coverage

__all__ = ["KeptHistories"]

logger = logging.getLogger("convmem")

_LOCAL_MASK = (1 << KEY_SHIFT) - 1
# Rendered lines kept across searches (per Recall): a line is counted once, not per build.
# A user asking 200 different questions of a history of 50 long chats renders about 400
# lines, so this keeps what twenty such users come back to; kept, a line is about 400
# bytes with its key.
_LINES_KEPT = 8192
# Messages an append may leave unindexed (`catch_up` with ``batched=True``): written in one
# transaction when this many are due, or by the next search, flush or close.
WRITE_EVERY = 32
_UNREAD = object()
# Sessions a search indexes in one write, where the tables can (`_catch_up_many`): one
# transaction held the write lock 0.09-0.15 s for 64 LongMemEval sessions.
_SESSIONS_PER_WRITE = 64
# Sessions per tables whose written seq a process remembers (the oldest go first).
_SESSIONS_NOTED = 65536


class KeptHistories:
    """The part of a `Recall` that works with histories stores keep. Thread-safe."""

    def __init__(self, config: RecallConfig) -> None:
        self.config = config
        self._lines: OrderedDict[tuple[object, ...], CachedLine] = OrderedDict()
        self._lock = threading.Lock()
        # Postings of recent query terms: read once per batch written, not once per search.
        self.postings = PostingsCache()
        # The seq each session's rows were last seen written through, per tables.
        self._written: weakref.WeakKeyDictionary[HistoryTables, dict[str, int]] = weakref.WeakKeyDictionary()
        # Unit rows and messages of recent candidates: a warm build reads neither again.
        self.rows = RowCache()

    # -- writing ------------------------------------------------------------------------

    def catch_up(
        self,
        tables: HistoryTables,
        store: Store,
        session_id: str,
        stats: SessionStats | None = None,
        row: object = _UNREAD,
        *,
        batched: bool = False,
    ) -> None:
        """Write the rows of what the session's log holds beyond its cursor (nothing when
        the rows are up to date: one small read, none with `stats` and `row` given).

        With `batched` (after an append) nothing is written while fewer than `WRITE_EVERY`
        messages are due since this process last saw the rows: a search, or a `catch_up`
        without it, writes them. Nothing is lost meanwhile: the log holds the messages,
        and a search indexes what its sessions' rows lack before it reads them."""
        for _ in range(3):
            if stats is None:
                stats = store.stats(session_id)
            if batched and stats.last_seq - self.written_through(tables, session_id) < WRITE_EVERY:
                return
            if row is _UNREAD:
                row = tables.indexed_session(session_id)
            assert row is None or isinstance(row, IndexedSession)
            owner = owner_key(stats.user_id, session_id)
            batch = self._batch(store, stats, owner, row)
            if batch is None:
                self._note_written(tables, session_id, stats.last_seq)
                return
            if tables.write(owner, batch, row):
                self._note_written(tables, session_id, batch.cursor.seq)
                return
            stats, row = None, _UNREAD  # another writer, or the log moved on: look again
        logger.debug("recall's keyword index of session %r: gave way to other writers", session_id)

    def _batch(
        self, store: Store, stats: SessionStats, owner: str, row: IndexedSession | None
    ) -> IndexBatch | None:
        """The rows of what the session's log (`stats`) holds beyond `row`'s cursor, read
        from the log; None when the rows are up to date."""
        plan = plan_indexing(stats, owner, row)
        if plan is None:
            return None
        cursor, reset, warning = plan
        if warning is not None:
            logger.warning(warning)
        session_id = stats.session_id
        messages = store.messages(session_id, after_seq=cursor.seq)
        try:
            batch = derive(
                cursor, messages, self.config, session_id=session_id, generation=stats.generation, reset=reset
            )
        except IndexGap as gap:
            logger.warning("recall's keyword index: %s; indexing the session afresh", gap)
            batch = derive(
                IndexCursor(),
                store.messages(session_id),
                self.config,
                session_id=session_id,
                generation=stats.generation,
                reset=True,
            )
        # Every message up to the stats' last seq was read (the stats were read first):
        # deleted ones included, the log is indexed through it.
        batch.cursor.seq = max(batch.cursor.seq, stats.last_seq)
        return batch

    def _catch_up_many(
        self,
        tables: HistoryTables,
        store: Store,
        owner: str,
        behind: Sequence[SessionStats],
        indexed: IndexedHistory,
    ) -> None:
        """What a search indexes before it reads: the sessions of `behind` (of `owner`'s
        history), `_SESSIONS_PER_WRITE` at a time in one write where the tables can
        (`WritesBatches`); one by one otherwise, and for a session another writer got to
        first (`catch_up` looks again). Written one by one, the sessions of a history that
        was never indexed (or indexed by another tokenizer) made as many SQLite segments,
        merged again and again. Sessions the history's rows lack are told once, for all of
        them."""
        lacking = [stats for stats in behind if stats.session_id not in indexed.sessions]
        if len(lacking) == 1:
            logger.info(
                "recall's keyword index lacks session %r (%d messages); indexing it from its log",
                lacking[0].session_id,
                lacking[0].message_count,
            )
        elif lacking:  # said once for them all, not once per session
            named = ", ".join(repr(stats.session_id) for stats in lacking[:3])
            logger.info(
                "recall's keyword index lacks %d sessions of this history (%s%s; %d messages); indexing "
                "them from their logs",
                len(lacking),
                named,
                f" and {len(lacking) - 3} more" if len(lacking) > 3 else "",
                sum(stats.message_count for stats in lacking),
            )
        if len(behind) < 2 or not isinstance(tables, WritesBatches):
            for stats in behind:
                known = indexed.sessions.get(stats.session_id, _UNREAD)
                self.catch_up(tables, store, stats.session_id, stats, known)
            return
        for start in range(0, len(behind), _SESSIONS_PER_WRITE):
            made: list[tuple[IndexBatch, IndexedSession | None]] = []
            for stats in behind[start : start + _SESSIONS_PER_WRITE]:
                row = indexed.sessions.get(stats.session_id)
                if row is None:  # perhaps in another history still (given to a user since)
                    row = tables.indexed_session(stats.session_id)
                batch = self._batch(store, stats, owner, row)
                if batch is not None:
                    made.append((batch, row))
            written = tables.write_many(owner, made) if made else []
            for (batch, _), done in zip(made, written, strict=True):
                if done:
                    self._note_written(tables, batch.session_id, batch.cursor.seq)
                else:
                    self.catch_up(tables, store, batch.session_id)

    def written_through(self, tables: HistoryTables, session_id: str) -> int:
        """The seq this process last saw the session's rows written through (-1: never)."""
        with self._lock:
            try:
                return self._written.get(tables, {}).get(session_id, -1)
            except TypeError:  # tables not weakly referenceable: never batched
                return -1

    def _note_written(self, tables: HistoryTables, session_id: str, seq: int) -> None:
        with self._lock:
            try:
                written = self._written.setdefault(tables, {})
            except TypeError:
                return
            written[session_id] = seq
            if len(written) > _SESSIONS_NOTED:
                written.pop(next(iter(written)))

    # -- reading ------------------------------------------------------------------------

    def search(
        self,
        tables: HistoryTables,
        store: Store,
        store_key: object,
        sessions: Sequence[SessionStats],
        query: str,
        *,
        excluded: Collection[int],
        max_tokens: int,
        counter: TokenCounter,
        filters: RecallFilters | None,
    ) -> RecallResult | None:
        """What `sessions` (the asking one first) recall for `query`, from the store's
        tables; None when they are not one history (sessions of several owners)."""
        asker = sessions[0]
        held = [s for s in sessions if s.last_seq]
        owners = {owner_key(s.user_id, s.session_id) for s in held}
        if len(owners) > 1:
            return None
        owner = owners.pop() if owners else owner_key(asker.user_id, asker.session_id)
        indexed = tables.indexed(owner)
        behind = [s for s in held if plan_indexing(s, owner, indexed.sessions.get(s.session_id)) is not None]
        if behind:
            if remake_outdated(tables, indexed, behind):
                indexed = tables.indexed(owner)
            self._catch_up_many(tables, store, owner, behind, indexed)
            indexed = tables.indexed(owner)
        return _Search(self, tables, store_key, indexed, held, asker, query, self.config).run(
            excluded, max_tokens, counter, filters
        )

    # -- rendered lines -----------------------------------------------------------------

    def line(self, key: tuple[object, ...]) -> CachedLine | None:
        with self._lock:
            found = self._lines.get(key)
            if found is not None:
                self._lines.move_to_end(key)
            return found

    def keep_line(self, key: tuple[object, ...], line: CachedLine) -> None:
        with self._lock:
            self._lines[key] = line
            self._lines.move_to_end(key)
            while len(self._lines) > _LINES_KEPT:
                self._lines.popitem(last=False)


class _Search:
    """One search of a kept history (see `KeptHistories.search`)."""

    def __init__(
        self,
        kept: KeptHistories,
        tables: HistoryTables,
        store_key: object,
        indexed: IndexedHistory,
        held: Sequence[SessionStats],
        asker: SessionStats,
        query: str,
        config: RecallConfig,
    ) -> None:
        self.kept = kept
        self.tables = tables
        self.store_key = store_key
        self.number = indexed.number
        self.query = query
        self.config = config
        self.asker = asker.session_id
        self.slots: dict[str, int] = {}
        self.cursors: dict[int, IndexCursor] = {}
        self.session_of: dict[int, str] = {}
        self.order: list[int] = []  # the slots, in the order the sessions were given
        for stats in held:
            row = indexed.sessions.get(stats.session_id)
            if row is None or not row.cursor:
                continue
            try:
                cursor = read_cursor(row.cursor)
            except ValueError:
                continue  # indexed afresh by the next catch-up; left out of this search
            self.slots[stats.session_id] = row.slot
            self.order.append(row.slot)
            self.cursors[row.slot] = cursor
            self.session_of[row.slot] = stats.session_id
        # Every slot of the history searched: no posting of another session to leave out.
        self.every_slot = {row.slot for row in indexed.sessions.values()} <= self.cursors.keys()
        # What the history's rows are now: any batch written, reset or dropped changes it.
        self.history = (store_key, self.number, indexed.fingerprint)
        # What the logs searched are now: any append, status change, edit, deletion or
        # log started again changes it (None: a store that reports no activity time).
        # Kept as they are, not digested: hashing these tuples costs a few microseconds,
        # a digest of their text forty.
        self.logs: tuple[object, ...] | None = (
            (
                *self.history,
                tuple((s.session_id, s.generation, s.last_seq, s.message_count, s.updated_at) for s in held),
            )
            if all(s.updated_at is not None for s in held)
            else None
        )

    def run(
        self,
        excluded: Collection[int],
        max_tokens: int,
        counter: TokenCounter,
        filters: RecallFilters | None,
    ) -> RecallResult:
        config = self.config
        terms = query_terms(self.query)
        postings = (
            self._postings(list(dict.fromkeys(terms))) if self.number is not None and self.cursors else {}
        )
        collections = {
            kind: self._collection(kind, postings.get(kind, {}), terms)
            for kind in (PASSAGE_KIND, EXCHANGE_KIND)
        }
        by_message, by_exchange = config.granularity != "exchange", config.granularity != "message"
        ordered_terms = list(set(terms))
        passages = _by_message_keys(
            bm25(ordered_terms, postings.get(PASSAGE_KIND, {}), collections[PASSAGE_KIND])
            if by_message and collections[PASSAGE_KIND].documents
            else no_scores()
        )
        messages, parts = best_of_each_message(passages, None)
        covered = best_message_scores(
            _by_message_keys(coverage(terms, postings.get(PASSAGE_KIND, {}), collections[PASSAGE_KIND]))
        )
        exchanges = (
            bm25(ordered_terms, postings.get(EXCHANGE_KIND, {}), collections[EXCHANGE_KIND])
            if by_exchange and collections[EXCHANGE_KIND].documents
            else no_scores()
        )
        pool = self._pool(
            messages.top(config.candidates), exchanges.top(config.candidates), excluded, filters
        )
        evidence, shown = self._evidence(pool, messages, exchanges, covered, parts, counter)
        speakers = {name.lower() for cursor in self.cursors.values() for name in cursor.names}
        return conclude(
            evidence,
            shown,
            self.query,
            speakers=speakers,
            collection=collections[PASSAGE_KIND],
            problem=None,
            max_tokens=max_tokens,
            counter=counter,
            config=config,
        )

    # -- the keyword scores ---------------------------------------------------------------

    def _postings(self, terms: Sequence[str]) -> dict[int, dict[str, TermPostings]]:
        """The postings of `terms` in the sessions searched, by kind and term (those read
        from the store kept for the next searches of the same rows)."""
        assert self.number is not None
        if not terms:
            return {}
        known = self.kept.postings.get(self.history, terms)
        missing = [term for term in terms if term not in known]
        if missing:
            read: dict[str, dict[int, TermPostings]] = {term: {} for term in missing}
            for (kind, term), (keys, counts, lengths) in _columns(self.tables.postings(self.number, missing)):
                read.setdefault(term, {})[kind] = TermPostings(
                    keys.astype(np.int64), counts.astype(np.float64), lengths.astype(np.float64)
                )
            self.kept.postings.put(self.history, read)
            known.update(read)
        wanted = np.array(sorted(self.cursors), dtype=np.int64)
        out: dict[int, dict[str, TermPostings]] = {}
        for term, by_kind in known.items():
            for kind, found in by_kind.items():
                if not self.every_slot:
                    found = found.only(np.isin(found.ids >> KEY_SHIFT, wanted))
                if len(found.ids):
                    out.setdefault(kind, {})[term] = found
        return out

    def _collection(
        self, kind: int, postings: Mapping[str, TermPostings], terms: Sequence[str]
    ) -> CollectionStats:
        cursors = self.cursors.values()
        if kind == PASSAGE_KIND:
            documents = sum(c.message_docs for c in cursors)
            length = sum(c.message_terms for c in cursors)
        else:
            documents = sum(c.exchange_docs for c in cursors)
            length = sum(c.exchange_terms for c in cursors)
        return CollectionStats(
            documents,
            length,
            {term: len(postings[term].ids) if term in postings else 0 for term in set(terms)},
        )

    # -- the candidates -------------------------------------------------------------------

    def _pool(
        self,
        messages: np.ndarray,
        exchanges: np.ndarray,
        excluded: Collection[int],
        filters: RecallFilters | None,
    ) -> dict[int, tuple[Any, ...]]:
        """The unit rows of the candidates (the best messages, every message of the best
        exchanges) that may be recalled, by key."""
        if self.number is None or not (len(messages) or len(exchanges)):
            return {}
        rows = self.kept.rows.units(
            self.tables, self.history, self.number, messages.tolist(), exchanges.tolist()
        )
        asker_slot = self.slots.get(self.asker)
        pool: dict[int, tuple[Any, ...]] = {}
        for row in rows:
            key = int(row[0])
            slot, seq = key >> KEY_SHIFT, key & _LOCAL_MASK
            if not row[7] or slot not in self.cursors:
                continue  # small talk, or a session not searched
            if slot == asker_slot and seq in excluded:
                continue  # in the recent window
            pool[key] = row
        if filters is not None and pool:
            found = self.tables.messages(self.number, sorted(pool))
            pool = {key: row for key, row in pool.items() if key in found and filters.accepts(found[key])}
        return pool

    def _evidence(
        self,
        pool: Mapping[int, tuple[Any, ...]],
        messages: LexicalScores,
        exchanges: LexicalScores,
        covered: LexicalScores,
        parts: Mapping[int, int],
        counter: TokenCounter,
    ) -> tuple[Evidence, Shown]:
        # In the order the sessions were given (the asker first), then the log's: of equal
        # scores, ranking keeps the first, as it does over mirrors.
        rank_of = {slot: at for at, slot in enumerate(self.order)}
        keys = np.fromiter(pool, dtype=np.int64, count=len(pool))
        held, slot_at = np.unique(keys >> KEY_SHIFT, return_inverse=True)  # the slots, each key's
        held_slots = held.tolist()
        order = np.lexsort(
            (keys, np.array([rank_of.get(slot, 0) for slot in held_slots], dtype=np.int64)[slot_at])
        )
        keys, slot_at = keys[order], slot_at[order]
        stable_keys = keys.tolist()
        rows = [pool[key] for key in stable_keys]
        slots = keys >> KEY_SHIFT
        # Groups order the section: other sessions by their first message, the asker last.
        asker_slot = self.slots.get(self.asker, -1)
        present = [slot for slot in held_slots if slot != asker_slot]
        present.sort(key=lambda slot: (self.cursors[slot].first_ts or 0.0, self.session_of[slot]))
        group_of = {slot: group for group, slot in enumerate(present)}
        asker_group = len(present)
        if self.asker in self.slots:
            group_of[self.slots[self.asker]] = asker_group
        groups = np.array([group_of[slot] for slot in held_slots], dtype=np.int64)[slot_at]
        shown_keys = (groups << GROUP_SHIFT) | (keys & _LOCAL_MASK)
        shown_seqs = shown_keys.tolist()
        stable_of = dict(zip(shown_seqs, stable_keys, strict=True))
        # The rows' columns (`HistoryTables.units`), each read into an array at once.
        _, stamps, episode, exchange, position, from_user, said_by, _, long, *_ = (
            zip(*rows, strict=True) if rows else [()] * len(UNIT_COLUMNS)
        )
        timestamps = np.array(stamps, dtype=np.float64)
        exchange_keys = (slots << KEY_SHIFT) | np.array(exchange, dtype=np.int64)
        speakers = {name.lower(): name for cursor in self.cursors.values() for name in cursor.names}
        named = named_speakers(speakers, self.query) if rows and speakers else set()
        newest = max((c.newest_ts for c in self.cursors.values()), default=0.0)
        best_message = messages.best() or 1.0
        best_exchange = exchanges.best() or 1.0
        evidence = Evidence(
            seqs=shown_seqs,
            dense_message=None,
            dense_exchange=None,
            lexical_message=(messages.lookup(keys) / best_message).astype(np.float32),
            lexical_exchange=(exchanges.lookup(exchange_keys) / best_exchange).astype(np.float32),
            said_by_named=(
                np.array([name in named for name in said_by], dtype=bool)
                if named
                else np.zeros(len(rows), dtype=bool)
            ),
            ages=newest - timestamps,
            episodes=(slots << KEY_SHIFT) | np.array(episode, dtype=np.int64),
            vectors={},
            positions=(slots << KEY_SHIFT) | np.array(position, dtype=np.int64),
            coverage=covered.lookup(keys).astype(np.float32),  # none covered: all zero, not unknown
            from_user=np.array(from_user, dtype=bool),
            typical=None,
            parts={
                shown: parts[stable]
                for (shown, stable), excerpted in zip(stable_of.items(), long, strict=True)
                if excerpted and stable in parts
            },
        )
        if self.config.granularity == "exchange":
            members: dict[int, list[int]] = {}
            for shown, head in zip(shown_seqs, exchange, strict=True):
                members.setdefault(shown - (shown & _LOCAL_MASK) + int(head), []).append(shown)
            item_seqs: Mapping[int, Sequence[int]] = {
                shown: members[shown - (shown & _LOCAL_MASK) + int(head)]
                for shown, head in zip(shown_seqs, exchange, strict=True)
            }
        else:
            item_seqs = {shown: [shown] for shown in shown_seqs}
        fetched = Fetched(self.tables, self.number, stable_of, self.kept.rows, self.logs)
        sessions = {group: self.session_of[slot] for slot, group in group_of.items()}
        sessions.setdefault(asker_group, self.asker)
        shown_data = Shown(
            messages=fetched,
            item_seqs=item_seqs,
            lines=Lines(fetched),
            excerpts=Excerpts(fetched, evidence.parts),
            line_cache=KeptLines(self.kept, (self.store_key, self.number), stable_of),
            sessions=sessions,
            prefetch=fetched.prefetch,
        )
        return evidence, shown_data


def _by_message_keys(scores: LexicalScores) -> LexicalScores:
    """Passage scores keyed ``slot << 40 | seq << 8 | part`` re-keyed so that a shift by
    `PART_BITS` gives the message's key, ``slot << 40 | seq``."""
    if not len(scores):
        return scores
    ids = ((scores.ids >> KEY_SHIFT) << (KEY_SHIFT + PART_BITS)) | (scores.ids & _LOCAL_MASK)
    return LexicalScores(ids, scores.scores)


def _columns(found: Sequence[tuple[Any, ...]]) -> Iterable[tuple[tuple[int, str], tuple[np.ndarray, ...]]]:
    """The arrays of each (kind, term) of `HistoryTables.postings`' answer."""
    if isinstance(found, PostingColumns):
        return found.columns.items()
    grouped: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
    for kind, term, key, count, length in found:
        grouped.setdefault((int(kind), str(term)), []).append((key, count, length))
    arrays = {key: np.array(entries, dtype=np.int64) for key, entries in grouped.items()}
    return ((key, (array[:, 0], array[:, 1], array[:, 2])) for key, array in arrays.items())

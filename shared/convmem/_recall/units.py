"""Recall's mirror of one session's log: its units, lexical indexes and embedding queue.

A *unit* is what gets a vector: a message (its id is its seq), or an exchange,
a user message with what follows it (its id packs its first seq and its
length, so an exchange that grows gets a new id: HNSW cannot overwrite a
vector in place). `SessionMirror` folds log messages in (`ingest`), catches
up with a log another writer appended to (`read_newer`), mirrors a whole log
read afresh (`adopt_log`, e.g. after its generation changed), and keeps the
queue of units still to embed (`embed_queued`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import numpy as np

from .._errors import ConfigError
from .._models import Message, Role
from .._salience import says_nothing
from .._stores.base import SessionStats, Store
from .columns import (
    LogColumns,
    exchange_unit_id,
    is_exchange_unit,
)
from .config import RecallConfig, indexed_text
from .history_index import SlotView
from .index_rows import joined_terms
from .language import is_cjk_text
from .lexical import (
    BM25TextIndex,
    CollectionStats,
    JointLexicalIndex,
    LexicalIndex,
    LexicalScores,
    joint_kinds,
    no_scores,
)
from .passages import best_of_each_message, passage_id, passage_spans
from .render import CachedLine, LineKey
from .terms import tokenize
from .vector_index import VectorIndex

__all__ = ["UNKNOWN", "SessionMirror"]

logger = logging.getLogger("convmem")

# Indexes that hold exactly this mirror's documents, passages of long messages apart.
_OWN_INDEXES = (BM25TextIndex, SlotView)


def _own(index: LexicalIndex) -> BM25TextIndex | SlotView | None:
    """`index` when it is one of recall's own (that takes known terms), else None."""
    return cast("BM25TextIndex | SlotView", index) if type(index) in _OWN_INDEXES else None


# A long run of messages without a question must not become one giant unit.
_MAX_EXCHANGE_MESSAGES = 16


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


# The generation of a mirror that has not read its log's stats yet (fed by add() alone).
UNKNOWN = _Unknown()


def _continuing(appended: Sequence[Message], after: int, through: int) -> list[Message] | None:
    """The messages of `appended` past seq `after`, when they are the log's every message
    from there through seq `through` (read in the same generation); None otherwise."""
    newer = [message for message in appended if (message.seq or 0) > after]
    if not newer or newer[-1].seq != through:
        return None
    if any(message.seq != after + i + 1 for i, message in enumerate(newer)):
        return None
    return newer


class SessionMirror:
    """Everything recall knows about one session. Guarded by `lock`.

    With ``embeds=False`` (recall without an embedder) no unit is queued for
    embedding: the mirror keeps its lexical indexes only. `new_lexical_index`
    makes the two lexical indexes (messages, exchanges); `lexical`, when given,
    is that pair already made (e.g. the views of a user's `HistoryIndex`).
    """

    def __init__(
        self,
        session_id: str,
        *,
        embeds: bool = True,
        new_lexical_index: Callable[[], LexicalIndex] = BM25TextIndex,
        lexical: tuple[LexicalIndex, LexicalIndex] | None = None,
    ) -> None:
        self.session_id = session_id
        self.key: tuple[int | None, str] = (None, session_id)  # (store key, session id) in its Recall
        # The generation of the log this mirrors (see `Store.stats`): when the store reports
        # another one, the log was forgotten, edited or replaced and the mirror is rebuilt.
        self.generation: str | _Unknown | None = UNKNOWN
        self.embeds = embeds
        self.lock = threading.RLock()
        # Held through a whole read of the log (generation, log, adopt, follow): two threads
        # reading it at once could otherwise adopt an older log after a newer one, and an
        # index kept per generation would store vectors of the older text under the newer.
        self.read_lock = threading.Lock()
        self.index: VectorIndex | None = None
        self.messages: dict[int, Message] = {}
        self.order: list[int] = []
        self.position: dict[int, int] = {}
        self.lines: dict[int, str] = {}
        self.episode_of: dict[int, int] = {}
        self.episode_count = 0
        self.last_timestamp: float | None = None
        self.newest_timestamp = 0.0
        self.last_seq = 0
        self.exchange_of: dict[int, int] = {}
        self.exchanges: dict[int, list[int]] = {}
        self.open_exchange: int | None = None
        self.exchange_units: dict[int, int] = {}  # first seq -> unit id wanted now
        if lexical is None:
            lexical = (new_lexical_index(), new_lexical_index())
        self.lexical_messages, self.lexical_exchanges = lexical
        self._joint = joint_kinds(lexical)
        self.pending: dict[int, str] = {}  # unit id -> text still to embed
        self.inflight: set[int] = set()
        self.speakers: dict[str, str] = {}  # lowercased name -> name
        self.small_talk: set[int] = set()  # seqs that say nothing ("thanks", "ok", "😊"): never recalled
        # Long messages (seq -> passage spans over the stripped text): searched and shown by passage.
        self.passages: dict[int, list[tuple[int, int]]] = {}
        # The terms of the lines of the exchanges an ingest is indexing (then of the open
        # exchange only): an exchange's terms are its lines', each line tokenized once.
        self.line_terms: dict[int, list[str]] = {}
        # Sum and count of the message vectors per language (CJK or not), or None until asked.
        self._dense_sums: dict[bool, tuple[np.ndarray, int]] | None = None
        self.columns = LogColumns()  # what ranking reads of each message, in log order
        self.needs_full_read = True
        # Whose history the lexical indexes are part of (see `Recall._attach`), and the
        # owner the store last reported for the session (None: no user).
        self.history_owner: tuple[str, str] | None = None
        self.user_id: str | None = None
        self.unsaved = 0
        self.forgotten = False
        # Each message as recall renders it: line, date line, tokens (see `render`).
        self.line_cache: dict[LineKey, CachedLine] = {}

    @staticmethod
    def counts(state: SessionMirror | None) -> dict[str, Any]:
        """What `state` holds now (see `Recall.stats`); zeros for no mirror."""
        if state is None:
            return {"messages": 0, "vectors": 0, "pending": 0, "kind": None, "bytes_per_vector": None}
        with state.lock:
            index = state.index
            return {
                "messages": len(state.order),
                "vectors": len(index) if index is not None else 0,
                "pending": len(state.pending),
                "kind": index.kind if index is not None else None,
                "bytes_per_vector": index.bytes_per_vector() if index is not None else None,
            }

    def reset_log_view(self) -> None:
        self.messages.clear()
        self.order.clear()
        self.position.clear()
        self.lines.clear()
        self.episode_of.clear()
        self.episode_count = 0
        self.last_timestamp = None
        self.newest_timestamp = 0.0
        self.last_seq = 0
        self.exchange_of.clear()
        self.exchanges.clear()
        self.open_exchange = None
        self.exchange_units.clear()
        self.lexical_messages.clear()
        self.lexical_exchanges.clear()
        self.pending.clear()
        self.speakers.clear()
        self.small_talk.clear()
        self.passages.clear()
        self.line_terms.clear()
        self._dense_sums = None
        self.columns.clear()
        self.line_cache.clear()

    def wanted_units(self) -> dict[int, str]:
        """Unit id -> text for every unit the log calls for now."""
        units: dict[int, str] = {}
        for seq in self.order:
            if seq in self.lines and seq not in self.small_talk:
                units[seq] = self.lines[seq]
        for first_seq, unit_id in self.exchange_units.items():
            units[unit_id] = self.exchange_text(first_seq)
        return units

    def exchange_text(self, first_seq: int) -> str:
        return "\n".join(self.lines[s] for s in self.exchanges[first_seq])

    # -- writing: folding log messages in -----------------------------------------------

    def ingest(self, messages: Sequence[Message], config: RecallConfig) -> list[int]:
        """Fold new log messages into the lexical view and queue their units (lock held).

        Returns the ids of units the new messages superseded (an exchange that grew):
        `drop_units` removes them from the index.
        """
        removed: list[int] = []
        grown: dict[int, None] = {}  # first seqs of the exchanges the messages joined, in order
        try:
            self._ingest(messages, config, grown)
        finally:
            # An exchange is indexed once per batch, with all the messages it gained: a log
            # read whole does not index each exchange again for every message that joins it.
            for first in grown:
                self._index_exchange(first, config, removed)
            # Only the open exchange may gain messages in a later ingest.
            members = self.exchanges.get(self.open_exchange, ()) if self.open_exchange is not None else ()
            self.line_terms = {seq: self.line_terms[seq] for seq in members if seq in self.line_terms}
        return removed

    def _ingest(self, messages: Sequence[Message], config: RecallConfig, grown: dict[int, None]) -> None:
        for message in messages:
            seq = message.seq
            if seq is None:
                raise ConfigError(
                    "Recall.add needs stored messages (seq set); append them to the store first"
                )
            if seq <= self.last_seq:
                continue
            if self.last_seq and seq > self.last_seq + 1:
                self.needs_full_read = True  # messages we never saw: the next search reads them from the log
            self.last_seq = seq
            text = indexed_text(message, config)
            if text is None:
                continue
            grown[self._add_message(message, seq, text, config)] = None

    def drop_units(self, removed: Sequence[int]) -> None:
        if any(not is_exchange_unit(unit) for unit in removed):
            self._dense_sums = None
        if removed and self.index is not None:
            self.index.remove(removed)
            self.unsaved += len(removed)

    def _add_message(self, message: Message, seq: int, text: str, config: RecallConfig) -> int:
        """Mirror one message; returns the first seq of the exchange it joined."""
        if (
            self.last_timestamp is None
            or message.timestamp - self.last_timestamp > config.episode_gap_seconds
        ):
            self.episode_count += 1
            self.open_exchange = None
        self.last_timestamp = message.timestamp
        self.newest_timestamp = max(self.newest_timestamp, message.timestamp)
        # A speaker's name helps both retrievers ("What did Caroline say..."); a bare
        # role label is in every unit and would only add noise.
        if message.name:
            self.speakers[message.name.lower()] = message.name
            line = f"{message.name}: {text}"
        else:
            line = text
        self.messages[seq] = message
        self.position[seq] = len(self.order)
        self.order.append(seq)
        self.lines[seq] = line
        self.episode_of[seq] = self.episode_count
        small_talk = says_nothing(text)
        spans = passage_spans(text)
        if len(spans) > 1:
            self.passages[seq] = spans
        if small_talk:
            # Kept for its exchange's text, never a candidate of its own.
            self.small_talk.add(seq)
        else:
            terms = self._index_message(self.lexical_messages, seq)
            if terms is not None:
                self.line_terms[seq] = terms
            if config.granularity != "exchange" and self.embeds:
                self.pending[seq] = line[: config.max_unit_chars]
        # Exchanges: a user message opens one; what follows joins it, up to a cap.
        if (
            message.role is Role.USER
            or self.open_exchange is None
            or len(self.exchanges[self.open_exchange]) >= _MAX_EXCHANGE_MESSAGES
        ):
            self.open_exchange = seq
            self.exchanges[seq] = [seq]
        else:
            self.exchanges[self.open_exchange].append(seq)
        first = self.open_exchange
        self.exchange_of[seq] = first
        self.columns.append(
            seq, message.timestamp, self.episode_count, first, self.position[first], not small_talk
        )
        return first

    @property
    def passage_docs(self) -> bool:
        """Whether the messages' lexical index holds passages (``seq << 8 | part``), not
        whole messages: recall's own index in this process does; an index a store keeps,
        or one given by the caller, holds whole messages under their seqs."""
        return _own(self.lexical_messages) is not None

    def _index_message(self, index: LexicalIndex, seq: int) -> list[str] | None:
        """Give `index` the message at `seq`: its passages, or its line whole. Returns the
        terms of its line when they were found on the way (recall's own indexes)."""
        line = self.lines[seq]
        spans = self.passages.get(seq)
        own = _own(index)
        if own is None:
            index.add(seq, line)
            return None
        if spans is None:
            terms = tokenize(line)
            own.add_terms(passage_id(seq, 0), terms)
            return terms
        name = self.messages[seq].name
        text = self.messages[seq].text.strip()
        prefix = f"{name}: " if name else ""
        parts = [tokenize(prefix + text[start:end]) for start, end in spans]
        for part, terms in enumerate(parts):
            own.add_terms(passage_id(seq, part), terms)
        return joined_terms(prefix, text, spans, parts)

    def _exchange_terms(self, first: int) -> list[str]:
        """``tokenize(self.exchange_text(first))``, from the terms of its lines."""
        terms: list[str] = []
        for seq in self.exchanges[first]:
            line = self.line_terms.get(seq)
            if line is None:
                line = self.line_terms[seq] = tokenize(self.lines[seq])
            terms.extend(line)
        return terms

    def _index_exchange(self, first: int, config: RecallConfig, removed: list[int]) -> None:
        """Index the exchange opening at `first` as it stands, and queue its unit."""
        members = self.exchanges[first]
        own = _own(self.lexical_exchanges)
        if own is not None:
            own.add_terms(first, self._exchange_terms(first))
        else:
            self.lexical_exchanges.add(first, self.exchange_text(first))
        if config.granularity == "message" or not self.embeds:
            return
        old_unit = self.exchange_units.get(first)
        # A lone message's exchange is the message itself: with "both" it needs no
        # vector of its own; with "exchange" it does.
        if len(members) == 1 and config.granularity == "both":
            return
        new_unit = exchange_unit_id(first, len(members))
        if old_unit is not None and old_unit != new_unit:
            self.pending.pop(old_unit, None)
            removed.append(old_unit)
        self.exchange_units[first] = new_unit
        self.pending[new_unit] = self.exchange_text(first)[: config.max_unit_chars]

    # -- catching up with the log ---------------------------------------------------------

    def read_newer(
        self,
        store: Store,
        config: RecallConfig,
        known_stats: SessionStats | None = None,
        appended: Sequence[Message] = (),
    ) -> None:
        """Read messages another writer appended since we last looked (lexical at once).

        `known_stats` are the session's stats read just before (one query for all of
        a user's sessions); they are read here when not given or already outrun.
        `appended` are messages this process stored (as the store returned them): when
        they are all the log gained, they are folded in as they are, not read back."""
        with self.lock:
            # Before the stats: an add() running meanwhile may take last_seq past what they say.
            known = self.last_seq
        try:
            if known_stats is not None and known_stats.last_seq >= known:
                stats = known_stats
            else:
                stats = store.stats(self.session_id)
        except Exception as exc:  # a store hiccup must not fail the build
            logger.warning("recall could not read stats of session %r: %s", self.session_id, exc)
            return
        self.user_id = stats.user_id
        if stats.generation != self.generation:
            with self.lock:
                self.needs_full_read = True  # another log than the one mirrored: read it afresh
        elif stats.last_seq > known:
            with self.lock:
                after = self.last_seq
            newer = _continuing(appended, after, stats.last_seq)
            if newer is None:
                newer = store.messages(self.session_id, after_seq=after)
            with self.lock:
                self.drop_units(self.ingest(newer, config))
        elif stats.last_seq < known:
            with self.lock:
                self.needs_full_read = True  # the log shrank: it was cleared or replaced

    def adopt_log(
        self,
        log: Sequence[Message],
        generation: str | None,
        config: RecallConfig,
        *,
        trust_index: bool = True,
    ) -> None:
        """Mirror `log`, read after its `generation` was (lock taken here).

        Reading the generation first means a log changed in between is labelled with
        the older generation, so the next check reads it again; never the reverse.
        Within one generation a vector is kept when the log still calls for its unit.
        Across generations (a message deleted or replaced, the log forgotten and
        started again) only vectors whose unit text is unchanged are kept: a vector
        depends on nothing but its text, and nothing deleted keeps one. With
        ``trust_index=False`` (vectors loaded while the log was edited) none is kept.
        """
        with self.lock:
            same_log = generation == self.generation
            embedded_texts = self.wanted_units()
            self.reset_log_view()
            self.generation = generation
            self.ingest(log, config)  # what it supersedes is not wanted: dropped just below
            self.needs_full_read = False
            wanted = self.wanted_units()
            if self.index is not None:
                present = self.index.ids()
                keep = {
                    unit
                    for unit in present & wanted.keys()
                    if trust_index and (same_log or embedded_texts.get(unit) == wanted[unit])
                }
                extra = present - keep
                self._dense_sums = None
                if extra:
                    self.index.remove(extra)
                    self.unsaved += len(extra)
                for unit in keep:
                    self.pending.pop(unit, None)

    # -- the lexical indexes --------------------------------------------------------------

    def use_lexical(self, lexical: tuple[LexicalIndex, LexicalIndex], *, refill: bool = True) -> None:
        """Swap in other lexical indexes and give them every document (lock held); with
        ``refill=False`` the caller is about to read the whole log into them anyway."""
        self.lexical_messages, self.lexical_exchanges = lexical
        self._joint = joint_kinds(lexical)
        if refill:
            self._refill(self.lexical_messages, self.lexical_exchanges)

    @property
    def slot_views(self) -> tuple[SlotView, SlotView] | None:
        """The views of this session's slot in its user's `HistoryIndex`, when it has one."""
        messages, exchanges = self.lexical_messages, self.lexical_exchanges
        if isinstance(messages, SlotView) and isinstance(exchanges, SlotView):
            return messages, exchanges
        return None

    def _refill(self, *indexes: LexicalIndex) -> None:
        """Give `indexes` every document this mirror holds, from scratch (lock held)."""
        for index in indexes:
            index.clear()
            if index is self.lexical_messages:
                for seq in self.order:
                    if seq not in self.small_talk:
                        self._index_message(index, seq)
            else:
                for first in self.exchanges:
                    index.add(first, self.exchange_text(first))

    @property
    def knows_coverage(self) -> bool:
        """Whether `best_passages` can say what share of a query a message holds (`coverage`)."""
        return bool(self._joint["messages"])

    def lexical_collection(self, units: str, query: str) -> CollectionStats | None:
        """The statistics of this session's ``"messages"`` or ``"exchanges"`` index for
        `query`, to be added up with the user's other sessions' (None: the index cannot
        score as part of a larger collection). Lock held."""
        index = self.lexical_messages if units == "messages" else self.lexical_exchanges
        if not self._joint[units]:
            return None
        joint: JointLexicalIndex = index  # type: ignore[assignment]
        return joint.collection(query)

    def lexical_scores(
        self, units: str, query: str, collection: CollectionStats | None = None
    ) -> LexicalScores:
        """Lexical scores of this session's ``"messages"`` or ``"exchanges"`` (lock held),
        keyed by seq (a message) or first seq (an exchange); with `collection`, on the
        scale of that collection (see `lexical_collection`). A long message scores as its
        best passage (`best_passages` says which).

        Only documents this mirror holds are returned, whatever the index holds.
        """
        return self.best_passages(units, query, collection)[0]

    def best_passages(
        self, units: str, query: str, collection: CollectionStats | None = None, *, coverage: bool = False
    ) -> tuple[LexicalScores, dict[int, int]]:
        """`lexical_scores`, and for each long message that matched, the passage that
        scored best (seq -> part). With `coverage`, the scores are the share of the query's
        information each document holds (`BM25Index.coverage`), where the index can say."""
        index = self.lexical_messages if units == "messages" else self.lexical_exchanges
        joint = self._joint[units]
        if coverage and not joint:
            return no_scores(), {}
        found = self._ask(index, query, collection if joint else None, coverage)
        scores = LexicalScores.of(found)
        parts: dict[int, int] = {}
        if units == "messages" and self.passage_docs:
            scores, parts = best_of_each_message(scores, self.passages)
        if _own(index) is not None:  # holds exactly this mirror's documents
            return scores, parts
        if units == "messages":
            return scores.only(lambda seq: seq in self.lines and seq not in self.small_talk), parts
        return scores.only(self.exchanges.__contains__), parts

    @staticmethod
    def _ask(
        index: LexicalIndex, query: str, collection: CollectionStats | None, coverage: bool
    ) -> Mapping[int, float]:
        # Called with a collection, or for coverage, only for an index `joint_kinds` found joint.
        joint: JointLexicalIndex = index  # type: ignore[assignment]
        if coverage:
            return joint.coverage(query, collection)
        if collection is not None:
            return joint.scores(query, collection)
        return index.scores(query)

    # -- the typical vector ---------------------------------------------------------------

    def dense_sums(self) -> dict[bool, tuple[np.ndarray, int]]:
        """The sum and count of this session's message vectors, per language (True: mostly
        CJK text), for `gate.DenseProfile` (lock held). Read from the index once, then kept
        up to date as vectors are added."""
        if self._dense_sums is None:
            self._dense_sums = {}
            if self.index is not None and len(self.index):
                held = self.index.vectors(seq for seq in self.order if seq in self.lines)
                if held:
                    self._add_to_sums(list(held), np.stack(list(held.values())))
        return self._dense_sums

    def count_vectors(self, units: Sequence[int], vectors: np.ndarray) -> None:
        """Keep the typical vector up to date with vectors just added (lock held)."""
        if self._dense_sums is not None:
            self._add_to_sums(units, vectors)

    def _add_to_sums(self, units: Sequence[int], vectors: np.ndarray) -> None:
        sums = self._dense_sums
        assert sums is not None
        for unit, vector in zip(units, vectors, strict=True):
            if is_exchange_unit(unit) or unit not in self.lines:
                continue
            cjk = is_cjk_text(self.lines[unit])
            total, count = sums.get(cjk, (np.zeros(vector.shape[-1], dtype=np.float64), 0))
            sums[cjk] = (total + vector, count + 1)

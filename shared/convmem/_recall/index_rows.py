"""What recall indexes of a session's log, as rows a store can keep: `derive`.

Recall's rules turn each message into a *unit row* (its place among the
session's indexed messages, its episode and exchange, its speaker, whether it
is small talk) and keyword documents (the passages of the message; the
exchange it joins). `derive` applies them to the messages after an
`IndexCursor` (where the session's indexing stands) and returns an
`IndexBatch`: what a store writes in one transaction to keep recall's index of
a user's history (`HistoryTables`), so that a new process searches that index
instead of reading the user's logs. The rules are those of the in-process
mirror (`units.SessionMirror`), and a test holds the two to the same rows.

Keys (64-bit integers): a session's rows live in a *slot* of its owner's
history, given by the store; a message's key is ``slot << KEY_SHIFT | seq``,
a passage document's ``slot << KEY_SHIFT | seq << PART_BITS | part`` and an
exchange document's ``slot << KEY_SHIFT | first seq``. The batch carries the
ids within the session; the store adds the slot. Messages at seqs from
``2**32`` on are not indexed by words.

Nothing here imports numpy: stores use it to write.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from .._models import Message, Role
from .._salience import says_nothing
from .config import RecallConfig, indexed_text
from .passages import PART_BITS, passage_spans
from .terms import TOKENIZER_VERSION, tokenize

__all__ = [
    "EXCHANGE_KIND",
    "KEY_SHIFT",
    "MAX_INDEXED_SEQ",
    "PASSAGE_KIND",
    "UNIT_COLUMNS",
    "HistoryTables",
    "IndexBatch",
    "IndexCursor",
    "IndexGap",
    "IndexedHistory",
    "IndexedSession",
    "PostingColumns",
    "ResetsSessions",
    "UnitRow",
    "WritesBatches",
    "default_rules",
    "derive",
    "first_number_of_a_remade_history_table",
    "joined_terms",
    "owner_key",
]

KEY_SHIFT = 40
MAX_INDEXED_SEQ = (1 << 32) - 1
PASSAGE_KIND = 0
EXCHANGE_KIND = 1
# A long run of messages without a question must not become one giant unit (as `units`).
MAX_EXCHANGE_MESSAGES = 16


def owner_key(user_id: str | None, session_id: str) -> str:
    """The history a session's rows belong to: its user's, or its own without a user."""
    return f"user:{user_id}" if user_id is not None else f"session:{session_id}"


@functools.cache
def _defaults() -> RecallConfig:
    return RecallConfig()


def default_rules(config: RecallConfig) -> bool:
    """Whether `config` indexes a log as the rows a store keeps were derived (the roles
    and the episode gap are part of the rows; a config that changes them gets a mirror)."""
    # Asked on every append: the defaults are built (and checked) once.
    defaults = _defaults()
    return (
        config.indexed_roles == defaults.indexed_roles
        and config.episode_gap_seconds == defaults.episode_gap_seconds
    )


class IndexGap(Exception):
    """The messages handed to `derive` do not continue the cursor: read the log afresh."""


@dataclasses.dataclass
class IndexCursor:
    """Where the indexing of one session's log stands, stored beside its rows."""

    seq: int = 0
    """The log is indexed through this seq."""
    places: int = 0
    """Messages indexed so far (the next one's place)."""
    episodes: int = 0
    last_ts: float | None = None
    first_ts: float | None = None
    newest_ts: float = 0.0
    exchange: int | None = None
    """The first seq of the exchange still open (a new message may join it)."""
    exchange_size: int = 0
    exchange_length: int = 0
    """Terms of the open exchange's document."""
    message_docs: int = 0
    message_terms: int = 0
    exchange_docs: int = 0
    exchange_terms: int = 0
    names: list[str] = dataclasses.field(default_factory=list)
    """The named speakers of the session (`Message.name`)."""
    tokenizer: int = TOKENIZER_VERSION
    """The `TOKENIZER_VERSION` the rows were made with (1 in a cursor that does not say)."""

    def to_json(self) -> str:
        """The cursor as the store keeps it (read back by `from_json`)."""
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> IndexCursor:
        """Raises `ValueError` for a cursor this version cannot read (then the session is
        indexed again from its log)."""
        try:
            data = json.loads(text)
            cursor = cls(**{"tokenizer": 1, **data})
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"unreadable index cursor: {exc}") from exc
        ints = (
            cursor.seq,
            cursor.places,
            cursor.episodes,
            cursor.message_docs,
            cursor.exchange_docs,
            cursor.tokenizer,
        )
        if not all(isinstance(v, int) and v >= 0 for v in ints) or not isinstance(cursor.names, list):
            raise ValueError(f"inconsistent index cursor: {text[:120]!r}")
        return cursor


@dataclasses.dataclass(frozen=True)
class UnitRow:
    """What ranking reads of one indexed message."""

    seq: int
    timestamp: float
    episode: int
    exchange: int
    """The first seq of its exchange."""
    place: int
    from_user: bool
    name: str | None
    candidate: bool
    """Recallable on its own (not small talk)."""
    long: bool
    """Searched and shown by passages."""
    last: int
    """At an exchange's first message: its last member's seq (else the message's own seq)."""


@dataclasses.dataclass
class IndexBatch:
    """What to write for one session in one transaction (ids within the session).

    ``reset``: the session's rows are replaced (indexed afresh from its whole log,
    in a new slot); otherwise the rows continue the cursor the batch was derived from.
    """

    session_id: str
    generation: str | None
    reset: bool
    cursor: IndexCursor
    units: list[UnitRow] = dataclasses.field(default_factory=list)
    passages: list[tuple[int, dict[str, int], int]] = dataclasses.field(default_factory=list)
    """(seq << PART_BITS | part, term counts, length) of new passage documents."""
    exchanges: list[tuple[int, dict[str, int], int, bool]] = dataclasses.field(default_factory=list)
    """(first seq, term counts added, its length now, new) of exchanges that gained messages."""
    grown: dict[int, int] = dataclasses.field(default_factory=dict)
    """First seq -> last member seq of exchanges indexed before that gained messages."""

    @property
    def postings(self) -> int:
        """How many posting rows the batch writes (for a progress line or a log)."""
        return sum(len(c) for _, c, _ in self.passages) + sum(len(c) for _, c, _, _ in self.exchanges)


def derive(
    cursor: IndexCursor,
    messages: Iterable[Message],
    config: RecallConfig,
    *,
    session_id: str,
    generation: str | None,
    reset: bool,
) -> IndexBatch:
    """The rows of `messages` (stored, in seq order, continuing `cursor`), and the cursor after."""
    after = dataclasses.replace(cursor, names=list(cursor.names))
    batch = IndexBatch(session_id, generation, reset, after)
    names = set(after.names)
    grown: dict[int, tuple[Counter[str], bool]] = {}
    heads: dict[int, int] = {}  # first seq -> last member, of every exchange touched
    pending: list[tuple[Message, int, int, int, bool, bool]] = []
    for message in messages:
        seq = message.seq
        if seq is None or seq <= after.seq:
            continue
        # Only the first message must follow the cursor: holes further on are messages
        # deleted from the log that was read (a delete resets the rows before them).
        if after.seq == cursor.seq and cursor.seq and seq != cursor.seq + 1:
            raise IndexGap(f"session {session_id!r}: indexed through seq {after.seq}, next message {seq}")
        after.seq = seq
        text = indexed_text(message, config)
        if text is None:
            continue
        if after.last_ts is None or message.timestamp - after.last_ts > config.episode_gap_seconds:
            after.episodes += 1
            after.exchange = None
        after.last_ts = message.timestamp
        after.newest_ts = max(after.newest_ts, message.timestamp)
        if after.first_ts is None:
            after.first_ts = message.timestamp
        prefix = f"{message.name}: " if message.name else ""
        if message.name and message.name not in names:
            names.add(message.name)
            after.names.append(message.name)
        line = prefix + text
        place = after.places
        after.places += 1
        small_talk = says_nothing(text)
        spans = passage_spans(text)
        line_terms: list[str] | None = None
        if not small_talk and seq <= MAX_INDEXED_SEQ:
            if len(spans) == 1:
                line_terms = tokenize(line)
                parts = [line_terms]
            else:
                parts = [tokenize(prefix + text[start:end]) for start, end in spans]
                line_terms = joined_terms(prefix, text, spans, parts)
            for part, terms in enumerate(parts):
                batch.passages.append((seq << PART_BITS | part, dict(Counter(terms)), len(terms)))
                after.message_docs += 1
                after.message_terms += len(terms)
        if line_terms is None:
            line_terms = tokenize(line)
        if (
            message.role is Role.USER
            or after.exchange is None
            or after.exchange_size >= MAX_EXCHANGE_MESSAGES
        ):
            after.exchange, after.exchange_size, after.exchange_length = seq, 0, 0
            if seq <= MAX_INDEXED_SEQ:
                after.exchange_docs += 1
        first = after.exchange
        after.exchange_size += 1
        after.exchange_length += len(line_terms)
        heads[first] = seq
        if first <= MAX_INDEXED_SEQ:
            counts, new = grown.setdefault(first, (Counter(), first > cursor.seq))
            counts.update(line_terms)
            after.exchange_terms += len(line_terms)
        pending.append((message, place, after.episodes, first, small_talk, len(spans) > 1))
    for message, place, episode, first, small_talk, long in pending:
        seq = message.seq or 0
        batch.units.append(
            UnitRow(
                seq,
                message.timestamp,
                episode,
                first,
                place,
                message.role is Role.USER,
                message.name,
                not small_talk,
                long,
                heads.get(seq, seq),
            )
        )
    for first, (counts, new) in grown.items():
        # An exchange the cursor had open already held the terms of its earlier messages.
        before = cursor.exchange_length if not new and first == cursor.exchange else 0
        batch.exchanges.append((first, dict(counts), before + sum(counts.values()), new))
        if not new:
            batch.grown[first] = heads[first]
    return batch


def joined_terms(
    prefix: str, text: str, spans: Sequence[tuple[int, int]], parts: Sequence[list[str]]
) -> list[str] | None:
    """``tokenize(prefix + text)`` from `parts` (``tokenize(prefix + text[start:end])`` of
    each span), or None when the passages may not add up to it.

    They add up when whitespace meets every cut: no term runs across one, and lowercasing
    (whose only context rule, the final sigma, stops at whitespace) is the same either
    way. The prefix (a speaker's ``"name: "``) ends with a space too, so each part opens
    with its terms: they count once. A long message is tokenized once instead of twice.
    """
    if prefix and not prefix[-1].isspace():
        return None
    for _, end in spans[:-1]:
        if not (text[end - 1].isspace() or text[end].isspace()):
            return None
    head = len(tokenize(prefix)) if prefix else 0
    terms = list(parts[0])
    for part in parts[1:]:
        terms.extend(part[head:])
    return terms


class PostingColumns(Sequence[tuple[int, str, int, int, int]]):
    """Postings held as columns: for each ``(kind, term)``, its documents' keys (ascending),
    the term's counts in them and their lengths, as numpy integer arrays. A store that
    reads postings as arrays returns these from `HistoryTables.postings`, and recall
    scores them as they are; read as a sequence, they are the same rows as any store's."""

    def __init__(self, columns: Mapping[tuple[int, str], tuple[Any, Any, Any]]) -> None:
        self.columns = dict(columns)

    @functools.cached_property
    def _rows(self) -> list[tuple[int, str, int, int, int]]:
        return [
            (kind, term, key, count, length)
            for (kind, term), (keys, counts, lengths) in self.columns.items()
            for key, count, length in zip(keys.tolist(), counts.tolist(), lengths.tolist(), strict=True)
        ]

    def __len__(self) -> int:
        return sum(len(keys) for keys, _, _ in self.columns.values())

    def __getitem__(self, index: Any) -> Any:
        return self._rows[index]

    def __iter__(self) -> Iterator[tuple[int, str, int, int, int]]:
        return iter(self._rows)


@dataclasses.dataclass(frozen=True)
class IndexedSession:
    """A session's part of a history as the store keeps it."""

    session_id: str
    owner: str
    """The history it is in (see `owner_key`)."""
    slot: int
    generation: str | None
    cursor: str
    """`IndexCursor` JSON ("" after the store reset the session's rows: an edit of its log)."""


@dataclasses.dataclass(frozen=True)
class IndexedHistory:
    """A history's number in the store (None: nothing indexed yet) and its sessions."""

    number: int | None
    sessions: Mapping[str, IndexedSession]

    @classmethod
    def from_rows(cls, owner: str, rows: Sequence[Sequence[Any]]) -> IndexedHistory:
        """From the rows of a history joined to its sessions, as both stores read them:
        (number, session id, slot, generation, cursor), the session columns None for a
        history without sessions."""
        if not rows:
            return cls(None, {})
        sessions = {
            row[1]: IndexedSession(row[1], owner, int(row[2]), row[3], row[4])
            for row in rows
            if row[1] is not None
        }
        return cls(int(rows[0][0]), sessions)

    @functools.cached_property
    def fingerprint(self) -> bytes:
        """A digest of the rows as read: any batch written, reset or dropped changes it
        (a store that serves a history unchanged serves it computed once)."""
        rows = sorted((r.session_id, r.slot, r.generation or "", r.cursor) for r in self.sessions.values())
        return hashlib.blake2b(repr(rows).encode(), digest_size=16).digest()


UNIT_COLUMNS = (
    "key",
    "timestamp",
    "episode",
    "exchange",
    "place",
    "from_user",
    "name",
    "candidate",
    "long",
    "last",
)
"""The columns of a unit row as `HistoryTables.units` returns them (see `UnitRow`)."""


def first_number_of_a_remade_history_table() -> int:
    """Where a store numbers histories when their table was made again (dropped by hand):
    above the old numbers, under which a running process may still keep rendered lines
    (a table numbers its histories from 1; this is milliseconds since 1970)."""
    return int(time.time() * 1000)


class HistoryTables(Protocol):
    """Recall's keyword index of each user's history, kept by a store (see `HostsHistoryIndex`).

    Rows are keyed by the history's number and a key (see the module docstring). Every
    method is sync and may raise the store's errors; `write` and `reset` write.
    """

    def indexed(self, owner: str) -> IndexedHistory:
        """The history of `owner` (see `owner_key`) and its indexed sessions."""
        ...

    def indexed_session(self, session_id: str) -> IndexedSession | None:
        """The session's row, whichever history it is in (None: it has none)."""
        ...

    def write(self, owner: str, batch: IndexBatch, expected: IndexedSession | None) -> bool:
        """Apply `batch` in one transaction, only while the session's log still has
        ``batch.generation`` and its row is still `expected` (None: it has none); False,
        with nothing written, otherwise. A ``reset`` batch, or one for a session whose row
        is in another history, deletes the session's old rows and gives it a new slot in
        `owner`'s history (made when missing)."""
        ...

    def postings(self, history: int, terms: Sequence[str]) -> Sequence[tuple[Any, ...]]:
        """``(kind, term, key, count, length)`` of every document of the history holding
        one of `terms`, each document once per term (a store that reads them as arrays
        returns `PostingColumns`)."""
        ...

    def units(self, history: int, keys: Sequence[int], exchanges: Sequence[int]) -> Sequence[tuple[Any, ...]]:
        """The unit rows (`UNIT_COLUMNS`) at `keys`, and of every member of the exchanges
        that open at the keys `exchanges`."""
        ...

    def messages(self, history: int, keys: Sequence[int]) -> Mapping[int, Message]:
        """The logged messages at `keys` (those still in their logs)."""
        ...

    def reset(self, session_id: str) -> None:
        """Drop the session's rows: it is indexed again from its log when next used."""
        ...


@runtime_checkable
class ResetsSessions(Protocol):
    """`HistoryTables` that drop the rows of several sessions in one pass (SQLite rewrites
    each segment once for all of them): what a search does when many sessions must be
    indexed afresh, rather than `HistoryTables.reset` each."""

    def reset_sessions(self, session_ids: Sequence[str]) -> None:
        """`HistoryTables.reset` of each of `session_ids`, in one transaction."""
        ...


@runtime_checkable
class WritesBatches(Protocol):
    """`HistoryTables` that write the batches of several sessions of one history together
    (SQLite: one transaction and one segment): what a search does when many sessions must
    be indexed first, rather than `HistoryTables.write` each."""

    def write_many(
        self, owner: str, batches: Sequence[tuple[IndexBatch, IndexedSession | None]]
    ) -> list[bool]:
        """`HistoryTables.write` of each (batch, expected row): whether each was written."""
        ...

"""The PostgreSQL side of `PostgresStore`: its tables, their migrations, and the SQL of
every operation (`_Queries`), with the encoding of messages into rows and back.

Tables (in their own schema, ``convmem`` by default)::

    schema_version  one row per applied migration (version, description, applied_at)
    sessions        session_id, user_id, created_at, updated_at, last_seq, message_count, total_tokens,
                    generation (migration 3)
    messages        (session_id, seq) -> role, content, name, tool_calls, tool_call_id, metadata,
                    status, ts, token_count, reply_to_seq; a foreign key to sessions, ON DELETE CASCADE
    state           (session_id, key) -> value, version, updated_at; likewise
    vectors         (session_id, model, unit_id) -> generation, dimension, vector (float32 bytes),
                    written (migration 4); likewise, and emptied when the log's generation changes
    lexical_docs    (session_id, kind, doc_id) -> generation, digest, size, terms (tsvector;
                    migration 5), length, repeats (migration 6); likewise. Written only by
                    `PostgresLexicalIndex`
    lexical_stats   (session_id, kind) -> documents, total_length (migration 6): the BM25 totals
                    of lexical_docs, changed in the transaction that changes its rows; likewise
    lexical_postings (session_id, kind, term, block) -> generation, postings (migration 7): for
                    each term, the documents of lexical_docs holding it, 256 doc ids per block
                    (doc id, term count, length; see `encode_postings`), changed in the same
                    transaction as the rows; what a search reads. Likewise

The store creates and migrates its schema itself when it opens: each
migration runs in one transaction under an advisory lock, so many servers
starting at once apply it exactly once, and a database written by a newer
convmem is refused rather than misread. New columns and tables (the
``vectors`` of migration 4, a full-text ``tsvector`` on messages) come as new
migrations; nothing here assumes the tables have only today's columns.

Vectors belong to one generation of a session's log. Deleting the session
(`clear`, `forget_user`, `expire_idle`) deletes them by the foreign key in the
same statement; deleting or replacing messages deletes them in the same
transaction that sets the new generation, and a vector is only written while
its session still has the generation it was computed for (a key-share lock on
the session row makes that check and the insert one step). Reads join on the
session's current generation, so a row of another generation is never returned.

Appends are one statement: an upsert of the session row, which takes that
row's lock and advances ``last_seq``, feeding the insert of the messages. Any
number of writers on any number of servers therefore get gapless,
never-repeated seqs per session, and a failed append stores nothing. Every
write that touches several rows locks the session row first, so writers never
wait on each other in opposite orders; a deadlock or serialization failure
reported by the server (which rolls the whole write back) is retried.

Ids and text are always bound parameters; the only name put into SQL text is
the schema, which must be a plain lower-case identifier. Times are the
server's clock, so every process agrees on what is idle.

An operation is a generator of statements (`_Sql`); `PostgresStore` and
`AsyncPostgresStore` only run them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
import struct
from collections.abc import Sequence
from typing import Any, TypeVar

from ..._errors import ConfigError, InvalidMessageError, StoreError
from ..._models import Message, TurnStatus
from ..._sansio import Flow
from ..base import (
    MAX_ID_LENGTH,
    SessionSnapshot,
    SessionStats,
    StateRecord,
    check_owner,
    check_seq,
    idle_cutoff,
    missing_seqs_error,
    new_generation,
    validate_id,
    validate_messages,
    validate_seqs,
)
from ..codec import message_from_record, message_to_record

_T = TypeVar("_T")

DEFAULT_SCHEMA = "convmem"
# Sessions deleted per statement by expire_idle: one sweep never holds many row locks at once.
_SWEEP_BATCH = 500
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_COLUMNS = (
    "seq",
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "metadata",
    "status",
    "ts",
    "token_count",
    "reply_to_seq",
)
_NOW = "extract(epoch FROM clock_timestamp())::float8"

# The lexeme every document of one (session, kind) holds besides its terms: until migration 7
# it let the GIN index on terms find one session's matches; searches read lexical_postings
# since migration 7, and rows keep the lexeme so that rows of every version look alike. A space
# never occurs in a term; `lexical_tag` is the same in Python. Only migration 6 computes it in SQL.
_LEXICAL_TAG_SQL = "' ' || md5(kind || ' ' || session_id)"


# Marks a term a document holds more than once: "term" + REPEATED is then one of its lexemes,
# and its count is in the document's repeats.
REPEATED = "\x1e"
# Separates the terms of a document as written (``docs``' terms) and the entries of its repeats.
SEPARATOR = "\x1f"


# Documents per row of lexical_postings: a search reads a term's rows, a write rewrites the rows
# of the blocks its documents fall in.
POSTINGS_BLOCK_BITS = 8


@dataclasses.dataclass(frozen=True)
class LexicalMatches:
    """What `_Queries.lexical_matches` read: the index's number of documents and their total
    length, and for each query term found, its posting blocks (see `encode_postings`)."""

    documents: int
    total_length: int
    postings: dict[str, list[bytes]]


def encode_postings(entries: Sequence[tuple[int, int, int]]) -> bytes:
    """(doc id, term count, document length) entries, by doc id, as one ``bytea``: the ids as
    big-endian int64, then the counts, then the lengths, as big-endian int32 (what SQL's
    ``int8send`` and ``int4send`` make, which migration 7 uses)."""
    size = len(entries)
    ids, counts, lengths = zip(*entries, strict=True) if entries else ((), (), ())
    return struct.pack(f">{size}q{size}i{size}i", *ids, *counts, *lengths)


def decode_postings(blob: bytes) -> list[tuple[int, int, int]]:
    """The entries `encode_postings` made `blob` of."""
    size = len(blob) // 16
    values = struct.unpack(f">{size}q{size}i{size}i", blob)
    return list(zip(values[:size], values[size : 2 * size], values[2 * size :], strict=True))


def document_terms(lexemes: Sequence[str], repeats: str | None) -> dict[str, int]:
    """A document's terms and how often it holds each, from its lexemes (the index's own and
    the marks of repeated terms left out) and its repeats ("term\\x1ecount\\x1f...")."""
    counts = {term: 1 for term in lexemes if not term.startswith(" ") and REPEATED not in term}
    for entry in (repeats or "").split(SEPARATOR):
        term, mark, count = entry.partition(REPEATED)
        if mark and term in counts:
            counts[term] = int(count)
    return counts


def _index_lock(schema: str, session_id: str, kind: str) -> int:
    """The advisory lock key the writers of one keyword index take turns on."""
    digest = hashlib.blake2b(f"{schema}\x00{kind}\x00{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lexical_tag(session_id: str, kind: str) -> str:
    """The lexeme that marks the documents of `session_id`'s index of `kind` (see ``_LEXICAL_TAG_SQL``)."""
    return " " + hashlib.md5(f"{kind} {session_id}".encode(), usedforsecurity=False).hexdigest()


# Each migration: (version, description, statements); ``{s}`` is the quoted schema.
# Never edit a released migration: add the next one.
_MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "sessions, messages and state",
        (
            # COLLATE "C": ids compare by code point, as Python sorts them, whatever the database locale.
            """CREATE TABLE {s}.sessions (
                session_id    text COLLATE "C" PRIMARY KEY,
                user_id       text COLLATE "C",
                created_at    double precision NOT NULL,
                updated_at    double precision NOT NULL,
                last_seq      bigint NOT NULL DEFAULT 0,
                message_count bigint NOT NULL DEFAULT 0,
                total_tokens  bigint NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX sessions_by_user ON {s}.sessions (user_id) WHERE user_id IS NOT NULL",
            "CREATE INDEX sessions_by_activity ON {s}.sessions (updated_at)",
            """CREATE TABLE {s}.messages (
                session_id   text COLLATE "C" NOT NULL
                             REFERENCES {s}.sessions (session_id) ON DELETE CASCADE,
                seq          bigint NOT NULL,
                role         text NOT NULL,
                content      text NOT NULL,
                name         text,
                tool_calls   text,
                tool_call_id text,
                metadata     text,
                status       text NOT NULL,
                ts           double precision NOT NULL,
                token_count  integer,
                PRIMARY KEY (session_id, seq)
            )""",
            """CREATE TABLE {s}.state (
                session_id text COLLATE "C" NOT NULL
                           REFERENCES {s}.sessions (session_id) ON DELETE CASCADE,
                key        text COLLATE "C" NOT NULL,
                value      text NOT NULL,
                version    bigint NOT NULL,
                updated_at double precision NOT NULL,
                PRIMARY KEY (session_id, key)
            )""",
        ),
    ),
    (
        2,
        "messages.reply_to_seq: the question an answer belongs to",
        ("ALTER TABLE {s}.messages ADD COLUMN reply_to_seq bigint",),
    ),
    (
        3,
        "a generation per session log",
        (
            # A volatile default is computed for every existing row, and for every new session row:
            # no insert has to name the column. Deleting or replacing messages sets a new one.
            "ALTER TABLE {s}.sessions ADD COLUMN generation text NOT NULL "
            "DEFAULT substr(md5(random()::text || clock_timestamp()::text), 1, 16)",
        ),
    ),
    (
        4,
        "vectors: recall embeddings, so a new server never embeds a stored session again",
        (
            # Little-endian float32 bytes, not real[]: a quarter of the size on the wire, decoded
            # without parsing, and the length check tells a damaged row apart.
            """CREATE TABLE {s}.vectors (
                session_id text COLLATE "C" NOT NULL
                           REFERENCES {s}.sessions (session_id) ON DELETE CASCADE,
                model      text COLLATE "C" NOT NULL,
                unit_id    bigint NOT NULL,
                generation text NOT NULL,
                dimension  integer NOT NULL,
                vector     bytea NOT NULL,
                written    bigint GENERATED BY DEFAULT AS IDENTITY,
                PRIMARY KEY (session_id, model, unit_id)
            )""",
            # The newest write of a session's vectors in one index probe: the change check of search.
            "CREATE INDEX vectors_by_write ON {s}.vectors (session_id, model, written)",
        ),
    ),
    (
        5,
        "lexical_docs: recall's keyword index, for stores opened with lexical_index='tsvector'",
        (
            # terms: array_to_tsvector of recall's own terms (no parser, no dictionary), so each term
            # is exactly one lexeme; digest and size let a server skip documents already written.
            """CREATE TABLE {s}.lexical_docs (
                session_id text COLLATE "C" NOT NULL
                           REFERENCES {s}.sessions (session_id) ON DELETE CASCADE,
                kind       text NOT NULL CHECK (kind IN ('messages', 'exchanges')),
                doc_id     bigint NOT NULL,
                generation text NOT NULL,
                digest     bytea NOT NULL,
                size       integer NOT NULL,
                terms      tsvector NOT NULL,
                PRIMARY KEY (session_id, kind, doc_id)
            )""",
            "CREATE INDEX lexical_docs_terms ON {s}.lexical_docs USING gin (terms)",
        ),
    ),
    (
        6,
        "lexical_docs: BM25 (term counts, lengths, per-index totals) and a per-index lexeme for the GIN index",
        (
            # length: the document's number of terms; repeats: the terms it holds more than once,
            # with their counts ("term\x1ecount\x1f..."), NULL when every term occurs once.
            "ALTER TABLE {s}.lexical_docs ADD COLUMN length integer, ADD COLUMN repeats text",
            # Rows of an older generation were never read; the totals below count only live ones.
            "DELETE FROM {s}.lexical_docs AS d USING {s}.sessions AS s "
            "WHERE d.session_id = s.session_id AND d.generation <> s.generation",
            # Old rows: their distinct terms stand for their length until a server adds them again,
            # which the emptied digest makes it do (with exact counts); the index's own lexeme
            # (see _LEXICAL_TAG_SQL) lets the GIN index find one session's documents. Old rows
            # have no marks of repeated terms: each term counts once until they are written again.
            "UPDATE {s}.lexical_docs SET length = length(terms), digest = ''::bytea, "
            "terms = terms || array_to_tsvector(ARRAY[" + _LEXICAL_TAG_SQL + "])",
            "ALTER TABLE {s}.lexical_docs ALTER COLUMN length SET NOT NULL",
            """CREATE TABLE IF NOT EXISTS {s}.lexical_stats (
                session_id   text COLLATE "C" NOT NULL
                             REFERENCES {s}.sessions (session_id) ON DELETE CASCADE,
                kind         text NOT NULL,
                documents    bigint NOT NULL,
                total_length bigint NOT NULL,
                PRIMARY KEY (session_id, kind)
            )""",
            "DELETE FROM {s}.lexical_stats",
            "INSERT INTO {s}.lexical_stats (session_id, kind, documents, total_length) "
            "SELECT session_id, kind, count(*), sum(length) FROM {s}.lexical_docs GROUP BY session_id, kind",
        ),
    ),
    (
        7,
        "lexical_postings: each term's documents in blocks, what a keyword search reads",
        (
            """CREATE TABLE {s}.lexical_postings (
                session_id text COLLATE "C" NOT NULL
                           REFERENCES {s}.sessions (session_id) ON DELETE CASCADE,
                kind       text NOT NULL,
                term       text COLLATE "C" NOT NULL,
                block      bigint NOT NULL,
                generation text NOT NULL,
                postings   bytea NOT NULL,
                PRIMARY KEY (session_id, kind, term, block)
            )""",
            # The live documents' postings, as encode_postings lays them out; a term's count is 1
            # unless the document's repeats say otherwise.
            """INSERT INTO {s}.lexical_postings (session_id, kind, term, block, generation, postings)
            SELECT d.session_id, d.kind, t.term, d.doc_id >> """
            + str(POSTINGS_BLOCK_BITS)
            + """, d.generation,
                   string_agg(int8send(d.doc_id), ''::bytea ORDER BY d.doc_id)
                   || string_agg(int4send(COALESCE(r.count, 1)), ''::bytea ORDER BY d.doc_id)
                   || string_agg(int4send(d.length), ''::bytea ORDER BY d.doc_id)
            FROM {s}.lexical_docs AS d
            JOIN {s}.sessions AS s ON s.session_id = d.session_id AND s.generation = d.generation
            CROSS JOIN LATERAL unnest(tsvector_to_array(d.terms)) AS t(term)
            LEFT JOIN LATERAL (
                SELECT split_part(entry, E'\\x1e', 2)::integer AS count
                FROM unnest(string_to_array(d.repeats, E'\\x1f')) AS entry
                WHERE split_part(entry, E'\\x1e', 1) = t.term
                LIMIT 1
            ) AS r ON true
            WHERE left(t.term, 1) <> ' ' AND strpos(t.term, E'\\x1e') = 0
            GROUP BY d.session_id, d.kind, d.generation, t.term, d.doc_id >> """
            + str(POSTINGS_BLOCK_BITS),
            # Searches read lexical_postings: the GIN index on the documents' terms is not read.
            "DROP INDEX IF EXISTS {s}.lexical_docs_terms",
        ),
    ),
)
SCHEMA_VERSION = _MIGRATIONS[-1][0]


# -- requests: what an operation asks of the server ---------------------------------------


@dataclasses.dataclass(frozen=True)
class _Sql:
    """One parameterised statement; its reply is the list of rows it returned (maybe empty)."""

    text: str
    params: tuple[Any, ...] = ()


# An operation is a generator: it yields statements, is sent their rows, and returns its
# result. The sync and async stores only differ in how they drive it.
_Operation = Flow[_Sql, _T]


class _RollBack(Exception):
    """Raised by an operation to end its transaction without writing; carries its result."""

    def __init__(self, result: object) -> None:
        super().__init__("rolled back on purpose")
        self.result = result


def _check_id(value: str, what: str) -> str:
    # PostgreSQL text cannot hold NUL, and a key must fit a btree entry: refuse what
    # validate_id refuses rather than fail deep in the server. The common case costs O(1).
    if len(value) > MAX_ID_LENGTH or "\x00" in value:
        validate_id(value, what)
    return value


def _check_text(value: str | None, what: str) -> None:
    if value is not None and "\x00" in value:
        raise InvalidMessageError(
            f"{what} contains a NUL character at position {value.index(chr(0))}; PostgreSQL text "
            "cannot hold NUL, so nothing was stored. Remove it or encode it (e.g. as \\u0000)"
        )


def _row_values(message: Message, session_id: str) -> dict[str, Any]:
    record = message_to_record(message)
    # content, tool_calls and metadata are JSON, which escapes NUL; the plain fields are not.
    _check_text(record["name"], f"the name of a message for session {session_id!r:.80}")
    _check_text(record["tool_call_id"], f"the tool_call_id of a message for session {session_id!r:.80}")
    return record


def _not_utf8(action: str, exc: UnicodeEncodeError) -> InvalidMessageError:
    return InvalidMessageError(
        f"{action}: the text is not valid UTF-8 ({exc.reason}); nothing was stored. "
        "Build messages with Message.create, which rejects lone surrogates"
    )


def _check_schema(schema: object) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigError(
            f"schema must be a lower-case SQL identifier (letters, digits, '_', at most 63 "
            f"characters, not starting with a digit), got {schema!r}"
        )
    return schema


# -- the logic shared by both stores ---------------------------------------------------


# A session row's columns that make its `SessionStats`, in `_stats_of`'s order.
_STATS_COLUMNS = "message_count, last_seq, total_tokens, user_id, created_at, updated_at, generation"


def _stats_of(session_id: str, row: Sequence[Any] | None) -> SessionStats:
    """The `SessionStats` of a session row's `_STATS_COLUMNS` (None: no row, no messages)."""
    if row is None:
        return SessionStats(session_id, 0, 0, 0)
    count, last_seq, tokens, user_id, created, updated, generation = row
    return SessionStats(
        session_id, int(count), int(last_seq), int(tokens), user_id, created, updated, generation
    )


class _Queries:
    """The SQL of every operation for one schema, and the decoding of its rows: everything but the I/O."""

    def __init__(self, schema: str) -> None:
        self.schema = _check_schema(schema)
        s = f'"{self.schema}"'
        self.s = s
        # Same 64-bit key in every process: migrations of one schema never run side by side.
        self.lock_key = int.from_bytes(
            hashlib.sha256(f"convmem:{schema}".encode()).digest()[:8], "big", signed=True
        )
        columns = ", ".join(_COLUMNS)
        self.select_messages = f"SELECT {columns} FROM {s}.messages WHERE session_id = %s"
        self.append_sql = f"""
            WITH clock AS (SELECT {_NOW} AS now),
            session AS (
                INSERT INTO {s}.sessions AS known
                    (session_id, user_id, created_at, updated_at, last_seq, message_count, total_tokens)
                SELECT %s, %s, clock.now, clock.now, %s, %s, %s FROM clock
                ON CONFLICT (session_id) DO UPDATE SET
                    user_id = COALESCE(known.user_id, EXCLUDED.user_id),
                    updated_at = GREATEST(known.updated_at, EXCLUDED.updated_at),
                    last_seq = known.last_seq + EXCLUDED.last_seq,
                    message_count = known.message_count + EXCLUDED.message_count,
                    total_tokens = known.total_tokens + EXCLUDED.total_tokens
                -- Another user's session: no row, so nothing is stored (see check_owner).
                WHERE known.user_id IS NULL OR EXCLUDED.user_id IS NULL OR known.user_id = EXCLUDED.user_id
                RETURNING last_seq
            ),
            stored AS (
                INSERT INTO {s}.messages (session_id, {columns})
                SELECT %s, session.last_seq - %s + m.position, m.role, m.content, m.name, m.tool_calls,
                       m.tool_call_id, m.metadata, m.status, m.ts, m.token_count, m.reply_to_seq
                FROM session, unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                                     %s::text[], %s::text[], %s::float8[], %s::integer[], %s::bigint[])
                     WITH ORDINALITY AS m(role, content, name, tool_calls, tool_call_id, metadata,
                                          status, ts, token_count, reply_to_seq, position)
                RETURNING seq
            )
            SELECT last_seq FROM session"""

    # -- schema --------------------------------------------------------------------------

    def migrate(self) -> _Operation[int]:
        """Bring the schema up to `SCHEMA_VERSION`; run in one transaction."""
        s = self.s
        (exists,) = (yield _Sql("SELECT to_regclass(%s) IS NOT NULL", (f"{s}.schema_version",)))[0]
        if exists:
            current = yield from self._version()
            if current >= SCHEMA_VERSION:
                return current
        yield _Sql("SELECT pg_advisory_xact_lock(%s)", (self.lock_key,))
        yield _Sql(f"CREATE SCHEMA IF NOT EXISTS {s}")
        yield _Sql(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer PRIMARY KEY, "
            "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = yield from self._version()  # again, under the lock: another server may have migrated
        for version, description, statements in _MIGRATIONS:
            if version > current:
                for statement in statements:
                    yield _Sql(statement.format(s=s))
                yield _Sql(
                    f"INSERT INTO {s}.schema_version (version, description) VALUES (%s, %s)",
                    (version, description),
                )
        return SCHEMA_VERSION

    def _version(self) -> _Operation[int]:
        (current,) = (yield _Sql(f"SELECT coalesce(max(version), 0) FROM {self.s}.schema_version"))[0]
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"schema {self.schema!r} was written by a newer convmem (schema version {current} > "
                f"{SCHEMA_VERSION}); upgrade convmem to use it"
            )
        return int(current)

    # -- messages ------------------------------------------------------------------------

    @staticmethod
    def _decode(rows: list[tuple[Any, ...]], session_id: str) -> list[Message]:
        return [message_from_record(dict(zip(_COLUMNS, row, strict=True)), session_id) for row in rows]

    def append(
        self, session_id: str, messages: Sequence[Message], user_id: str | None
    ) -> _Operation[list[Message]]:
        messages = validate_messages(messages)
        _check_id(session_id, "session_id")
        if user_id is not None:
            _check_id(user_id, "user_id")
        if not messages:
            return []
        records = [_row_values(m, session_id) for m in messages]
        columns = [[record[name] for record in records] for name in _COLUMNS[1:]]
        count = len(messages)
        rows = yield _Sql(
            self.append_sql,
            (
                session_id,
                user_id,
                count,
                count,
                sum(m.token_count or 0 for m in messages),
                session_id,
                count,
                *columns,
            ),
        )
        if not rows:
            yield from self._refuse_other_user(session_id, user_id)
        first = int(rows[0][0]) - count + 1
        return [dataclasses.replace(m, seq=first + i) for i, m in enumerate(messages)]

    def _refuse_other_user(self, session_id: str, user_id: str | None) -> _Operation[None]:
        """Raise the `SessionOwnerError` of an append the owner check turned away."""
        owners = yield _Sql(f"SELECT user_id FROM {self.s}.sessions WHERE session_id = %s", (session_id,))
        assert user_id is not None  # only a named user is turned away
        check_owner(session_id, owners[0][0] if owners else None, user_id)
        raise StoreError(f"append to session {session_id!r:.80} stored nothing; retry it")

    def messages(self, session_id: str, after_seq: int, through_seq: int | None) -> _Operation[list[Message]]:
        _check_id(session_id, "session_id")
        if through_seq is not None and through_seq <= after_seq:
            return []
        upper = 2**62 if through_seq is None else int(through_seq)
        rows = yield _Sql(
            f"{self.select_messages} AND seq > %s AND seq <= %s ORDER BY seq",
            (session_id, int(after_seq), upper),
        )
        return self._decode(rows, session_id)

    def tail(self, session_id: str, limit: int, before_seq: int | None) -> _Operation[list[Message]]:
        _check_id(session_id, "session_id")
        if limit <= 0:
            return []
        upper = 2**62 if before_seq is None else int(before_seq)
        rows = yield _Sql(
            f"{self.select_messages} AND seq < %s ORDER BY seq DESC LIMIT %s", (session_id, upper, int(limit))
        )
        rows.reverse()
        return self._decode(rows, session_id)

    def get(self, session_id: str, seqs: Sequence[int]) -> _Operation[list[Message]]:
        _check_id(session_id, "session_id")
        wanted = sorted({int(s) for s in seqs})
        if not wanted:
            return []
        rows = yield _Sql(
            f"{self.select_messages} AND seq = ANY(%s::bigint[]) ORDER BY seq", (session_id, wanted)
        )
        return self._decode(rows, session_id)

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> _Operation[Message]:
        _check_id(session_id, "session_id")
        s = self.s
        # The session row is locked before the message row, as every other write does.
        rows = yield _Sql(
            f"""
            WITH touched AS (
                UPDATE {s}.sessions SET updated_at = GREATEST(updated_at, {_NOW})
                WHERE session_id = %s
                  AND EXISTS (SELECT 1 FROM {s}.messages WHERE session_id = %s AND seq = %s)
                RETURNING session_id
            )
            UPDATE {s}.messages AS m SET status = %s FROM touched
            WHERE m.session_id = touched.session_id AND m.seq = %s
            RETURNING {", ".join("m." + c for c in _COLUMNS)}""",
            (session_id, session_id, int(seq), status.value, int(seq)),
        )
        if not rows:
            raise InvalidMessageError(f"session {session_id!r:.80} has no message with seq={seq}")
        return self._decode(rows, session_id)[0]

    def stats(self, session_id: str) -> _Operation[SessionStats]:
        _check_id(session_id, "session_id")
        rows = yield _Sql(
            f"SELECT {_STATS_COLUMNS} FROM {self.s}.sessions WHERE session_id = %s", (session_id,)
        )
        return _stats_of(session_id, rows[0] if rows else None)

    def read_session(self, session_id: str, keys: Sequence[str]) -> _Operation[SessionSnapshot]:
        """Stats and state records in one statement (a row per record found, or one row)."""
        _check_id(session_id, "session_id")
        wanted = list(dict.fromkeys(keys))
        for key in wanted:
            _check_text(key, "a state key")
        s = self.s
        known = ", ".join(f"known.{column}" for column in _STATS_COLUMNS.split(", "))
        rows = yield _Sql(
            f"SELECT {known}, st.key, st.value, st.version "
            f"FROM (SELECT %s::text AS session_id) AS asked "
            f"LEFT JOIN {s}.sessions AS known ON known.session_id = asked.session_id "
            f"LEFT JOIN {s}.state AS st ON st.session_id = asked.session_id AND st.key = ANY(%s::text[])",
            (session_id, wanted),
        )
        stats = _stats_of(session_id, rows[0][:7] if rows[0][0] is not None else None)
        states = {row[7]: StateRecord(row[8], int(row[9])) for row in rows if row[7] is not None}
        return SessionSnapshot(stats, states)

    def delete_messages(self, session_id: str, seqs: Sequence[int]) -> _Operation[list[Message]]:
        """Run in a transaction: a seq that is not there rolls every deletion back."""
        _check_id(session_id, "session_id")
        wanted = validate_seqs(seqs)
        if not wanted:
            return []
        s = self.s
        yield from self._lock_session(session_id, wanted)
        rows = yield _Sql(
            f"DELETE FROM {s}.messages WHERE session_id = %s AND seq = ANY(%s::bigint[]) "
            f"RETURNING {', '.join(_COLUMNS)}",
            (session_id, wanted),
        )
        if len(rows) != len(wanted):
            present = {int(row[0]) for row in rows}
            raise missing_seqs_error(session_id, [seq for seq in wanted if seq not in present])
        deleted = sorted(self._decode(rows, session_id), key=lambda m: m.seq or 0)
        yield from self._log_changed(session_id, -len(deleted), -sum(m.token_count or 0 for m in deleted))
        return deleted

    def replace_message(self, session_id: str, seq: int, message: Message) -> _Operation[Message]:
        """Run in a transaction, like `delete_messages`."""
        _check_id(session_id, "session_id")
        check_seq(seq)
        (message,) = validate_messages([message])
        stored = dataclasses.replace(message, seq=seq)
        record = _row_values(stored, session_id)
        s = self.s
        yield from self._lock_session(session_id, [seq])
        rows = yield _Sql(
            f"SELECT token_count FROM {s}.messages WHERE session_id = %s AND seq = %s FOR UPDATE",
            (session_id, int(seq)),
        )
        if not rows:
            raise missing_seqs_error(session_id, [seq])
        yield _Sql(
            f"UPDATE {s}.messages SET ({', '.join(_COLUMNS[1:])}) = "
            f"({', '.join(['%s'] * (len(_COLUMNS) - 1))}) WHERE session_id = %s AND seq = %s",
            (*(record[name] for name in _COLUMNS[1:]), session_id, int(seq)),
        )
        yield from self._log_changed(session_id, 0, (stored.token_count or 0) - int(rows[0][0] or 0))
        return stored

    def _lock_session(self, session_id: str, seqs: list[int]) -> _Operation[None]:
        # The session row first, as every other write locks it.
        rows = yield _Sql(f"SELECT 1 FROM {self.s}.sessions WHERE session_id = %s FOR UPDATE", (session_id,))
        if not rows:
            raise missing_seqs_error(session_id, seqs)

    def _log_changed(self, session_id: str, count_delta: int, token_delta: int) -> _Operation[None]:
        # Vectors of the old generation go with it; a server that keeps some (unchanged text)
        # writes them again under the new one (see PostgresVectorIndex.follow_generation).
        yield _Sql(f"DELETE FROM {self.s}.vectors WHERE session_id = %s", (session_id,))
        # Likewise the keyword index: recall adds the session's documents again from the new log.
        yield _Sql(f"DELETE FROM {self.s}.lexical_docs WHERE session_id = %s", (session_id,))
        yield _Sql(f"DELETE FROM {self.s}.lexical_stats WHERE session_id = %s", (session_id,))
        yield _Sql(f"DELETE FROM {self.s}.lexical_postings WHERE session_id = %s", (session_id,))
        yield _Sql(
            f"UPDATE {self.s}.sessions SET message_count = message_count + %s, "
            "total_tokens = total_tokens + %s, generation = %s, "
            f"updated_at = GREATEST(updated_at, {_NOW}) WHERE session_id = %s",
            (count_delta, token_delta, new_generation(), session_id),
        )

    # -- state records -----------------------------------------------------------------------

    def user_session_stats(self, user_id: str) -> _Operation[list[SessionStats]]:
        _check_id(user_id, "user_id")
        rows = yield _Sql(
            f"SELECT session_id, {_STATS_COLUMNS} FROM {self.s}.sessions WHERE user_id = %s ORDER BY session_id",
            (user_id,),
        )
        return [_stats_of(row[0], row[1:]) for row in rows]

    def get_states(self, session_ids: Sequence[str], key: str) -> _Operation[dict[str, StateRecord]]:
        ids = list(dict.fromkeys(session_ids))
        for session_id in ids:
            _check_id(session_id, "session_id")
        _check_text(key, "a state key")
        rows = yield _Sql(
            f"SELECT session_id, value, version FROM {self.s}.state WHERE key = %s AND session_id = ANY(%s)",
            (key, ids),
        )
        return {row[0]: StateRecord(row[1], int(row[2])) for row in rows}

    def get_state(self, session_id: str, key: str) -> _Operation[StateRecord | None]:
        _check_id(session_id, "session_id")
        _check_text(key, "a state key")
        rows = yield _Sql(
            f"SELECT value, version FROM {self.s}.state WHERE session_id = %s AND key = %s", (session_id, key)
        )
        return StateRecord(rows[0][0], int(rows[0][1])) if rows else None

    def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        expected_version: int | None,
        requires_seq: int | None,
    ) -> _Operation[StateRecord | None]:
        """Run in a transaction: the session row's lock makes the version check and the write one step."""
        _check_id(session_id, "session_id")
        _check_text(key, "a state key")
        _check_text(value, f"the value of state {key!r}")
        s = self.s
        if requires_seq is None:
            # A state-only session is still a session: listed, forgotten and expired like any other.
            yield _Sql(
                f"INSERT INTO {s}.sessions AS known (session_id, created_at, updated_at) "
                f"SELECT %s, now, now FROM (SELECT {_NOW} AS now) AS clock "
                "ON CONFLICT (session_id) DO UPDATE SET updated_at = known.updated_at",
                (session_id,),
            )
        else:
            # A deleted session must not get its derived state back from a late writer.
            rows = yield _Sql(
                f"SELECT last_seq FROM {s}.sessions WHERE session_id = %s FOR UPDATE", (session_id,)
            )
            if not rows or int(rows[0][0]) < requires_seq:
                return None
        rows = yield _Sql(
            f"SELECT version FROM {s}.state WHERE session_id = %s AND key = %s", (session_id, key)
        )
        current = int(rows[0][0]) if rows else 0
        if expected_version is not None and expected_version != current:
            raise _RollBack(None)  # also undoes a session row created above for nothing
        yield _Sql(
            f"""
            WITH touched AS (
                UPDATE {s}.sessions SET updated_at = GREATEST(updated_at, {_NOW}) WHERE session_id = %s
                RETURNING updated_at
            )
            INSERT INTO {s}.state (session_id, key, value, version, updated_at)
            SELECT %s, %s, %s, %s, touched.updated_at FROM touched
            ON CONFLICT (session_id, key) DO UPDATE SET
                value = EXCLUDED.value, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at""",
            (session_id, session_id, key, value, current + 1),
        )
        return StateRecord(value, current + 1)

    def delete_state(self, session_id: str, key: str) -> _Operation[None]:
        _check_id(session_id, "session_id")
        _check_text(key, "a state key")
        s = self.s
        yield _Sql(
            f"""
            WITH touched AS (
                UPDATE {s}.sessions SET updated_at = GREATEST(updated_at, {_NOW})
                WHERE session_id = %s
                  AND EXISTS (SELECT 1 FROM {s}.state WHERE session_id = %s AND key = %s)
                RETURNING session_id
            ),
            deleted AS (
                DELETE FROM {s}.state USING touched
                WHERE state.session_id = touched.session_id AND state.key = %s
                RETURNING 1
            )
            SELECT count(*) FROM deleted""",
            (session_id, session_id, key, key),
        )

    # -- vectors -------------------------------------------------------------------------------

    def vector_rows(
        self, session_id: str, model: str, dimension: int, after_written: int = 0
    ) -> _Operation[tuple[str | None, list[tuple[int, int, bytes]]]]:
        """The session's generation and its (unit, written, vector bytes) rows of that generation,
        model and dimension written after `after_written`, read in one statement."""
        _check_id(session_id, "session_id")
        s = self.s
        rows = yield _Sql(
            f"""
            SELECT s.generation, v.unit_id, v.written, v.vector
            FROM {s}.sessions AS s
            LEFT JOIN {s}.vectors AS v
              ON v.session_id = s.session_id AND v.generation = s.generation
             AND v.model = %s AND v.dimension = %s AND v.written > %s
            WHERE s.session_id = %s""",
            (model, dimension, int(after_written), session_id),
        )
        if not rows:
            return None, []
        return rows[0][0], [(int(r[1]), int(r[2]), bytes(r[3])) for r in rows if r[1] is not None]

    def vector_marker(self, session_id: str, model: str) -> _Operation[tuple[str | None, int]]:
        """(generation, highest write number) of the session's vectors of `model`: two index probes."""
        _check_id(session_id, "session_id")
        s = self.s
        rows = yield _Sql(
            f"""
            SELECT s.generation,
                   (SELECT coalesce(max(v.written), 0) FROM {s}.vectors AS v
                    WHERE v.session_id = s.session_id AND v.model = %s)
            FROM {s}.sessions AS s WHERE s.session_id = %s""",
            (model, session_id),
        )
        if not rows:
            return None, 0
        return rows[0][0], int(rows[0][1])

    def write_vectors(
        self,
        session_id: str,
        model: str,
        dimension: int,
        generation: str,
        units: Sequence[int],
        vectors: Sequence[bytes],
    ) -> _Operation[list[tuple[int, int]]]:
        """Upsert vectors while the session is at `generation`; returns (unit, written) of what was stored.

        Nothing is stored when the session is gone or at another generation. The key-share
        lock waits for a delete or replace of messages in flight (they lock the session row
        first) and then sees the generation it set.
        """
        _check_id(session_id, "session_id")
        s = self.s
        rows = yield _Sql(
            f"""
            WITH live AS (
                SELECT session_id FROM {s}.sessions WHERE session_id = %s AND generation = %s
                FOR KEY SHARE
            )
            INSERT INTO {s}.vectors AS known (session_id, model, unit_id, generation, dimension, vector)
            SELECT live.session_id, %s, u.unit_id, %s, %s, u.vector
            FROM live, unnest(%s::bigint[], %s::bytea[]) AS u(unit_id, vector)
            ON CONFLICT (session_id, model, unit_id) DO UPDATE SET
                generation = EXCLUDED.generation, dimension = EXCLUDED.dimension,
                vector = EXCLUDED.vector, written = EXCLUDED.written
            RETURNING unit_id, written""",
            (session_id, generation, model, generation, dimension, list(units), list(vectors)),
        )
        return [(int(r[0]), int(r[1])) for r in rows]

    def delete_vectors(
        self, session_id: str, model: str | None, units: Sequence[int] | None
    ) -> _Operation[int]:
        """Delete vectors of the session: of one model (every model when None), only `units` when given."""
        _check_id(session_id, "session_id")
        text = f"DELETE FROM {self.s}.vectors WHERE session_id = %s"
        params: tuple[Any, ...] = (session_id,)
        if model is not None:
            text += " AND model = %s"
            params += (model,)
        if units is not None:
            text += " AND unit_id = ANY(%s::bigint[])"
            params += (list(units),)
        rows = yield _Sql(text + " RETURNING 1", params)
        return len(rows)

    def delete_other_generations(self, session_id: str, model: str, generation: str) -> _Operation[int]:
        """Delete the session's vectors of `model` written for any generation but `generation`."""
        _check_id(session_id, "session_id")
        rows = yield _Sql(
            f"DELETE FROM {self.s}.vectors WHERE session_id = %s AND model = %s AND generation <> %s "
            "RETURNING 1",
            (session_id, model, generation),
        )
        return len(rows)

    # -- recall's keyword index (lexical_docs) --------------------------------------------------

    def lexical_stored(
        self, session_id: str, kind: str, doc_ids: Sequence[int] | None
    ) -> _Operation[dict[int, tuple[bytes, int]]]:
        """(digest, size) of the session's `kind` documents of its current generation: of
        `doc_ids`, or all of them (None)."""
        _check_id(session_id, "session_id")
        s = self.s
        text = f"""
            SELECT d.doc_id, d.digest, d.size FROM {s}.sessions AS s
            JOIN {s}.lexical_docs AS d
              ON d.session_id = s.session_id AND d.generation = s.generation AND d.kind = %s
            WHERE s.session_id = %s"""
        params: tuple[Any, ...] = (kind, session_id)
        if doc_ids is not None:
            text += " AND d.doc_id = ANY(%s::bigint[])"
            params += (list(doc_ids),)
        rows = yield _Sql(text, params)
        return {int(r[0]): (bytes(r[1]), int(r[2])) for r in rows}

    def write_lexical(
        self,
        session_id: str,
        kind: str,
        generation: str | None,
        deletes: Sequence[int],
        docs: Sequence[tuple[int, bytes, int, str, int, str | None]],
    ) -> _Operation[bool]:
        """Run in a transaction: delete `deletes` and write `docs` (doc id, digest, size, terms
        joined by ``\\x1f``, length, repeats) while the session is at `generation`; False
        (nothing written) otherwise. The index's totals (``lexical_stats``) and postings
        (``lexical_postings``) change by exactly what the rows did, in the same transaction.

        A stored document of the same generation that is longer (written by a server that read
        further) stays. The terms become a tsvector with `array_to_tsvector`, with the index's
        own lexeme (`lexical_tag`): no text is parsed. Writers of one index take turns (an
        advisory lock, after the session row's key-share lock), so each edits the postings
        the previous one left.
        """
        _check_id(session_id, "session_id")
        s = self.s
        rows = yield _Sql(
            f"SELECT 1 FROM {s}.sessions WHERE session_id = %s AND generation IS NOT DISTINCT FROM %s "
            "FOR KEY SHARE",
            (session_id, generation),
        )
        if not rows:
            return False
        yield _Sql("SELECT pg_advisory_xact_lock(%s)", (_index_lock(s, session_id, kind),))
        # (doc id, length, old lexemes) of each row deleted; doc id -> length of each written.
        removed: list[tuple[Any, ...]] = []
        if deletes:
            removed += yield _Sql(
                f"DELETE FROM {s}.lexical_docs WHERE session_id = %s AND kind = %s "
                "AND doc_id = ANY(%s::bigint[]) RETURNING doc_id, length, tsvector_to_array(terms), repeats",
                (session_id, kind, list(deletes)),
            )
        written: dict[int, int] = {}
        todo = list(docs)
        first = True
        while todo:
            ids = [d[0] for d in todo]
            # Replaced rows go first, so the totals see their old length; a row another writer
            # holds is waited for, then judged as it is after that writer.
            gone = yield _Sql(
                f"""
                DELETE FROM {s}.lexical_docs AS known
                USING unnest(%s::bigint[], %s::integer[]) AS u(doc_id, size)
                WHERE known.session_id = %s AND known.kind = %s AND known.doc_id = u.doc_id
                  AND (known.generation IS DISTINCT FROM %s OR known.size <= u.size)
                RETURNING known.doc_id, known.length, tsvector_to_array(known.terms), known.repeats""",
                (ids, [d[2] for d in todo], session_id, kind, generation),
            )
            stored = yield _Sql(
                f"""
                INSERT INTO {s}.lexical_docs
                    (session_id, kind, doc_id, generation, digest, size, terms, length, repeats)
                SELECT %s, %s, u.doc_id, %s, u.digest, u.size,
                       array_to_tsvector(array_append(string_to_array(u.terms, E'\\x1f'), %s)),
                       u.length, u.repeats
                FROM unnest(%s::bigint[], %s::bytea[], %s::integer[], %s::text[], %s::integer[], %s::text[])
                     AS u(doc_id, digest, size, terms, length, repeats)
                ON CONFLICT (session_id, kind, doc_id) DO NOTHING
                RETURNING doc_id, length""",
                (
                    session_id,
                    kind,
                    generation,
                    lexical_tag(session_id, kind),
                    ids,
                    [d[1] for d in todo],
                    [d[2] for d in todo],
                    [d[3] for d in todo],
                    [d[4] for d in todo],
                    [d[5] for d in todo],
                ),
            )
            removed += gone
            written.update((int(r[0]), int(r[1])) for r in stored)
            # Not stored: a row this statement could not see yet (another writer's, now
            # committed) is judged once more; a row kept as longer stays.
            deleted = {int(r[0]) for r in gone}
            todo = [d for d in todo if d[0] not in written and (first or d[0] in deleted)]
            first = False
        documents = len(written) - len(removed)
        length = sum(written.values()) - sum(int(r[1]) for r in removed)
        if written or removed:
            yield _Sql(
                f"""
                INSERT INTO {s}.lexical_stats AS known (session_id, kind, documents, total_length)
                VALUES (%s, %s, %s, %s)
                ON CONFLICT (session_id, kind) DO UPDATE SET
                    documents = known.documents + EXCLUDED.documents,
                    total_length = known.total_length + EXCLUDED.total_length""",
                (session_id, kind, documents, length),
            )
            new_docs = {d[0]: d for d in docs if d[0] in written}
            yield from self._edit_postings(session_id, kind, generation, removed, new_docs, written)
        return True

    def _edit_postings(
        self,
        session_id: str,
        kind: str,
        generation: str | None,
        removed: Sequence[tuple[Any, ...]],
        docs: dict[int, tuple[int, bytes, int, str, int, str | None]],
        lengths: dict[int, int],
    ) -> _Operation[None]:
        """Take the `removed` rows (doc id, length, lexemes, repeats) out of their terms'
        postings and add the `docs` written: only the (term, block) rows they touch are read
        and written. A row of another generation is stale: it starts empty."""
        s = self.s
        gone: dict[tuple[str, int], set[int]] = {}
        for row in removed:
            doc = int(row[0])
            for term in document_terms(row[2], row[3]):
                gone.setdefault((term, doc >> POSTINGS_BLOCK_BITS), set()).add(doc)
        added: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        for doc, entry in docs.items():
            for term, count in document_terms(entry[3].split(SEPARATOR), entry[5]).items():
                added.setdefault((term, doc >> POSTINGS_BLOCK_BITS), []).append((doc, count, lengths[doc]))
        keys = sorted(set(gone) | set(added))
        if not keys:
            return
        # By the primary key: the terms, and the span of blocks (a flush's documents are mostly
        # consecutive seqs), filtered here. A join with the wanted (term, block) pairs was planned
        # as a scan of the session's rows, which grew with every flush.
        rows = yield _Sql(
            f"""
            SELECT p.term, p.block, p.postings FROM {s}.lexical_postings AS p
            WHERE p.session_id = %s AND p.kind = %s AND p.term = ANY(%s::text[])
              AND p.block BETWEEN %s AND %s AND p.generation IS NOT DISTINCT FROM %s""",
            (
                session_id,
                kind,
                sorted({k[0] for k in keys}),
                min(k[1] for k in keys),
                max(k[1] for k in keys),
                generation,
            ),
        )
        wanted = set(keys)
        current = {key: bytes(r[2]) for r in rows if (key := (str(r[0]), int(r[1]))) in wanted}
        writes: list[tuple[str, int, bytes]] = []
        empty: list[tuple[str, int]] = []
        for key in keys:
            out = set(gone.get(key, ())) | {doc for doc, _, _ in added.get(key, ())}
            kept = [e for e in decode_postings(current[key]) if e[0] not in out] if key in current else []
            entries = sorted(kept + added.get(key, []))
            if entries:
                writes.append((key[0], key[1], encode_postings(entries)))
            else:
                empty.append(key)
        if writes:
            yield _Sql(
                f"""
                INSERT INTO {s}.lexical_postings AS known (session_id, kind, term, block, generation, postings)
                SELECT %s, %s, u.term, u.block, %s, u.postings
                FROM unnest(%s::text[], %s::bigint[], %s::bytea[]) AS u(term, block, postings)
                ON CONFLICT (session_id, kind, term, block) DO UPDATE SET
                    generation = EXCLUDED.generation, postings = EXCLUDED.postings""",
                (
                    session_id,
                    kind,
                    generation,
                    [w[0] for w in writes],
                    [w[1] for w in writes],
                    [w[2] for w in writes],
                ),
            )
        if empty:
            yield _Sql(
                f"""
                DELETE FROM {s}.lexical_postings AS p USING unnest(%s::text[], %s::bigint[]) AS k(term, block)
                WHERE p.session_id = %s AND p.kind = %s AND p.term = k.term AND p.block = k.block""",
                ([k[0] for k in empty], [k[1] for k in empty], session_id, kind),
            )

    def lexical_matches(self, session_id: str, kind: str, terms: Sequence[str]) -> _Operation[LexicalMatches]:
        """The index's totals and the posting blocks of `terms` in the session's `kind`
        documents of its current generation (see `LexicalMatches`), in one query."""
        _check_id(session_id, "session_id")
        if not terms:
            raise ValueError("lexical_matches needs at least one term")
        s = self.s
        rows = yield _Sql(
            f"""
            SELECT st.documents, st.total_length, p.term, p.postings
            FROM {s}.sessions AS s
            JOIN {s}.lexical_stats AS st ON st.session_id = s.session_id AND st.kind = %s
            LEFT JOIN {s}.lexical_postings AS p
              ON p.session_id = s.session_id AND p.kind = st.kind AND p.generation = s.generation
             AND p.term = ANY(%s::text[])
            WHERE s.session_id = %s""",
            (kind, list(terms), session_id),
        )
        if not rows:
            return LexicalMatches(0, 0, {})
        postings: dict[str, list[bytes]] = {}
        for row in rows:
            if row[2] is not None:
                postings.setdefault(str(row[2]), []).append(bytes(row[3]))
        return LexicalMatches(int(rows[0][0]), int(rows[0][1]), postings)

    # -- listing, deleting, retention ---------------------------------------------------------

    def clear(self, session_id: str) -> _Operation[None]:
        _check_id(session_id, "session_id")
        yield _Sql(f"DELETE FROM {self.s}.sessions WHERE session_id = %s", (session_id,))

    def sessions(self, user_id: str | None) -> _Operation[list[str]]:
        if user_id is None:
            rows = yield _Sql(f"SELECT session_id FROM {self.s}.sessions ORDER BY session_id")
        else:
            _check_id(user_id, "user_id")
            rows = yield _Sql(
                f"SELECT session_id FROM {self.s}.sessions WHERE user_id = %s ORDER BY session_id", (user_id,)
            )
        return [row[0] for row in rows]

    def forget_user(self, user_id: str) -> _Operation[list[str]]:
        _check_id(user_id, "user_id")
        s = self.s
        # Locked in id order, so two sweeps over overlapping sessions never deadlock.
        rows = yield _Sql(
            f"""
            DELETE FROM {s}.sessions WHERE session_id IN (
                SELECT session_id FROM {s}.sessions WHERE user_id = %s ORDER BY session_id FOR UPDATE
            ) RETURNING session_id""",
            (user_id,),
        )
        return sorted(row[0] for row in rows)

    def expire_idle(self, older_than_seconds: float) -> _Operation[list[str]]:
        idle_cutoff(older_than_seconds, 0.0)  # a bad age is refused before any I/O
        if math.isinf(older_than_seconds):
            return []
        (now,) = (yield _Sql(f"SELECT {_NOW}"))[0]
        cutoff = idle_cutoff(older_than_seconds, float(now))
        s = self.s
        deleted: list[str] = []
        while True:
            # A locked session is being written right now, so it is not idle: skip it. The
            # lock re-checks updated_at, so a session touched meanwhile is skipped too.
            rows = yield _Sql(
                f"""
                DELETE FROM {s}.sessions WHERE session_id IN (
                    SELECT session_id FROM {s}.sessions WHERE updated_at < %s
                    ORDER BY session_id LIMIT %s FOR UPDATE SKIP LOCKED
                ) RETURNING session_id""",
                (cutoff, _SWEEP_BATCH),
            )
            deleted.extend(row[0] for row in rows)
            if len(rows) < _SWEEP_BATCH:
                return sorted(deleted)

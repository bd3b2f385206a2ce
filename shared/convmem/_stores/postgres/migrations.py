"""The tables of a `PostgresStore`, built by numbered migrations.

Tables (in their own schema, ``convmem`` by default)::

    schema_version  one row per applied migration (version, description, applied_at)
    sessions        session_id, user_id, created_at, updated_at, last_seq, message_count, total_tokens,
                    generation (migration 3)
    messages        (session_id, seq) -> role, content, name, tool_calls, tool_call_id, metadata,
                    status, ts, token_count, reply_to_seq; a foreign key to sessions, ON DELETE CASCADE
    state           (session_id, key) -> value, version, updated_at; likewise
    vectors         (session_id, model, unit_id) -> generation, dimension, vector (float32 bytes),
                    written (migration 4); likewise, and emptied when the log's generation changes
    recall_*        recall's keyword index of each user's history (migration 8, replacing the
                    per-session lexical_docs, lexical_stats and lexical_postings of migrations 5 to
                    7): recall_histories (number -> owner, next_slot), recall_index_sessions
                    (session_id -> history, slot, generation, cursor; goes with its session, and
                    takes the session's rows with it), recall_units ((history, key) -> what ranking
                    reads of a message), recall_postings ((history, term, kind, key) -> count,
                    length); see `convmem._stores.postgres.lexical`

The store creates and migrates its schema itself when it opens: each
migration runs in one transaction under an advisory lock, so many servers
starting at once apply it exactly once, and a database written by a newer
convmem is refused rather than misread. New columns and tables come as new
migrations; nothing here assumes the tables have only today's columns.
"""

from __future__ import annotations

import hashlib
import re

from ..._errors import StoreError
from ..._recall.index_rows import first_number_of_a_remade_history_table
from .sql import SchemaSql, _Operation, _Sql

__all__ = ["RECALL_TABLES", "SCHEMA_VERSION", "migrate", "remake_recall_tables"]

# Frozen with migrations 6 and 7 (their tables went with migration 8): the lexeme that marked
# one session's documents, and the documents per row of lexical_postings.
_LEXICAL_TAG_SQL = "' ' || md5(kind || ' ' || session_id)"
POSTINGS_BLOCK_BITS = 8

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
    (
        8,
        "recall's keyword index of each user's history; the per-session keyword index goes",
        (
            "DROP TABLE IF EXISTS {s}.lexical_postings",
            "DROP TABLE IF EXISTS {s}.lexical_stats",
            "DROP TABLE IF EXISTS {s}.lexical_docs",
            """CREATE TABLE {s}.recall_histories (
                number    bigserial PRIMARY KEY,
                owner     text COLLATE "C" NOT NULL UNIQUE,
                next_slot bigint NOT NULL DEFAULT 0
            )""",
            """CREATE TABLE {s}.recall_index_sessions (
                session_id text COLLATE "C" PRIMARY KEY
                           REFERENCES {s}.sessions (session_id) ON DELETE CASCADE,
                history    bigint NOT NULL,
                slot       bigint NOT NULL,
                generation text,
                cursor     text NOT NULL
            )""",
            "CREATE INDEX recall_index_sessions_by_slot ON {s}.recall_index_sessions (history, slot)",
            """CREATE TABLE {s}.recall_units (
                history   bigint NOT NULL,
                key       bigint NOT NULL,
                ts        double precision NOT NULL,
                episode   bigint NOT NULL,
                exchange  bigint NOT NULL,
                place     bigint NOT NULL,
                from_user boolean NOT NULL,
                name      text,
                candidate boolean NOT NULL,
                long      boolean NOT NULL,
                last      bigint NOT NULL,
                PRIMARY KEY (history, key)
            )""",
            """CREATE TABLE {s}.recall_postings (
                history bigint NOT NULL,
                term    text COLLATE "C" NOT NULL,
                kind    smallint NOT NULL,
                key     bigint NOT NULL,
                count   integer NOT NULL,
                length  integer NOT NULL,
                PRIMARY KEY (history, term, kind, key)
            )""",
            "CREATE INDEX recall_postings_by_key ON {s}.recall_postings (history, key)",
            # A session's rows go with its index row, however that goes (the session's delete
            # cascades to it); a history left without sessions goes too: its owner names a user.
            """CREATE FUNCTION {s}.recall_index_session_gone() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                DELETE FROM {s}.recall_units WHERE history = OLD.history
                    AND key BETWEEN OLD.slot << 40 AND ((OLD.slot + 1) << 40) - 1;
                DELETE FROM {s}.recall_postings WHERE history = OLD.history
                    AND key BETWEEN OLD.slot << 40 AND ((OLD.slot + 1) << 40) - 1;
                DELETE FROM {s}.recall_histories AS h WHERE h.number = OLD.history
                    AND NOT EXISTS (SELECT 1 FROM {s}.recall_index_sessions AS r WHERE r.history = OLD.history);
                RETURN OLD;
            END $$""",
            "CREATE TRIGGER recall_index_session_gone AFTER DELETE ON {s}.recall_index_sessions "
            "FOR EACH ROW EXECUTE FUNCTION {s}.recall_index_session_gone()",
        ),
    ),
)
SCHEMA_VERSION = _MIGRATIONS[-1][0]


def migrate(schema: SchemaSql) -> _Operation[int]:
    """Bring `schema` up to `SCHEMA_VERSION`; run in one transaction."""
    s = schema.s
    lock_key = _lock_key(schema)
    (exists,) = (yield _Sql("SELECT to_regclass(%s) IS NOT NULL", (f"{s}.schema_version",)))[0]
    if exists:
        current = yield from _version(schema)
        if current >= SCHEMA_VERSION:
            return current
    yield _Sql("SELECT pg_advisory_xact_lock(%s)", (lock_key,))
    yield _Sql(f"CREATE SCHEMA IF NOT EXISTS {s}")
    yield _Sql(
        f"CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer PRIMARY KEY, "
        "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    current = yield from _version(schema)  # again, under the lock: another server may have migrated
    for version, description, statements in _MIGRATIONS:
        if version > current:
            for statement in statements:
                yield _Sql(statement.format(s=s))
            yield _Sql(
                f"INSERT INTO {s}.schema_version (version, description) VALUES (%s, %s)",
                (version, description),
            )
    return SCHEMA_VERSION


RECALL_TABLES = ("recall_histories", "recall_index_sessions", "recall_units", "recall_postings")


def _recall_statements() -> list[str]:
    """Migration 8's statements for recall's tables, each safe to run when its object is
    there: what makes a dropped table again as that migration made it. (A later migration
    that changes these tables changes what they are made as here.)"""
    (statements,) = [statements for version, _, statements in _MIGRATIONS if version == 8]
    made = []
    for statement in statements:
        if statement.startswith("DROP TABLE"):
            continue  # the per-session tables that migration 8 replaced
        trigger = re.match(r"CREATE TRIGGER (\w+) AFTER DELETE ON (\S+) ", statement)
        if trigger:
            made.append(f"DROP TRIGGER IF EXISTS {trigger[1]} ON {trigger[2]}")
        made.append(
            statement.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1)
            .replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1)
            .replace("CREATE FUNCTION ", "CREATE OR REPLACE FUNCTION ", 1)
        )
    return made


def remake_recall_tables(schema: SchemaSql) -> _Operation[list[str]]:
    """Make again recall's tables that are missing (dropped by hand), as migration 8 made
    them, and return their names; run in one transaction. When some were left, their rows
    go too: they no longer agree with the ones made empty (history numbers start again), so
    recall indexes each session again from its log. Nothing of the logs is touched."""
    s = schema.s
    yield _Sql("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
    present = []
    for table in RECALL_TABLES:
        (exists,) = (yield _Sql("SELECT to_regclass(%s) IS NOT NULL", (f"{s}.{table}",)))[0]
        if exists:
            present.append(table)
    made = [table for table in RECALL_TABLES if table not in present]
    if not made:
        return []  # another server made them meanwhile
    for statement in _recall_statements():
        yield _Sql(statement.format(s=s))
    if present:
        yield _Sql(f"TRUNCATE {', '.join(f'{s}.{table}' for table in present)}")
    if "recall_histories" in made:
        yield _Sql(
            "SELECT setval(pg_get_serial_sequence(%s, 'number'), %s)",
            (f"{s}.recall_histories", first_number_of_a_remade_history_table()),
        )
    return made


def _lock_key(schema: SchemaSql) -> int:
    """One 64-bit key per schema, the same in every process: its migrations (and repairs)
    never run side by side."""
    return int.from_bytes(
        hashlib.sha256(f"convmem:{schema.schema}".encode()).digest()[:8], "big", signed=True
    )


def _version(schema: SchemaSql) -> _Operation[int]:
    (current,) = (yield _Sql(f"SELECT coalesce(max(version), 0) FROM {schema.s}.schema_version"))[0]
    if current > SCHEMA_VERSION:
        raise StoreError(
            f"schema {schema.schema!r} was written by a newer convmem (schema version {current} > "
            f"{SCHEMA_VERSION}); upgrade convmem to use it"
        )
    return int(current)

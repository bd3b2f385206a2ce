"""The SQL of every `PostgresStore` operation (`_Queries`), with the decoding of rows into
messages, stats and state records: everything but the I/O.

Appends are one statement: an upsert of the session row, which takes that
row's lock and advances ``last_seq``, feeding the insert of the messages. Any
number of writers on any number of servers therefore get gapless,
never-repeated seqs per session, and a failed append stores nothing. Every
write that touches several rows locks the session row first, so writers never
wait on each other in opposite orders; a deadlock or serialization failure
reported by the server (which rolls the whole write back) is retried.

An operation is a generator of statements (`_Sql`); `PostgresStore` and
`AsyncPostgresStore` only run them. The tables are built by
`convmem._stores.postgres.migrations`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from ..._errors import InvalidMessageError, StoreError
from ..._models import Message, TurnStatus
from ..base import (
    MAX_SEQ,
    SessionSnapshot,
    SessionStats,
    StateRecord,
    check_owner,
    check_seq,
    idle_cutoff,
    missing_seqs_error,
    new_generation,
    readable_seqs,
    seq_bound,
    validate_messages,
    validate_seqs,
)
from ..capabilities import LogRead
from ..codec import message_from_record
from .lexical_queries import LexicalQueries
from .migrations import migrate, remake_recall_tables
from .sql import _COLUMNS, _NOW, _check_id, _check_text, _Operation, _RollBack, _row_values, _Sql
from .vector_queries import VectorQueries

# Sessions whose logs `read_logs` reads in one statement (what one reply holds stays bounded).
LOGS_PER_STATEMENT = 64
# Sessions deleted per statement by expire_idle: one sweep never holds many row locks at once.
_SWEEP_BATCH = 500

# A session row's columns that make its `SessionStats`, in `_stats_of`'s order.
_STATS_COLUMNS = "message_count, last_seq, total_tokens, user_id, created_at, updated_at, generation"
_KNOWN_STATS = ", ".join(f"known.{column}" for column in _STATS_COLUMNS.split(", "))
"""`_STATS_COLUMNS` of the ``sessions`` row joined as ``known``."""


def _stats_of(session_id: str, row: Sequence[Any] | None) -> SessionStats:
    """The `SessionStats` of a session row's `_STATS_COLUMNS` (None: no row, no messages)."""
    if row is None:
        return SessionStats(session_id, 0, 0, 0)
    count, last_seq, tokens, user_id, created, updated, generation = row
    return SessionStats(
        session_id, int(count), int(last_seq), int(tokens), user_id, created, updated, generation
    )


class _Queries(VectorQueries, LexicalQueries):
    """The SQL of every operation for one schema, and the decoding of its rows: everything but the I/O."""

    def __init__(self, schema: str) -> None:
        super().__init__(schema)
        s = self.s
        columns = ", ".join(_COLUMNS)
        self.select_messages = f"SELECT {columns} FROM {s}.messages WHERE session_id = %s"
        self.select_logs = f"SELECT session_id, {columns} FROM {s}.messages WHERE session_id = ANY(%s) ORDER BY session_id, seq"
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

    def migrate(self) -> _Operation[int]:
        """Bring the schema up to date (see `convmem._stores.postgres.migrations`); run in one transaction."""
        return migrate(self)

    def remake_recall_tables(self) -> _Operation[list[str]]:
        """Make recall's missing tables again (see `migrations.remake_recall_tables`); one transaction."""
        return remake_recall_tables(self)

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
        upper = MAX_SEQ if through_seq is None else seq_bound(through_seq)
        rows = yield _Sql(
            f"{self.select_messages} AND seq > %s AND seq <= %s ORDER BY seq",
            (session_id, seq_bound(after_seq), upper),
        )
        return self._decode(rows, session_id)

    def tail(self, session_id: str, limit: int, before_seq: int | None) -> _Operation[list[Message]]:
        _check_id(session_id, "session_id")
        if limit <= 0:
            return []
        upper = MAX_SEQ + 1 if before_seq is None else seq_bound(before_seq)
        rows = yield _Sql(
            f"{self.select_messages} AND seq < %s ORDER BY seq DESC LIMIT %s", (session_id, upper, int(limit))
        )
        rows.reverse()
        return self._decode(rows, session_id)

    def get(self, session_id: str, seqs: Sequence[int]) -> _Operation[list[Message]]:
        _check_id(session_id, "session_id")
        wanted = readable_seqs(seqs)
        if not wanted:
            return []
        rows = yield _Sql(
            f"{self.select_messages} AND seq = ANY(%s::bigint[]) ORDER BY seq", (session_id, wanted)
        )
        return self._decode(rows, session_id)

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> _Operation[Message]:
        _check_id(session_id, "session_id")
        check_seq(seq)
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

    def read_logs(self, session_ids: Sequence[str]) -> _Operation[dict[str, LogRead]]:
        """Each session's stats, whole log and stats again: three statements per
        `LOGS_PER_STATEMENT` sessions, whatever their number of messages."""
        ids = list(dict.fromkeys(session_ids))
        for session_id in ids:
            _check_id(session_id, "session_id")
        stats_sql = f"SELECT session_id, {_STATS_COLUMNS} FROM {self.s}.sessions WHERE session_id = ANY(%s)"
        found = {}
        for start in range(0, len(ids), LOGS_PER_STATEMENT):
            chunk = ids[start : start + LOGS_PER_STATEMENT]
            before = {row[0]: row[1:] for row in (yield _Sql(stats_sql, (chunk,)))}
            logs: dict[str, list[tuple[Any, ...]]] = {session_id: [] for session_id in chunk}
            for row in (yield _Sql(self.select_logs, (chunk,))):
                logs[row[0]].append(row[1:])
            after = {row[0]: row[1:] for row in (yield _Sql(stats_sql, (chunk,)))}
            for session_id in chunk:
                found[session_id] = LogRead(
                    _stats_of(session_id, before.get(session_id)),
                    self._decode(logs[session_id], session_id),
                    _stats_of(session_id, after.get(session_id)),
                )
        return found

    def stats(self, session_id: str) -> _Operation[SessionStats]:
        _check_id(session_id, "session_id")
        rows = yield _Sql(
            f"SELECT {_STATS_COLUMNS} FROM {self.s}.sessions WHERE session_id = %s", (session_id,)
        )
        return _stats_of(session_id, rows[0] if rows else None)

    def _asked_session_sql(self) -> str:
        """FROM the session asked for (parameter 1, whether it exists or not), its `sessions`
        row as ``known`` and its `state` rows of the keys asked for (parameter 2) as ``st``."""
        s = self.s
        return (
            f"FROM (SELECT %s::text AS session_id) AS asked "
            f"LEFT JOIN {s}.sessions AS known ON known.session_id = asked.session_id "
            f"LEFT JOIN {s}.state AS st ON st.session_id = asked.session_id AND st.key = ANY(%s::text[])"
        )

    def read_session(self, session_id: str, keys: Sequence[str]) -> _Operation[SessionSnapshot]:
        """Stats and state records in one statement (a row per record found, or one row)."""
        _check_id(session_id, "session_id")
        wanted = list(dict.fromkeys(keys))
        for key in wanted:
            _check_text(key, "a state key")
        rows = yield _Sql(
            f"SELECT {_KNOWN_STATS}, st.key, st.value, st.version {self._asked_session_sql()}",
            (session_id, wanted),
        )
        stats = _stats_of(session_id, rows[0][:7] if rows[0][0] is not None else None)
        states = {row[7]: StateRecord(row[8], int(row[9])) for row in rows if row[7] is not None}
        return SessionSnapshot(stats, states)

    def read_user_scope(
        self, session_id: str, keys: Sequence[str], user_id: str, user_key: str
    ) -> _Operation[SessionSnapshot]:
        """`read_session`, `user_session_stats` and the user's `get_states` of `user_key` in one
        statement: the session's rows first (as `read_session`'s, `user_key` asked too), then
        a row per session of the user with its `user_key` record, if any."""
        _check_id(session_id, "session_id")
        _check_id(user_id, "user_id")
        wanted = list(dict.fromkeys(keys))
        for key in [*wanted, user_key]:
            _check_text(key, "a state key")
        s = self.s
        rows = yield _Sql(
            f"SELECT 0 AS part, asked.session_id, {_KNOWN_STATS}, st.key, st.value, st.version "
            f"{self._asked_session_sql()} "
            f"UNION ALL "
            f"SELECT 1, known.session_id, {_KNOWN_STATS}, st.key, st.value, st.version "
            f"FROM {s}.sessions AS known "
            f"LEFT JOIN {s}.state AS st ON st.session_id = known.session_id AND st.key = %s "
            f"WHERE known.user_id = %s ORDER BY 1, 2",
            (session_id, [*wanted, user_key], user_key, user_id),
        )
        first = rows[0]
        stats = _stats_of(session_id, first[2:9] if first[2] is not None else None)
        states: dict[str, StateRecord] = {}
        user_states: dict[str, StateRecord] = {}
        sessions = []
        for row in rows:
            record = StateRecord(row[10], int(row[11])) if row[9] is not None else None
            if row[0] == 1:
                sessions.append(_stats_of(row[1], row[2:9]))
                if record is not None:
                    user_states[row[1]] = record
            elif record is not None:
                if row[9] in wanted:
                    states[row[9]] = record
                if row[9] == user_key:
                    user_states[session_id] = record
        return SessionSnapshot(stats, states, sessions, user_states)

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
        # Likewise the keyword index: recall indexes the session again from the new log.
        yield from self.reset_history_rows(session_id)
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

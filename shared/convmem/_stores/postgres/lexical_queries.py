"""The SQL of recall's keyword index of each user's history in PostgreSQL (``recall_*``,
migration 8), for `PostgresHistoryTables`.

A session's rows are one range of keys in its history (``slot << 40 | ...``, see
`convmem._recall.index_rows`); they go with the session's index row (a trigger), which
goes with the session, and the calls that delete or replace messages reset them in
their own transaction (`reset_history_rows`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ..._recall.index_rows import (
    EXCHANGE_KIND,
    KEY_SHIFT,
    PASSAGE_KIND,
    IndexBatch,
    IndexedHistory,
    IndexedSession,
)
from .sql import SchemaSql, _check_id, _Operation, _Sql

_UNIT_SELECT = "{u}.key, {u}.ts, {u}.episode, {u}.exchange, {u}.place, {u}.from_user, {u}.name, {u}.candidate, {u}.long, {u}.last"
_SLOT_RANGE = "BETWEEN {r}.slot << 40 AND (({r}.slot + 1) << 40) - 1"


def _writer_lock(schema: str, session_id: str) -> int:
    """The advisory lock key the writers of one session's rows take turns on."""
    digest = hashlib.blake2b(f"{schema}\x00recall\x00{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class LexicalQueries(SchemaSql):
    """Reads and writes of the history index's tables."""

    def reset_history_rows(self, session_id: str) -> _Operation[None]:
        """In the transaction that deletes or replaces messages: the session's rows go and its
        index row says it needs indexing again (recall does so from the new log)."""
        s = self.s
        for table in ("recall_units", "recall_postings"):
            yield _Sql(
                f"DELETE FROM {s}.{table} AS t USING {s}.recall_index_sessions AS r "
                f"WHERE r.session_id = %s AND t.history = r.history AND t.key {_SLOT_RANGE.format(r='r')}",
                (session_id,),
            )
        yield _Sql(
            f"UPDATE {s}.recall_index_sessions SET generation = NULL, cursor = '' WHERE session_id = %s",
            (session_id,),
        )

    def history_indexed(self, owner: str) -> _Operation[IndexedHistory]:
        s = self.s
        rows = yield _Sql(
            f"SELECT h.number, r.session_id, r.slot, r.generation, r.cursor FROM {s}.recall_histories AS h "
            f"LEFT JOIN {s}.recall_index_sessions AS r ON r.history = h.number WHERE h.owner = %s",
            (owner,),
        )
        return IndexedHistory.from_rows(owner, rows)

    def history_session(self, session_id: str) -> _Operation[IndexedSession | None]:
        _check_id(session_id, "session_id")
        s = self.s
        rows = yield _Sql(
            f"SELECT h.owner, r.slot, r.generation, r.cursor FROM {s}.recall_index_sessions AS r "
            f"JOIN {s}.recall_histories AS h ON h.number = r.history WHERE r.session_id = %s",
            (session_id,),
        )
        if not rows:
            return None
        owner, slot, generation, cursor = rows[0]
        return IndexedSession(session_id, owner, int(slot), generation, cursor)

    def history_postings(self, history: int, terms: Sequence[str]) -> _Operation[list[tuple[Any, ...]]]:
        rows = yield _Sql(
            f"SELECT kind, term, key, count, length FROM {self.s}.recall_postings "
            "WHERE history = %s AND term = ANY(%s::text[])",
            (history, list(terms)),
        )
        return list(rows)

    def history_units(
        self, history: int, keys: Sequence[int], exchanges: Sequence[int]
    ) -> _Operation[list[tuple[Any, ...]]]:
        s = self.s
        # One statement for both: a row may come twice (a key that is also an exchange's
        # member), the same row, since both parts read one snapshot.
        parts: list[str] = []
        params: list[Any] = []
        if keys:
            parts.append(
                f"SELECT {_UNIT_SELECT.format(u='u')} FROM {s}.recall_units AS u "
                "WHERE u.history = %s AND u.key = ANY(%s::bigint[])"
            )
            params += [history, list(keys)]
        if exchanges:
            # An exchange's members are the rows from its first message's key to its last's.
            parts.append(
                f"SELECT {_UNIT_SELECT.format(u='u')} FROM {s}.recall_units AS head "
                f"JOIN {s}.recall_units AS u ON u.history = head.history "
                "AND u.key BETWEEN head.key AND head.key + head.last - head.exchange "
                "WHERE head.history = %s AND head.key = ANY(%s::bigint[])"
            )
            params += [history, list(exchanges)]
        if not parts:
            return []
        rows = yield _Sql(" UNION ALL ".join(parts), tuple(params))
        return list(rows)

    def history_messages(
        self, history: int, keys: Sequence[int], columns: Sequence[str]
    ) -> _Operation[list[tuple[Any, ...]]]:
        s = self.s
        mask = (1 << KEY_SHIFT) - 1
        rows = yield _Sql(
            f"SELECT w.slot, r.session_id, {', '.join('m.' + c for c in columns)} "
            "FROM unnest(%s::bigint[], %s::bigint[]) AS w(slot, seq) "
            f"JOIN {s}.recall_index_sessions AS r ON r.history = %s AND r.slot = w.slot "
            f"JOIN {s}.messages AS m ON m.session_id = r.session_id AND m.seq = w.seq",
            ([key >> KEY_SHIFT for key in keys], [key & mask for key in keys], history),
        )
        return list(rows)

    def history_write(
        self, owner: str, batch: IndexBatch, expected: IndexedSession | None
    ) -> _Operation[bool]:
        """Run in a transaction: see `HistoryTables.write`."""
        _check_id(batch.session_id, "session_id")
        s = self.s
        # Edits of the log lock the session row FOR UPDATE: while this holds it, none lands.
        log = yield _Sql(
            f"SELECT generation FROM {s}.sessions WHERE session_id = %s FOR KEY SHARE", (batch.session_id,)
        )
        if not log or log[0][0] != batch.generation:
            return False
        yield _Sql("SELECT pg_advisory_xact_lock(%s)", (_writer_lock(self.schema, batch.session_id),))
        rows = yield _Sql(
            f"SELECT r.history, r.slot, r.generation, r.cursor, h.owner FROM {s}.recall_index_sessions AS r "
            f"JOIN {s}.recall_histories AS h ON h.number = r.history WHERE r.session_id = %s",
            (batch.session_id,),
        )
        current = rows[0] if rows else None
        seen = (
            None
            if expected is None
            else (expected.owner, expected.slot, expected.generation, expected.cursor)
        )
        if (None if current is None else (current[4], int(current[1]), current[2], current[3])) != seen:
            return False  # another server indexed the session meanwhile
        ((number,),) = yield _Sql(
            f"INSERT INTO {s}.recall_histories (owner) VALUES (%s) "
            "ON CONFLICT (owner) DO UPDATE SET owner = EXCLUDED.owner RETURNING number",
            (owner,),
        )
        if batch.reset or current is None or int(current[0]) != number:
            if current is not None:
                yield from self._drop_slot(int(current[0]), int(current[1]))
            ((slot,),) = yield _Sql(
                f"UPDATE {s}.recall_histories SET next_slot = next_slot + 1 WHERE number = %s "
                "RETURNING next_slot - 1",
                (number,),
            )
        else:
            slot = int(current[1])
        base = int(slot) << KEY_SHIFT
        units = batch.units
        if units:
            yield _Sql(
                f"""INSERT INTO {s}.recall_units
                    (history, key, ts, episode, exchange, place, from_user, name, candidate, long, last)
                SELECT %s, u.* FROM unnest(%s::bigint[], %s::float8[], %s::bigint[], %s::bigint[], %s::bigint[],
                                           %s::boolean[], %s::text[], %s::boolean[], %s::boolean[], %s::bigint[])
                     AS u(key, ts, episode, exchange, place, from_user, name, candidate, long, last)
                ON CONFLICT (history, key) DO UPDATE SET ts = EXCLUDED.ts, episode = EXCLUDED.episode,
                    exchange = EXCLUDED.exchange, place = EXCLUDED.place, from_user = EXCLUDED.from_user,
                    name = EXCLUDED.name, candidate = EXCLUDED.candidate, long = EXCLUDED.long,
                    last = EXCLUDED.last""",
                (
                    number,
                    [base | u.seq for u in units],
                    [u.timestamp for u in units],
                    [u.episode for u in units],
                    [u.exchange for u in units],
                    [u.place for u in units],
                    [u.from_user for u in units],
                    [u.name for u in units],
                    [u.candidate for u in units],
                    [u.long for u in units],
                    [u.last for u in units],
                ),
            )
        if batch.grown:
            yield _Sql(
                f"UPDATE {s}.recall_units AS u SET last = g.last "
                "FROM unnest(%s::bigint[], %s::bigint[]) AS g(key, last) WHERE u.history = %s AND u.key = g.key",
                ([base | first for first in batch.grown], list(batch.grown.values()), number),
            )
        postings = [
            (term, PASSAGE_KIND, base | doc, count, length)
            for doc, counts, length in batch.passages
            for term, count in counts.items()
        ] + [
            (term, EXCHANGE_KIND, base | first, count, length)
            for first, counts, length, _ in batch.exchanges
            for term, count in counts.items()
        ]
        if postings:
            # A passage is written once; an exchange's counts add up as it gains messages.
            yield _Sql(
                f"""INSERT INTO {s}.recall_postings AS p (history, term, kind, key, count, length)
                SELECT %s, t.* FROM unnest(%s::text[], %s::smallint[], %s::bigint[], %s::integer[], %s::integer[])
                     AS t(term, kind, key, count, length)
                ON CONFLICT (history, term, kind, key) DO UPDATE SET
                    count = CASE WHEN p.kind = {EXCHANGE_KIND} THEN p.count + EXCLUDED.count ELSE EXCLUDED.count END,
                    length = EXCLUDED.length""",
                (number, *(list(column) for column in zip(*postings, strict=True))),
            )
        grown = [(base | first, length) for first, _, length, new in batch.exchanges if not new]
        if grown:
            yield _Sql(
                f"UPDATE {s}.recall_postings AS p SET length = g.length "
                "FROM unnest(%s::bigint[], %s::integer[]) AS g(key, length) "
                f"WHERE p.history = %s AND p.key = g.key AND p.kind = {EXCHANGE_KIND}",
                ([key for key, _ in grown], [length for _, length in grown], number),
            )
        yield _Sql(
            f"""INSERT INTO {s}.recall_index_sessions (session_id, history, slot, generation, cursor)
            VALUES (%s, %s, %s, %s, %s)
            ON CONFLICT (session_id) DO UPDATE SET history = EXCLUDED.history, slot = EXCLUDED.slot,
                generation = EXCLUDED.generation, cursor = EXCLUDED.cursor""",
            (batch.session_id, number, slot, batch.generation, batch.cursor.to_json()),
        )
        return True

    def _drop_slot(self, history: int, slot: int) -> _Operation[None]:
        low, high = slot << KEY_SHIFT, ((slot + 1) << KEY_SHIFT) - 1
        for table in ("recall_units", "recall_postings"):
            yield _Sql(
                f"DELETE FROM {self.s}.{table} WHERE history = %s AND key BETWEEN %s AND %s",
                (history, low, high),
            )

    def history_reset(self, session_id: str) -> _Operation[None]:
        _check_id(session_id, "session_id")
        yield from self.reset_history_rows(session_id)

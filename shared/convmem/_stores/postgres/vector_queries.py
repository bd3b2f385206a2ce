"""The SQL of recall vectors in PostgreSQL (the ``vectors`` table, migration 4), for
`PostgresVectorIndex`.

Vectors belong to one generation of a session's log. Deleting the session
(`clear`, `forget_user`, `expire_idle`) deletes them by the foreign key in the
same statement; deleting or replacing messages deletes them in the same
transaction that sets the new generation, and a vector is only written while
its session still has the generation it was computed for (a key-share lock on
the session row makes that check and the insert one step). Reads join on the
session's current generation, so a row of another generation is never returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .sql import SchemaSql, _check_id, _Operation, _Sql


class VectorQueries(SchemaSql):
    """Reads and writes of the ``vectors`` table."""

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

"""`PostgresVectorIndex`: recall vectors kept in PostgreSQL and searched in this process.

Embedding is the slow part of recall. With vectors only in this process (or in
FAISS files on this server's disk), a server that sees a session for the first
time embeds its whole log again. A `PostgresVectorIndex` writes every vector to
the store's ``vectors`` table (float32 bytes, keyed by session, model and unit),
so a new server reads them back once and embeds nothing it can read.

Search never goes to the database: the session's vectors are copied into this
process when the index is made (one query), kept as a unit-length float32
matrix, and searched by inner product (cosine) with numpy. Each search first
asks the table for the session's generation and the newest write number of its
vectors (one query, two index probes); when another server wrote vectors since,
only rows written after what this copy has read are fetched. The copy costs ``4 * dimension`` bytes per unit,
as a `FaissIndex` does, and lives as long as `Recall` mirrors the session
(``max_sessions`` bounds how many).

Vectors belong to one generation of the session's log (see `Store.stats`). The
store deletes them when the session is deleted (`clear`, `forget_user`,
`expire_idle`) or its log edited (`delete_messages`, `replace_message`); a write
only lands while the session is still at the generation this index follows, and
reads join on the session's current generation. `Recall` tells the index the
generation of the log it mirrors (`follow_generation`); the vectors it kept
across an edit (their text did not change) are then written again under the new
generation. A row of another model or dimension is never read; a damaged row
(wrong length, NaN, zero) is skipped with a warning, so recall embeds that unit
again and overwrites it.

Sync only: the `VectorIndex` protocol is called synchronously by `Recall`, so it
runs on a `PostgresStore`. An asyncio application gives its `Recall` the factory
of a `PostgresStore` on the same database and schema as its `AsyncPostgresStore`.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

import numpy as np

from ..._errors import ConfigError
from ..._recall.vector_rows import stored_vector, unit_ids, unit_rows
from ..base import validate_id
from .queries import _Queries
from .sql import _Operation


class _SyncPostgres(Protocol):
    """What the index needs of a `PostgresStore`: its queries and a way to run them
    (named here rather than imported: the store's module imports this one)."""

    _queries: _Queries

    def _run(self, make: Callable[[], _Operation[Any]], action: str, *, transaction: bool = False) -> Any: ...


__all__ = ["PostgresVectorIndex"]

logger = logging.getLogger("convmem")

_T = TypeVar("_T")

# Vectors per INSERT: a few MB of parameters at 384 dimensions, well under any server limit.
_WRITE_BATCH = 1000


class _Rows:
    """Unit vectors in one growable float32 matrix: adding one costs O(1) (amortised), removing
    one marks its row dead, and the matrix is compacted once a fifth of it is dead."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.clear()

    def clear(self) -> None:
        self.matrix = np.zeros((0, self.dimension), dtype=np.float32)
        self.units = np.zeros(0, dtype=np.int64)
        self.alive = np.zeros(0, dtype=bool)
        self.position: dict[int, int] = {}
        self.used = 0

    def __len__(self) -> int:
        return len(self.position)

    def put(self, unit: int, vector: np.ndarray) -> None:
        row = self.position.get(unit)
        if row is None:
            if self.used == len(self.matrix):
                self._resize(max(64, 2 * self.used))
            row = self.used
            self.used += 1
            self.units[row] = unit
            self.alive[row] = True
            self.position[unit] = row
        self.matrix[row] = vector

    def drop(self, unit: int) -> None:
        row = self.position.pop(unit, None)
        if row is not None:
            self.alive[row] = False
            if self.used - len(self.position) > max(64, self.used // 5):
                self._compact()

    def get(self, unit: int) -> np.ndarray:
        row: np.ndarray = self.matrix[self.position[unit]]
        return row

    def _resize(self, capacity: int) -> None:
        matrix = np.zeros((capacity, self.dimension), dtype=np.float32)
        units = np.zeros(capacity, dtype=np.int64)
        alive = np.zeros(capacity, dtype=bool)
        matrix[: self.used], units[: self.used], alive[: self.used] = (
            self.matrix[: self.used],
            self.units[: self.used],
            self.alive[: self.used],
        )
        self.matrix, self.units, self.alive = matrix, units, alive

    def _compact(self) -> None:
        keep = np.flatnonzero(self.alive[: self.used])
        self.matrix = np.ascontiguousarray(self.matrix[keep])
        self.units = self.units[keep]
        self.alive = np.ones(len(keep), dtype=bool)
        self.used = len(keep)
        self.position = {int(unit): row for row, unit in enumerate(self.units)}

    def scores(self, vector: np.ndarray, excluded: set[int]) -> np.ndarray:
        """Cosine similarity of every used row (``-inf`` for dead and excluded ones)."""
        # einsum runs in this thread; a BLAS matrix-vector product wakes a thread pool, which
        # costs more than it saves at this size and stalls on a busy machine.
        scores: np.ndarray = np.einsum("ij,j->i", self.matrix[: self.used], vector)
        if len(self.position) < self.used:
            scores[~self.alive[: self.used]] = -np.inf
        for unit in excluded:
            row = self.position.get(unit)
            if row is not None:
                scores[row] = -np.inf
        return scores


class PostgresVectorIndex:
    """One session's recall vectors in a `PostgresStore`, searched from a copy in this process.

    Made by `PostgresStore.vector_index_factory` for `Recall`; it follows the
    `VectorIndex` protocol (``add``, ``remove``, ``search``, ``vectors``, ``ids``,
    ``len``) and adds `clear`, `refresh` and `follow_generation`.

    Args:
        store: the `PostgresStore` whose ``vectors`` table holds the session's vectors.
        session_id: the session.
        dimension: the embedder's dimension.
        model: the embedder's name; vectors of another name (or dimension) are never read.

    Thread-safe: one lock per index serializes its calls.
    """

    def __init__(self, store: _SyncPostgres, *, session_id: str, dimension: int, model: str) -> None:
        validate_id(session_id)
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0:
            raise ConfigError(f"dimension must be a positive int, got {dimension!r}")
        if not isinstance(model, str) or not model or "\x00" in model:
            raise ConfigError(
                f"model must be the embedder's name (a non-empty string without NUL), got {model!r:.80}"
            )
        self._store = store
        self._queries = store._queries
        self._session_id = session_id
        self._dimension = dimension
        self._model = model
        self._lock = threading.RLock()
        self._rows = _Rows(dimension)
        # unit -> write number of the row this copy holds; units missing here are not in the table.
        self._written: dict[int, int] = {}
        self._generation: str | None = None
        # The highest write number of the table this copy has read up to.
        self._seen = 0
        self._load()

    def __repr__(self) -> str:
        return (
            f"PostgresVectorIndex(session_id={self._session_id!r}, model={self._model!r}, "
            f"dimension={self._dimension}, vectors={len(self)})"
        )

    # -- inspection --------------------------------------------------------------

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def model(self) -> str:
        return self._model

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def generation(self) -> str | None:
        """The log generation this index reads and writes (None before the session exists)."""
        return self._generation

    @property
    def kind(self) -> str:
        return "postgres"

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, unit_id: object) -> bool:
        return unit_id in self._rows.position

    def ids(self) -> set[int]:
        with self._lock:
            return set(self._rows.position)

    def bytes_per_vector(self) -> float:
        """The float32 vector in this process plus its id; the table holds as much again."""
        return float(4 * self._dimension + 8)

    # -- reading from the table -------------------------------------------------------

    def _run(self, make: Callable[[], _Operation[_T]], action: str) -> _T:
        result: _T = self._store._run(make, f"{action} of session {self._session_id!r:.80}")
        return result

    def _decode(self, unit: int, data: bytes) -> np.ndarray | None:
        vector = None
        if len(data) == 4 * self._dimension:
            vector = stored_vector(np.frombuffer(data, dtype="<f4"), self._dimension)
        if vector is None:
            logger.warning(
                "the stored vector of unit %d of session %r (model %r) is damaged (%d bytes, %d "
                "expected, or not finite); it is skipped and embedded again",
                unit,
                self._session_id,
                self._model,
                len(data),
                4 * self._dimension,
            )
        return vector

    def _adopt_rows(self, rows: list[tuple[int, int, bytes]]) -> None:
        for unit, written, data in rows:
            vector = self._decode(unit, data)
            if vector is not None:
                self._rows.put(unit, vector)
                self._written[unit] = written

    def _load(self) -> None:
        generation, rows = self._run(
            lambda: self._queries.vector_rows(self._session_id, self._model, self._dimension),
            "reading the vectors",
        )
        with self._lock:
            self._generation = generation
            self._rows.clear()
            self._written.clear()
            self._adopt_rows(rows)
            self._seen = max((written for _, written, _ in rows), default=0)

    def refresh(self) -> bool:
        """Read what other servers wrote since this copy last looked; True when anything was new.

        One small query (two index probes) when nothing was. Vectors written for
        another generation are left to `follow_generation`. A unit another server
        removed stays in this copy: within one generation a unit names fixed text, and
        `Recall` only serves units its mirror of the log still calls for.
        """
        with self._lock:
            generation, newest = self._run(
                lambda: self._queries.vector_marker(self._session_id, self._model), "checking the vectors"
            )
            if generation is None or generation != self._generation or newest <= self._seen:
                return False
            after = self._seen
            generation, rows = self._run(
                lambda: self._queries.vector_rows(self._session_id, self._model, self._dimension, after),
                "reading new vectors",
            )
            if generation != self._generation:
                return False
            fresh = [row for row in rows if self._written.get(row[0]) != row[1]]
            self._adopt_rows(fresh)
            self._seen = max([newest, *(written for _, written, _ in rows)])
            return bool(fresh)

    def stored(self, units: Iterable[int], generation: str) -> set[int]:
        """Which of `units` the table holds for the log `generation` (after a `refresh`)."""
        with self._lock:
            if generation != self._generation:
                return set()
            self.refresh()
            return {u for u in unit_ids(units) if u in self._written}

    # -- writing -----------------------------------------------------------------

    def add(self, ids: Iterable[int], vectors: np.ndarray) -> None:
        """Add vectors (normalized here) to this copy and the table; an id already present is replaced.

        The table takes them only while the session is at this index's generation;
        otherwise they serve this process until `follow_generation` writes what stays.
        """
        units = unit_ids(ids)
        matrix = (
            unit_rows(vectors, self._dimension, "vectors")
            if np.size(vectors)
            else np.zeros((0, self._dimension), dtype=np.float32)
        )
        if len(units) != len(matrix):
            raise ConfigError(f"add got {len(units)} ids for {len(matrix)} vectors")
        if not units:
            return
        if len(set(units)) != len(units):
            raise ConfigError("add got the same id twice in one call")
        with self._lock:
            if self._generation is None:
                # The session did not exist when this index was made: it may now.
                self._generation, _ = self._run(
                    lambda: self._queries.vector_marker(self._session_id, self._model),
                    "reading the generation",
                )
            for unit, row in zip(units, matrix, strict=True):
                self._rows.put(unit, row)
                self._written.pop(unit, None)
            self._write(units, matrix)

    def _write(self, units: list[int], matrix: np.ndarray) -> None:
        generation = self._generation
        if generation is None:
            return
        for start in range(0, len(units), _WRITE_BATCH):
            batch = units[start : start + _WRITE_BATCH]
            data = [matrix[i].astype("<f4").tobytes() for i in range(start, start + len(batch))]
            stored = self._run(
                functools.partial(
                    self._queries.write_vectors,
                    self._session_id,
                    self._model,
                    self._dimension,
                    generation,
                    batch,
                    data,
                ),
                "writing vectors",
            )
            self._written.update(stored)
            if len(stored) < len(batch):
                logger.debug(
                    "session %r is no longer at generation %s; %d vectors stay in this process only",
                    self._session_id,
                    generation,
                    len(batch) - len(stored),
                )
                return

    def remove(self, ids: Iterable[int]) -> None:
        """Remove ids from this copy and the table (unknown ones are ignored)."""
        units = list(dict.fromkeys(unit_ids(ids)))
        if not units:
            return
        with self._lock:
            self._run(
                lambda: self._queries.delete_vectors(self._session_id, self._model, units),
                "deleting vectors",
            )
            for unit in units:
                self._rows.drop(unit)
                self._written.pop(unit, None)

    def clear(self) -> None:
        """Delete every vector of the session, of every model and generation, here and in the table."""
        with self._lock:
            self._run(lambda: self._queries.delete_vectors(self._session_id, None, None), "deleting vectors")
            self._rows.clear()
            self._written.clear()

    def follow_generation(self, generation: str | None) -> None:
        """Serve the log `generation` from now on; `Recall` calls it once its mirror holds that log.

        Nothing happens when it is the generation already followed. Otherwise what this
        copy holds (what the mirror kept: units whose text did not change) is written
        under the new generation and rows of older ones are deleted.
        """
        with self._lock:
            if generation is None or generation == self._generation:
                return
            self._generation = generation
            self._written.clear()
            self._run(
                lambda: self._queries.delete_other_generations(self._session_id, self._model, generation),
                "deleting vectors of an older log",
            )
            if len(self._rows):
                units = list(self._rows.position)
                self._write(units, np.stack([self._rows.get(u) for u in units]))

    # -- reading -----------------------------------------------------------------

    def search(self, query: np.ndarray, k: int, *, exclude: Iterable[int] = ()) -> list[tuple[int, float]]:
        """The `k` nearest (id, cosine similarity) pairs, best first, skipping `exclude`.

        Reads what other servers added first (one small query when nothing was).
        """
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise ConfigError(f"k must be an int, got {k!r}")
        vector = unit_rows(query, self._dimension, "the query vector")[0]
        if k <= 0:
            return []
        excluded = set(unit_ids(exclude))
        with self._lock:
            self.refresh()
            scores = self._rows.scores(vector, excluded)
            units = self._rows.units
        if not len(scores):
            return []
        take = min(int(k), len(scores))
        best = np.argpartition(-scores, take - 1)[:take] if take < len(scores) else np.arange(len(scores))
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(int(units[i]), float(scores[i])) for i in best if np.isfinite(scores[i])]

    def vectors(self, ids: Iterable[int]) -> dict[int, np.ndarray]:
        """The stored (normalized) vectors of the ids that are present."""
        units = unit_ids(ids)
        with self._lock:
            return {u: self._rows.get(u).copy() for u in units if u in self._rows.position}

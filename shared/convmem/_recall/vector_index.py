"""Vector indexes for recall: the `VectorIndex` protocol and a FAISS implementation.

One index holds one session's vectors, keyed by int64 unit ids (derived from
message seqs by the recall engine). Similarity is the inner product of unit
vectors, i.e. cosine similarity.

`FaissIndex` starts exact (``IndexIDMap2`` over ``IndexFlatIP``) and switches
to HNSW (``IndexIDMap2`` over ``IndexHNSWFlat``) once it holds more than
``hnsw_threshold`` vectors. HNSW graphs cannot delete a node (FAISS raises on
``remove_ids``), so a removal there becomes a tombstone: the id is hidden
from every search by an ``IDSelector`` and the graph is rebuilt from the
surviving vectors once tombstones pass a fifth of the index, or before it is
saved. Deletes are rare here (an exchange that grew, a rebuild), so this costs
far less than rebuilding the graph on every delete, and keeps big sessions on
the fast approximate index instead of falling back to a flat one.

Files: ``FaissIndex.save(path)`` writes FAISS's own format atomically
(temporary file + rename); ``FaissIndex.load(path)`` raises `IndexFileError`
when the file is missing, truncated or not a FAISS index. `IndexFiles` keeps
one such file per session in a folder, each with a JSON manifest that says
what made the vectors and the file's size and CRC32, so a file written by
another model, or damaged, is never adopted.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
import urllib.parse
import zlib
from collections.abc import Iterable, Mapping
from hashlib import sha256
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._errors import ConfigError, ConvMemError

__all__ = ["FaissIndex", "IndexFileError", "IndexFiles", "VectorIndex"]

# A fifth of dead nodes costs HNSW little recall and search time; beyond that
# the graph is rebuilt from the live vectors.
_TOMBSTONE_REBUILD_FRACTION = 0.2


class IndexFileError(ConvMemError):
    """A persisted vector index could not be read (missing, truncated or corrupt)."""


@runtime_checkable
class VectorIndex(Protocol):
    """A mutable set of (id, unit vector) pairs searched by inner product."""

    @property
    def dimension(self) -> int:
        """The length of every vector the index holds and searches with."""
        ...

    @property
    def kind(self) -> str:
        """What backs the index (e.g. "flat", "hnsw", "llamaindex:SimpleVectorStore"), for reports."""
        ...

    def __len__(self) -> int: ...

    def __contains__(self, unit_id: object) -> bool: ...

    def ids(self) -> set[int]:
        """Every live id."""
        ...

    def add(self, ids: Iterable[int], vectors: np.ndarray) -> None:
        """Add vectors; an id already present is replaced."""
        ...

    def remove(self, ids: Iterable[int]) -> None:
        """Remove ids (unknown ones are ignored)."""
        ...

    def search(self, query: np.ndarray, k: int, *, exclude: Iterable[int] = ()) -> list[tuple[int, float]]:
        """The `k` nearest (id, similarity) pairs, best first, skipping `exclude`."""
        ...

    def vectors(self, ids: Iterable[int]) -> dict[int, np.ndarray]:
        """The stored vectors of the ids that are present."""
        ...

    def bytes_per_vector(self) -> float:
        """Memory one stored unit costs (vector, id and index structure)."""
        ...


def _ids_array(ids: Iterable[int]) -> np.ndarray:
    return np.fromiter((int(i) for i in ids), dtype=np.int64)


class FaissIndex:
    """A FAISS inner-product index keyed by int64 ids: flat when small, HNSW when large.

    Args:
        dimension: vector length.
        hnsw_threshold: above this many vectors the index becomes HNSW
            (approximate, O(log n) search); at or below, exact search is fast
            enough (about 1 ms per 50k 384-dim vectors).
        hnsw_m: HNSW graph degree. ``ef_search``/``ef_construction``: HNSW breadth.

    Thread-safe: one lock serializes writers and readers.
    """

    def __init__(
        self,
        dimension: int,
        *,
        hnsw_threshold: int = 50_000,
        hnsw_m: int = 32,
        ef_search: int = 128,
        ef_construction: int = 80,
    ) -> None:
        if not isinstance(dimension, int) or dimension <= 0:
            raise ConfigError(f"dimension must be a positive int, got {dimension!r}")
        if not isinstance(hnsw_threshold, int) or hnsw_threshold <= 0:
            raise ConfigError(f"hnsw_threshold must be a positive int, got {hnsw_threshold!r}")
        try:
            import faiss
        except ImportError:
            raise ConfigError(
                "FaissIndex needs faiss: pip install 'convmem[retrieval]' (faiss-cpu)"
            ) from None
        self._faiss: Any = faiss
        self._dimension = dimension
        self.hnsw_threshold = hnsw_threshold
        self.hnsw_m = hnsw_m
        self.ef_search = ef_search
        self.ef_construction = ef_construction
        self._lock = threading.RLock()
        self._index: Any = faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))
        self._hnsw = False
        self._live: set[int] = set()
        self._tombstones: set[int] = set()

    def __repr__(self) -> str:
        return f"FaissIndex(dimension={self._dimension}, kind={self.kind!r}, vectors={len(self)})"

    # -- inspection --------------------------------------------------------------

    @property
    def dimension(self) -> int:
        """The length of every vector the index holds and searches with."""
        return self._dimension

    @property
    def kind(self) -> str:
        """``"flat"`` or ``"hnsw"``."""
        return "hnsw" if self._hnsw else "flat"

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, unit_id: object) -> bool:
        return unit_id in self._live

    def ids(self) -> set[int]:
        with self._lock:
            return set(self._live)

    def bytes_per_vector(self) -> float:
        """Serialized bytes per live vector: the float32 vector, its id and, for HNSW, graph links."""
        with self._lock:
            if not self._live:
                return float(4 * self._dimension + 8)
            return float(len(self._faiss.serialize_index(self._index)) / self._index.ntotal)

    # -- writing -----------------------------------------------------------------

    def add(self, ids: Iterable[int], vectors: np.ndarray) -> None:
        id_array = _ids_array(ids)
        matrix = np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1, self._dimension)
        if len(id_array) != len(matrix):
            raise ConfigError(f"add got {len(id_array)} ids for {len(matrix)} vectors")
        if not len(id_array):
            return
        if len(set(id_array.tolist())) != len(id_array):
            raise ConfigError("add got the same id twice in one call")
        with self._lock:
            present = [i for i in id_array.tolist() if i in self._live or i in self._tombstones]
            if present:
                self._remove_locked(present)
                if self._tombstones.intersection(present):
                    # A tombstoned id cannot be re-added to a graph that still holds it.
                    self._rebuild_locked(hnsw=True)
            self._index.add_with_ids(matrix, id_array)
            self._live.update(id_array.tolist())
            if not self._hnsw and len(self._live) > self.hnsw_threshold:
                self._rebuild_locked(hnsw=True)

    def remove(self, ids: Iterable[int]) -> None:
        with self._lock:
            self._remove_locked([i for i in (int(x) for x in ids) if i in self._live])

    def _remove_locked(self, ids: list[int]) -> None:
        live = [i for i in ids if i in self._live]
        if not live:
            return
        if self._hnsw:
            self._tombstones.update(live)
            self._live.difference_update(live)
            if len(self._tombstones) > _TOMBSTONE_REBUILD_FRACTION * max(1, self._index.ntotal):
                self._rebuild_locked(hnsw=len(self._live) > self.hnsw_threshold)
        else:
            self._index.remove_ids(_ids_array(live))
            self._live.difference_update(live)

    def _rebuild_locked(self, *, hnsw: bool) -> None:
        """Re-create the index from the live vectors (drops tombstones, switches kind)."""
        faiss = self._faiss
        ids = np.array(sorted(self._live), dtype=np.int64)
        matrix = (
            self._index.reconstruct_batch(ids) if len(ids) else np.zeros((0, self._dimension), np.float32)
        )
        if hnsw:
            inner = faiss.IndexHNSWFlat(self._dimension, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            inner.hnsw.efConstruction = self.ef_construction
            inner.hnsw.efSearch = self.ef_search
        else:
            inner = faiss.IndexFlatIP(self._dimension)
        index = faiss.IndexIDMap2(inner)
        if len(ids):
            index.add_with_ids(np.ascontiguousarray(matrix, dtype=np.float32), ids)
        self._index = index
        self._hnsw = hnsw
        self._tombstones.clear()

    # -- reading -----------------------------------------------------------------

    def search(self, query: np.ndarray, k: int, *, exclude: Iterable[int] = ()) -> list[tuple[int, float]]:
        vector = np.ascontiguousarray(query, dtype=np.float32).reshape(1, self._dimension)
        with self._lock:
            hidden = self._tombstones.union(int(i) for i in exclude)
            available = len(self._live) - len(hidden.intersection(self._live))
            k = min(k, available)
            if k <= 0:
                return []
            faiss = self._faiss
            params = None
            if hidden:
                selector = faiss.IDSelectorNot(faiss.IDSelectorBatch(_ids_array(hidden)))
                if self._hnsw:
                    params = faiss.SearchParametersHNSW(sel=selector, efSearch=max(self.ef_search, k))
                else:
                    params = faiss.SearchParameters(sel=selector)
            elif self._hnsw:
                params = faiss.SearchParametersHNSW(efSearch=max(self.ef_search, k))
            scores, labels = self._index.search(vector, k, params=params)
        return [(int(i), float(s)) for i, s in zip(labels[0], scores[0], strict=True) if i >= 0]

    def vectors(self, ids: Iterable[int]) -> dict[int, np.ndarray]:
        with self._lock:
            wanted = [i for i in (int(x) for x in ids) if i in self._live]
            if not wanted:
                return {}
            matrix = self._index.reconstruct_batch(np.array(wanted, dtype=np.int64))
        return dict(zip(wanted, matrix, strict=True))

    # -- files -------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> int:
        """Write the index to `path` atomically; returns the number of bytes written.

        Tombstones are compacted first, so a saved file holds live vectors only.
        """
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            if self._tombstones:
                self._rebuild_locked(hnsw=len(self._live) > self.hnsw_threshold)
            data = self._faiss.serialize_index(self._index).tobytes()
        fd, tmp = tempfile.mkstemp(prefix=target.name, suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return len(data)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        hnsw_threshold: int = 50_000,
        hnsw_m: int = 32,
        ef_search: int = 128,
        ef_construction: int = 80,
    ) -> FaissIndex:
        """Read an index written by `save`; raises `IndexFileError` if it cannot be used."""
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise IndexFileError(f"cannot read vector index {path}: {exc}") from exc
        return cls.from_bytes(
            data,
            source=str(path),
            hnsw_threshold=hnsw_threshold,
            hnsw_m=hnsw_m,
            ef_search=ef_search,
            ef_construction=ef_construction,
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "<bytes>", **options: Any) -> FaissIndex:
        try:
            import faiss
        except ImportError:
            raise ConfigError("FaissIndex needs faiss: pip install 'convmem[retrieval]'") from None
        try:
            # deserialize_index already returns the concrete class; wrapping it again with
            # downcast_index would leave a second, non-owning Python object behind.
            index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
            if not isinstance(index, faiss.IndexIDMap2):
                raise IndexFileError(f"{source} holds a {type(index).__name__}, not an IndexIDMap2")
            ids = faiss.vector_to_array(index.id_map)
        except IndexFileError:
            raise
        except Exception as exc:  # FAISS reports any damage as RuntimeError
            raise IndexFileError(f"vector index {source} is corrupt: {exc}") from exc
        if index.metric_type != faiss.METRIC_INNER_PRODUCT:
            raise IndexFileError(f"vector index {source} does not use inner product")
        out = cls(index.d, **options)
        out._index = index
        # The IDMap owns its inner index, so this typed view of it is safe while `index` lives.
        out._hnsw = isinstance(faiss.downcast_index(index.index), faiss.IndexHNSW)
        out._live = set(ids.tolist())
        if len(out._live) != len(ids):
            raise IndexFileError(f"vector index {source} holds duplicate ids")
        return out


# -- one file and manifest per session ---------------------------------------------

_MANIFEST_FORMAT = 1
# Hex digits of a generation's digest in a file name.
_GENERATION_DIGITS = 16


def _escape_session_id(session_id: str) -> str:
    """A file name for a session id: readable, collision-free, short, case-safe."""
    readable = urllib.parse.quote(session_id, safe="")[:80]
    digest = sha256(session_id.encode("utf-8")).hexdigest()[:16]
    return f"{readable}-{digest}"


class IndexFiles:
    """A folder of persisted session indexes: ``<session>.faiss`` plus a ``<session>.json`` manifest.

    The manifest holds the `identity` the vectors were made with (embedder name,
    dimension, anything else that changes them), the vector count, and the
    file's size and CRC32. `load` adopts a file only when all of them match.

    Example::

        files = IndexFiles(Path("memory.db.vectors"))
        identity = {"embedder": "all-MiniLM-L6-v2", "dimension": 384}
        files.save("s1", index, identity)
        index = files.load("s1", identity)  # None when nothing was saved
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def __repr__(self) -> str:
        return f"IndexFiles({str(self.directory)!r})"

    def path(self, session_id: str, generation: str | None = None) -> Path:
        """The FAISS file of a session's log (its manifest has the same name with ``.json``).

        With the log's `generation` (see `Store.stats`) the name carries a digest of
        it: vectors of a log that was forgotten, edited or belongs to another store
        with the same session id live in another file, and are never adopted.
        """
        name = _escape_session_id(session_id)
        if generation is not None:
            name += "." + sha256(generation.encode("utf-8")).hexdigest()[:_GENERATION_DIGITS]
        return self.directory / f"{name}.faiss"

    def manifest_path(self, session_id: str, generation: str | None = None) -> Path:
        return self.path(session_id, generation).with_suffix(".json")

    def load(
        self,
        session_id: str,
        identity: Mapping[str, Any],
        *,
        hnsw_threshold: int = 50_000,
        generation: str | None = None,
    ) -> FaissIndex | None:
        """The saved index of a session, ``None`` when there is none.

        Raises `IndexFileError` when the files are there but unusable: made with
        another identity, damaged, or one of the pair missing.
        """
        path, manifest_path = self.path(session_id, generation), self.manifest_path(session_id, generation)
        if not (path.exists() or manifest_path.exists()):
            return None
        try:
            manifest = json.loads(manifest_path.read_text("utf-8"))
            data = path.read_bytes()
        except (OSError, ValueError) as exc:
            raise IndexFileError(f"cannot read the index files of {session_id!r}: {exc}") from exc
        expected = {"format": _MANIFEST_FORMAT, **identity}
        stale = {k: manifest.get(k) for k, v in expected.items() if manifest.get(k) != v}
        if stale:
            raise IndexFileError(f"manifest does not match ({stale} vs {expected})")
        if manifest.get("bytes") != len(data) or manifest.get("crc32") != zlib.crc32(data):
            raise IndexFileError("index file does not match its manifest (size or checksum)")
        index = FaissIndex.from_bytes(data, source=str(path), hnsw_threshold=hnsw_threshold)
        if len(index) != manifest.get("count"):
            raise IndexFileError(f"index holds {len(index)} vectors, manifest says {manifest.get('count')}")
        return index

    def save(
        self,
        session_id: str,
        index: FaissIndex,
        identity: Mapping[str, Any],
        extra: Mapping[str, Any] | None = None,
        *,
        generation: str | None = None,
    ) -> None:
        """Write the index, then its manifest (both atomically); `extra` is kept for people reading it.

        Raises `OSError` when the folder cannot be written.
        """
        path, manifest_path = self.path(session_id, generation), self.manifest_path(session_id, generation)
        manifest: dict[str, Any] = {
            "format": _MANIFEST_FORMAT,
            "session_id": session_id,
            **identity,
            "count": len(index),
            **(extra or {}),
            "kind": index.kind,
        }
        manifest["bytes"] = index.save(path)
        manifest["crc32"] = zlib.crc32(path.read_bytes())
        tmp = manifest_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(manifest, ensure_ascii=False, indent=1), "utf-8")
        tmp.replace(manifest_path)

    def delete(self, session_id: str, generation: str | None = None) -> None:
        """Delete the files of one generation of a session's log."""
        for path in (self.path(session_id, generation), self.manifest_path(session_id, generation)):
            path.unlink(missing_ok=True)

    def delete_all(self, session_id: str) -> None:
        """Delete the files of every generation of a session (of every store using this folder)."""
        name = _escape_session_id(session_id)
        pattern = re.compile(re.escape(name) + rf"(\.[0-9a-f]{{{_GENERATION_DIGITS}}})?\.(faiss|json)")
        if not self.directory.is_dir():
            return
        for path in self.directory.glob(f"{name}*"):
            if pattern.fullmatch(path.name):
                path.unlink(missing_ok=True)

"""`VectorIndex` adapters over a framework vector store shared by many servers.

`FaissIndex` keeps a session's vectors in the process that serves it (and in a
file next to the store). When several servers answer the same sessions, each
would build and keep its own copy. These adapters keep the vectors in a vector
store the servers share instead:

- `LlamaIndexVectorIndex`: any LlamaIndex ``BasePydanticVectorStore`` that
  takes precomputed embeddings and honours ``MetadataFilters``
  (``SimpleVectorStore``, and the integration stores: Qdrant, Chroma,
  PGVector, ...);
- `LangChainVectorIndex`: a LangChain ``VectorStore`` that can be given
  vectors: one with ``add_embeddings`` (community ``FAISS``, ``PGVector``), or
  any store built with `PrecomputedEmbeddings` as its embedding model
  (``InMemoryVectorStore(PrecomputedEmbeddings())``, Chroma, ...).

One adapter serves one session; many adapters (one per session, in as many
processes as you like) share one vector store. Every unit is stored with the
node id ``"<session key>:<unit id>"`` (the session key is a hash of the
session id) and the metadata ``convmem_session`` (the session id) and
``convmem_unit``. Sessions are walls: a search asks the store for this
session only (a metadata filter), and any hit whose id or metadata names
another session is dropped here too, so a store that ignored the filter would
return fewer units, never another session's.

Similarity is cosine, as in `FaissIndex`: vectors are normalized on the way in
(a zero or non-finite vector is rejected), so cosine, inner product and L2
rank alike, and a store that reports distances can be converted exactly (see
``score_to_similarity``).

What lives where. The store is the source of truth for search. ``ids()``,
``len()`` and ``in`` answer from a local set of ids, filled from the store
when the adapter is created (if the store can list a session's units), kept
up to date by `add` and `remove`, and grown by search hits. Another process
writing the same session is therefore seen by search at once, and by ``ids()``
after `refresh`. ``vectors()`` answers from a local copy of the vectors this
adapter wrote or read (convmem's unit ids name fixed text, so a unit's vector
never changes under it) and asks the store for the rest when the store can
return vectors. The copy costs ``4 * dimension`` bytes per unit in this
process, what a `FaissIndex` would; ``cache_vectors=False`` drops it, and then
every ``vectors()`` call reads the store.

Thread-safe: one lock per adapter serializes its calls. Failures of the store
are raised as `StoreError`.
"""

from __future__ import annotations

import base64
import contextlib
import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from hashlib import sha256
from typing import TYPE_CHECKING, Any

import numpy as np

from ._errors import ConfigError, ConvMemError, StoreError
from ._store import validate_id

__all__ = ["LangChainVectorIndex", "LlamaIndexVectorIndex", "PrecomputedEmbeddings"]

logger = logging.getLogger("convmem")

SESSION_KEY = "convmem_session"
UNIT_KEY = "convmem_unit"
VECTOR_KEY = "convmem_vector"

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _session_key(session_id: str) -> str:
    """A fixed-length, separator-free key for a session id, used in node ids."""
    return sha256(session_id.encode("utf-8")).hexdigest()[:32]


def _unit_ids(ids: Iterable[int]) -> list[int]:
    out: list[int] = []
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ConfigError(f"unit ids must be ints, got {type(value).__name__}: {value!r:.60}")
        unit = int(value)
        if not _INT64_MIN <= unit <= _INT64_MAX:
            raise ConfigError(f"unit id {unit} does not fit in 64 bits")
        out.append(unit)
    return out


def _unit_rows(vectors: np.ndarray, dimension: int, what: str) -> np.ndarray:
    """`vectors` as unit-length float32 rows; raises `ConfigError` on anything unusable."""
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{what} must be an array of numbers: {exc}") from None
    if matrix.ndim == 1:
        matrix = matrix.reshape(1, -1)
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        raise ConfigError(f"{what} must have {dimension} dimensions, got shape {np.shape(vectors)}")
    if not np.isfinite(matrix).all():
        raise ConfigError(f"{what} holds NaN or infinite values")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ConfigError(f"{what} holds a zero vector, which has no direction to compare")
    return np.ascontiguousarray(matrix / norms, dtype=np.float32)


def _encode_vector(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _decode_vector(text: object, dimension: int) -> np.ndarray | None:
    if not isinstance(text, str):
        return None
    try:
        return _stored_vector(np.frombuffer(base64.b64decode(text, validate=True), dtype="<f4"), dimension)
    except (ValueError, TypeError):
        return None


def _stored_vector(embedding: object, dimension: int) -> np.ndarray | None:
    """A vector read back from a store, normalized; None when it is not one of `dimension` usable values."""
    if embedding is None:
        return None
    try:
        vector = np.asarray(embedding, dtype=np.float32)
    except (ValueError, TypeError):
        return None
    if vector.shape != (dimension,) or not np.isfinite(vector).all():
        return None
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else None


class _StoreBackedIndex:
    """What both adapters share: ids, local vectors, input checks, walls between sessions.

    Subclasses talk to their framework through `_write`, `_delete`, `_query`,
    `_fetch`, `_list` and `_delete_session`.
    """

    framework = ""

    def __init__(
        self,
        vector_store: Any,
        *,
        session_id: str,
        dimension: int,
        score_to_similarity: Callable[[float], float] | None,
        cache_vectors: bool,
    ) -> None:
        validate_id(session_id)
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0:
            raise ConfigError(f"dimension must be a positive int, got {dimension!r}")
        if score_to_similarity is not None and not callable(score_to_similarity):
            raise ConfigError(
                f"score_to_similarity must be a function of the store's score, got {score_to_similarity!r}"
            )
        self._store = vector_store
        self._session_id = session_id
        self._key = _session_key(session_id)
        self._dimension = dimension
        self._score_to_similarity = score_to_similarity
        self._cache_vectors = bool(cache_vectors)
        self._lock = threading.RLock()
        self._ids: set[int] = set()
        self._vectors: dict[int, np.ndarray] = {}

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({type(self._store).__name__}, session_id={self._session_id!r}, "
            f"dimension={self._dimension}, vectors={len(self)})"
        )

    # -- inspection --------------------------------------------------------------

    @property
    def vector_store(self) -> Any:
        """The framework store the vectors live in."""
        return self._store

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def kind(self) -> str:
        """The framework and store class, e.g. ``"llamaindex:SimpleVectorStore"``."""
        return f"{self.framework}:{type(self._store).__name__}"

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, unit_id: object) -> bool:
        return unit_id in self._ids

    def ids(self) -> set[int]:
        """The ids known here: written by this adapter, listed by `refresh`, or seen in a search."""
        with self._lock:
            return set(self._ids)

    def node_id(self, unit_id: int) -> str:
        """The store's id for one of this session's units."""
        return f"{self._key}:{int(unit_id)}"

    def _unit_of(self, node_id: object) -> int | None:
        """The unit id inside one of this session's node ids; None for anything else."""
        if not isinstance(node_id, str):
            return None
        key, _, unit = node_id.rpartition(":")
        if key != self._key:
            return None
        try:
            return int(unit)
        except ValueError:
            return None

    def bytes_per_vector(self) -> float:
        """Bytes one unit costs: the float32 vector and node id in the store, plus the local copy."""
        stored = 4 * self._dimension + len(self.node_id(0)) + 8 + self._extra_bytes_per_vector()
        return float(stored + (4 * self._dimension if self._cache_vectors else 0))

    def _extra_bytes_per_vector(self) -> int:
        return 0

    # -- writing -----------------------------------------------------------------

    def add(self, ids: Iterable[int], vectors: np.ndarray) -> None:
        """Add vectors (normalized here); an id already present is replaced."""
        units = _unit_ids(ids)
        matrix = (
            _unit_rows(vectors, self._dimension, "vectors")
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
            present = [u for u in units if u in self._ids]
            if present:
                # Not every store upserts (community FAISS refuses an existing id).
                with self._calling("replace units"):
                    self._delete([self.node_id(u) for u in present])
            with self._calling("add units"):
                self._write(units, matrix)
            self._ids.update(units)
            if self._cache_vectors:
                self._vectors.update(zip(units, matrix, strict=True))

    def remove(self, ids: Iterable[int]) -> None:
        """Remove ids from the store (ids it does not hold are ignored)."""
        units = _unit_ids(ids)
        if not units:
            return
        with self._lock:
            known = [u for u in units if u in self._ids]
            try:
                # Unknown ids too: another process may have written them.
                self._delete([self.node_id(u) for u in dict.fromkeys(units)])
            except Exception as exc:
                if len(known) == len(set(units)):
                    if isinstance(exc, ConvMemError):
                        raise
                    raise self._failure("remove units", exc) from exc
                # Some stores refuse to delete ids they do not hold; delete the ones we know.
                if known:
                    with self._calling("remove units"):
                        self._delete([self.node_id(u) for u in known])
            self._ids.difference_update(units)
            for unit in units:
                self._vectors.pop(unit, None)

    def clear(self) -> None:
        """Delete every unit of this session from the store, including other processes' units."""
        with self._lock, self._calling("delete the session"):
            self._delete_session()
            self._ids.clear()
            self._vectors.clear()

    def refresh(self) -> int:
        """Re-read this session's ids (and vectors, when returned) from the store; returns the count.

        Raises `ConfigError` when the store cannot list a session's units.
        """
        with self._lock, self._calling("list the session's units"):
            listed = self._list()
            if listed is None:
                raise ConfigError(
                    f"{self.kind} cannot list a session's units, so ids() only knows what this "
                    "adapter wrote or found; use a store that can list them to see other writers"
                )
            self._ids = set(listed)
            if self._cache_vectors:
                self._vectors = {u: v for u, v in self._vectors.items() if u in self._ids}
                self._vectors.update((u, v) for u, v in listed.items() if v is not None)
            return len(self._ids)

    def _refresh_if_listable(self) -> None:
        """Read the session's ids at creation, so units other processes wrote are not embedded again."""
        try:
            self.refresh()
        except ConfigError:
            pass  # the store cannot list: ids() starts with what this adapter writes
        except StoreError as exc:
            logger.warning("%s; starting with no known ids (call refresh() later)", exc)

    # -- reading -----------------------------------------------------------------

    def search(self, query: np.ndarray, k: int, *, exclude: Iterable[int] = ()) -> list[tuple[int, float]]:
        """The `k` nearest (id, cosine similarity) pairs of this session, best first, skipping `exclude`."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise ConfigError(f"k must be an int, got {k!r}")
        vector = _unit_rows(query, self._dimension, "the query vector")[0]
        if k <= 0:
            return []
        excluded = set(_unit_ids(exclude))
        with self._lock, self._calling("search"):
            hits = self._query(vector, int(k) + len(excluded))
            found: dict[int, float] = {}
            for node_id, score, stored in hits:
                unit = self._unit_of(node_id)
                if unit is None or unit in excluded or unit in found:
                    continue
                if stored is None:
                    stored = self._vectors.get(unit)
                elif self._cache_vectors:
                    self._vectors[unit] = stored
                found[unit] = float(stored @ vector) if stored is not None else self._similarity(score)
                self._ids.add(unit)
        ranked = sorted(found.items(), key=lambda pair: -pair[1])
        return ranked[: int(k)]

    def _similarity(self, score: float | None) -> float:
        if score is None:
            raise StoreError(f"{self.kind} returned a hit without a score or a vector")
        return float(score) if self._score_to_similarity is None else float(self._score_to_similarity(score))

    def vectors(self, ids: Iterable[int]) -> dict[int, np.ndarray]:
        """The stored (normalized) vectors of the ids that are present."""
        units = list(dict.fromkeys(_unit_ids(ids)))
        with self._lock:
            out = {u: self._vectors[u].copy() for u in units if u in self._ids and u in self._vectors}
            missing = [u for u in units if u in self._ids and u not in out]
            if missing:
                with self._calling("read vectors"):
                    fetched = self._fetch(missing)
                for unit, vector in fetched.items():
                    if unit in self._ids:
                        out[unit] = vector.copy()
                        if self._cache_vectors:
                            self._vectors[unit] = vector
        return out

    # -- framework edge ----------------------------------------------------------

    def _write(self, units: list[int], matrix: np.ndarray) -> None:
        raise NotImplementedError

    def _delete(self, node_ids: list[str]) -> None:
        raise NotImplementedError

    def _query(self, vector: np.ndarray, fetch_k: int) -> list[tuple[str, float | None, np.ndarray | None]]:
        """(node id, store score, stored vector if the store returned it) of the nearest units."""
        raise NotImplementedError

    def _fetch(self, units: list[int]) -> dict[int, np.ndarray]:
        raise NotImplementedError

    def _list(self) -> dict[int, np.ndarray | None] | None:
        """Every unit of this session (with its vector when known), or None if the store cannot list."""
        raise NotImplementedError

    def _delete_session(self) -> None:
        raise NotImplementedError

    # -- errors ------------------------------------------------------------------

    def _failure(self, action: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"{self.kind} could not {action} for session {self._session_id!r}: {type(exc).__name__}: {exc}"
        )

    @contextlib.contextmanager
    def _calling(self, action: str) -> Iterator[None]:
        try:
            yield
        except ConvMemError:
            raise
        except Exception as exc:
            raise self._failure(action, exc) from exc


# -- LlamaIndex ---------------------------------------------------------------------------


class LlamaIndexVectorIndex(_StoreBackedIndex):
    """A session's vectors in a LlamaIndex vector store (``BasePydanticVectorStore``).

    Args:
        vector_store: a store that keeps the embeddings it is given
            (``is_embedding_query`` true) and honours ``MetadataFilters`` in
            ``query``, e.g. ``SimpleVectorStore()``.
        session_id: the session this adapter reads and writes.
        dimension: vector length (the embedder's).
        score_to_similarity: converts the store's score to cosine similarity
            when the vector of a hit is not at hand. ``None`` (default) takes the
            score as cosine similarity, which is what ``SimpleVectorStore``
            reports, and stores using a cosine metric. For a store reporting a
            distance between unit vectors, pass e.g. ``lambda d: 1 - d * d / 2``
            (L2), ``lambda d: 1 - d / 2`` (squared L2) or ``lambda d: 1 - d``
            (cosine distance).
        cache_vectors: keep the vectors this adapter wrote or read in memory for
            ``vectors()`` (see the module docstring).

    Each unit is a ``TextNode`` with empty text, the vector, the metadata
    ``convmem_session`` / ``convmem_unit`` and, as source document,
    ``"convmem-session-<session key>"``, so `clear` is one
    ``delete(ref_doc_id)``, which every LlamaIndex store implements.
    Removal uses ``delete_nodes(node_ids=...)``. The session's existing ids
    are read when the adapter is created: from ``SimpleVectorStore``'s data,
    or ``get_nodes(filters=...)`` on stores that implement it.

    Example::

        from llama_index.core.vector_stores import SimpleVectorStore
        shared = SimpleVectorStore()
        index = LlamaIndexVectorIndex(shared, session_id="s1", dimension=384)
    """

    framework = "llamaindex"

    def __init__(
        self,
        vector_store: Any,
        *,
        session_id: str,
        dimension: int,
        score_to_similarity: Callable[[float], float] | None = None,
        cache_vectors: bool = True,
    ) -> None:
        try:
            from llama_index.core.vector_stores.types import (
                FilterOperator,
                MetadataFilter,
                MetadataFilters,
                VectorStoreQuery,
            )
        except ImportError:
            raise ConfigError(
                "LlamaIndexVectorIndex needs llama-index-core: pip install 'convmem[llamaindex]'"
            ) from None
        missing = [m for m in ("add", "query", "delete") if not callable(getattr(vector_store, m, None))]
        if missing:
            raise ConfigError(
                f"LlamaIndexVectorIndex needs a LlamaIndex vector store (add, query, delete); "
                f"{type(vector_store).__name__} has no {', '.join(missing)}"
            )
        if getattr(vector_store, "is_embedding_query", True) is False:
            raise ConfigError(
                f"{type(vector_store).__name__} embeds text itself (is_embedding_query=False); "
                "LlamaIndexVectorIndex needs a store that takes precomputed embeddings"
            )
        super().__init__(
            vector_store,
            session_id=session_id,
            dimension=dimension,
            score_to_similarity=score_to_similarity,
            cache_vectors=cache_vectors,
        )
        self._document_id = f"convmem-session-{self._key}"
        self._query_type = VectorStoreQuery
        self._filters = MetadataFilters(
            filters=[MetadataFilter(key=SESSION_KEY, value=session_id, operator=FilterOperator.EQ)]
        )
        self._refresh_if_listable()

    def _simple_data(self) -> Any:
        """``SimpleVectorStore``'s data, which it exposes instead of ``get_nodes``."""
        from llama_index.core.vector_stores import SimpleVectorStore

        return self._store.data if isinstance(self._store, SimpleVectorStore) else None

    def _write(self, units: list[int], matrix: np.ndarray) -> None:
        from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode

        source = RelatedNodeInfo(node_id=self._document_id)
        nodes = [
            TextNode(
                id_=self.node_id(unit),
                text="",
                embedding=vector.tolist(),
                metadata={SESSION_KEY: self._session_id, UNIT_KEY: unit},
                relationships={NodeRelationship.SOURCE: source},
            )
            for unit, vector in zip(units, matrix, strict=True)
        ]
        self._store.add(nodes)

    def _delete(self, node_ids: list[str]) -> None:
        self._store.delete_nodes(node_ids=node_ids)

    def _query(self, vector: np.ndarray, fetch_k: int) -> list[tuple[str, float | None, np.ndarray | None]]:
        query = self._query_type(
            query_embedding=vector.tolist(), similarity_top_k=fetch_k, filters=self._filters
        )
        result = self._store.query(query)
        nodes = list(result.nodes or [])
        node_ids = list(result.ids) if result.ids is not None else [n.node_id for n in nodes]
        scores: list[float | None] = list(result.similarities or [])
        scores += [None] * (len(node_ids) - len(scores))
        by_id = {n.node_id: n for n in nodes}
        hits: list[tuple[str, float | None, np.ndarray | None]] = []
        for node_id, score in zip(node_ids, scores, strict=False):
            node = by_id.get(node_id)
            if node is not None and node.metadata.get(SESSION_KEY, self._session_id) != self._session_id:
                continue
            hits.append((node_id, score, _stored_vector(getattr(node, "embedding", None), self._dimension)))
        return hits

    def _fetch(self, units: list[int]) -> dict[int, np.ndarray]:
        data = self._simple_data()
        out: dict[int, np.ndarray] = {}
        if data is not None:
            for unit in units:
                vector = _stored_vector(data.embedding_dict.get(self.node_id(unit)), self._dimension)
                if vector is not None:
                    out[unit] = vector
            return out
        try:
            nodes = self._store.get_nodes(node_ids=[self.node_id(u) for u in units])
        except NotImplementedError:
            return out  # this store cannot return nodes: only the local copy is available
        for node in nodes:
            found = self._unit_of(node.node_id)
            vector = _stored_vector(node.embedding, self._dimension)
            if found is not None and vector is not None:
                out[found] = vector
        return out

    def _list(self) -> dict[int, np.ndarray | None] | None:
        data = self._simple_data()
        listed: dict[int, np.ndarray | None] = {}
        if data is not None:
            for node_id, metadata in data.metadata_dict.items():
                unit = self._unit_of(node_id)
                if unit is not None and metadata.get(SESSION_KEY) == self._session_id:
                    listed[unit] = _stored_vector(data.embedding_dict.get(node_id), self._dimension)
            return listed
        try:
            nodes = self._store.get_nodes(filters=self._filters)
        except NotImplementedError:
            return None
        for node in nodes:
            unit = self._unit_of(node.node_id)
            if unit is not None and node.metadata.get(SESSION_KEY) == self._session_id:
                listed[unit] = _stored_vector(node.embedding, self._dimension)
        return listed

    def _delete_session(self) -> None:
        self._store.delete(self._document_id)


# -- LangChain ----------------------------------------------------------------------------

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings as _EmbeddingsBase
else:
    # The core does not import LangChain; the class is registered as an Embeddings when it is used.
    _EmbeddingsBase = object

_embeddings_registered = False


class PrecomputedEmbeddings(_EmbeddingsBase):
    """A LangChain ``Embeddings`` that hands a vector store vectors computed elsewhere.

    LangChain stores embed the texts they are given with their own embedding
    model, and ``InMemoryVectorStore`` offers no way to pass vectors in. Build
    such a store with this object as its model, and `LangChainVectorIndex`
    stages its vectors here just before ``add_documents``, so the store stores
    exactly convmem's vectors; nothing is embedded twice. A store built this
    way is for convmem's units only: it cannot embed a query text or any
    document convmem did not stage (both raise `ConfigError`).

    Example::

        from langchain_core.vectorstores import InMemoryVectorStore
        shared = InMemoryVectorStore(PrecomputedEmbeddings())
    """

    def __init__(self) -> None:
        _register_as_langchain_embeddings()
        self._lock = threading.Lock()
        self._staged: dict[str, tuple[list[float], int]] = {}  # text -> (vector, stagings)

    def __repr__(self) -> str:
        return "PrecomputedEmbeddings()"

    @contextlib.contextmanager
    def staged(self, texts: Sequence[str], vectors: Sequence[Sequence[float]]) -> Iterator[None]:
        """Serve `vectors` for `texts` while the block runs (concurrent stagings are counted)."""
        with self._lock:
            for text, vector in zip(texts, vectors, strict=True):
                _, count = self._staged.get(text, (None, 0))
                self._staged[text] = ([float(x) for x in vector], count + 1)
        try:
            yield
        finally:
            with self._lock:
                for text in texts:
                    vector, count = self._staged[text]
                    if count <= 1:
                        del self._staged[text]
                    else:
                        self._staged[text] = (vector, count - 1)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            missing = [t for t in texts if t not in self._staged]
            if missing:
                raise ConfigError(
                    f"PrecomputedEmbeddings has no vector for {missing[0]!r:.80}: it only serves "
                    "vectors staged by LangChainVectorIndex; add documents through the adapter, or "
                    "give the store a real embedding model"
                )
            return [list(self._staged[t][0]) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        raise ConfigError(
            "PrecomputedEmbeddings cannot embed a query text; search the store by vector "
            "(similarity_search_by_vector) or through LangChainVectorIndex.search"
        )

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)


def _register_as_langchain_embeddings() -> None:
    """Make `PrecomputedEmbeddings` pass ``isinstance(x, Embeddings)`` without importing LangChain here."""
    global _embeddings_registered
    if _embeddings_registered:
        return
    try:
        from langchain_core.embeddings import Embeddings
    except ImportError:
        return
    Embeddings.register(PrecomputedEmbeddings)
    _embeddings_registered = True


def _in_memory_filter(session_id: str) -> Callable[[Any], bool]:
    def same_session(document: Any) -> bool:
        return bool(document.metadata.get(SESSION_KEY) == session_id)

    return same_session


def _dict_filter(session_id: str) -> dict[str, str]:
    return {SESSION_KEY: session_id}


class LangChainVectorIndex(_StoreBackedIndex):
    """A session's vectors in a LangChain ``VectorStore``.

    Args:
        vector_store: a store that can be given precomputed vectors, either
            through ``add_embeddings`` (community ``FAISS``:
            ``add_embeddings(text_embeddings, metadatas, ids)``; ``PGVector``:
            ``add_embeddings(texts, embeddings, metadatas, ids)``), or because
            it was built with `PrecomputedEmbeddings` as its embedding model
            (``InMemoryVectorStore(PrecomputedEmbeddings())``). It must offer
            ``similarity_search_with_score_by_vector(embedding, k, filter=...)``
            and ``delete(ids)``. Anything else raises `ConfigError`.
        session_id: the session this adapter reads and writes.
        dimension: vector length (the embedder's).
        session_filter: builds the store's ``filter=`` argument that keeps a
            search inside one session, from the session id; units carry the
            metadata ``{"convmem_session": session_id}``. Defaults: a function
            of the ``Document`` for ``InMemoryVectorStore``, else the dict
            ``{"convmem_session": session_id}``, the form community FAISS,
            Chroma, PGVector and Pinecone take. For another form, e.g. Qdrant::

                from qdrant_client import models
                session_filter=lambda sid: models.Filter(must=[models.FieldCondition(
                    key="metadata.convmem_session", match=models.MatchValue(value=sid))])

        score_to_similarity: only used for a hit whose vector is not at hand
            (see below); ``None`` takes the score as cosine similarity, as
            ``InMemoryVectorStore`` reports it.
        cache_vectors: keep the vectors this adapter wrote or read in memory for
            ``vectors()``.

    LangChain has no standard way to read a vector back, so each document
    also carries its vector in the metadata (``convmem_vector``: float32,
    base64; about ``5.4 * dimension`` bytes). Similarities are computed from
    it, so they are exact cosine whatever the store reports (``InMemoryVectorStore``
    a cosine similarity, community FAISS an L2 distance), and ``vectors()``
    works in any process through ``get_by_ids``. Document texts are the node
    ids. The session's existing ids are read when the adapter is created when
    the store can list them (``InMemoryVectorStore``); with other stores
    ``ids()`` knows what this adapter wrote or found in a search, and `clear`
    deletes only those (use the store's own delete by metadata to erase what
    other processes wrote).

    Example::

        from langchain_core.vectorstores import InMemoryVectorStore
        shared = InMemoryVectorStore(PrecomputedEmbeddings())
        index = LangChainVectorIndex(shared, session_id="s1", dimension=384)
    """

    framework = "langchain"

    def __init__(
        self,
        vector_store: Any,
        *,
        session_id: str,
        dimension: int,
        session_filter: Callable[[str], Any] | None = None,
        score_to_similarity: Callable[[float], float] | None = None,
        cache_vectors: bool = True,
    ) -> None:
        try:
            from langchain_core.documents import Document
            from langchain_core.vectorstores import InMemoryVectorStore
        except ImportError:
            raise ConfigError(
                "LangChainVectorIndex needs langchain-core: pip install 'convmem[langchain]'"
            ) from None
        name = type(vector_store).__name__
        for method in ("similarity_search_with_score_by_vector", "delete"):
            if not callable(getattr(vector_store, method, None)):
                raise ConfigError(
                    f"LangChainVectorIndex needs a LangChain vector store with {method}(); {name} has none"
                )
        if session_filter is not None and not callable(session_filter):
            raise ConfigError(
                f"session_filter must be a function of the session id returning the store's filter, "
                f"got {session_filter!r}"
            )
        self._in_memory = isinstance(vector_store, InMemoryVectorStore)
        self._add_style = _add_embeddings_style(vector_store)
        self._precomputed: PrecomputedEmbeddings | None = None
        if self._add_style is None:
            embeddings = getattr(vector_store, "embeddings", None)
            if not isinstance(embeddings, PrecomputedEmbeddings):
                raise ConfigError(
                    f"{name} cannot take precomputed vectors: it has no add_embeddings() and its "
                    f"embedding model is {type(embeddings).__name__}, not PrecomputedEmbeddings. "
                    f"Build it with PrecomputedEmbeddings(), e.g. InMemoryVectorStore(PrecomputedEmbeddings())"
                )
            self._precomputed = embeddings
        super().__init__(
            vector_store,
            session_id=session_id,
            dimension=dimension,
            score_to_similarity=score_to_similarity,
            cache_vectors=cache_vectors,
        )
        self._document_type = Document
        build = session_filter or (_in_memory_filter if self._in_memory else _dict_filter)
        self._filter = build(session_id)
        self._refresh_if_listable()

    def _extra_bytes_per_vector(self) -> int:
        # The metadata copy of the vector (base64) and the text (the node id).
        return 4 * ((4 * self._dimension + 2) // 3) + len(self.node_id(0))

    def _metadata(self, unit: int, vector: np.ndarray) -> dict[str, Any]:
        return {SESSION_KEY: self._session_id, UNIT_KEY: unit, VECTOR_KEY: _encode_vector(vector)}

    def _write(self, units: list[int], matrix: np.ndarray) -> None:
        node_ids = [self.node_id(u) for u in units]
        metadatas = [self._metadata(u, v) for u, v in zip(units, matrix, strict=True)]
        vectors = matrix.tolist()
        if self._add_style == "pairs":
            self._store.add_embeddings(
                list(zip(node_ids, vectors, strict=True)), metadatas=metadatas, ids=node_ids
            )
        elif self._add_style == "columns":
            self._store.add_embeddings(texts=node_ids, embeddings=vectors, metadatas=metadatas, ids=node_ids)
        else:
            assert self._precomputed is not None
            documents = [
                self._document_type(id=i, page_content=i, metadata=m)
                for i, m in zip(node_ids, metadatas, strict=True)
            ]
            with self._precomputed.staged(node_ids, vectors):
                self._store.add_documents(documents, ids=node_ids)

    def _delete(self, node_ids: list[str]) -> None:
        if self._store.delete(ids=node_ids) is False:
            raise StoreError(f"{self.kind}.delete reported failure for {len(node_ids)} ids")

    def _hit(self, document: Any) -> tuple[str, np.ndarray | None] | None:
        metadata = document.metadata or {}
        if metadata.get(SESSION_KEY) != self._session_id:
            return None
        node_id = document.id
        if node_id is None:  # not every store returns ids with documents
            unit = metadata.get(UNIT_KEY)
            if isinstance(unit, bool) or not isinstance(unit, int):
                return None
            node_id = self.node_id(unit)
        return node_id, _decode_vector(metadata.get(VECTOR_KEY), self._dimension)

    def _query(self, vector: np.ndarray, fetch_k: int) -> list[tuple[str, float | None, np.ndarray | None]]:
        results = self._store.similarity_search_with_score_by_vector(
            vector.tolist(), k=fetch_k, filter=self._filter
        )
        hits: list[tuple[str, float | None, np.ndarray | None]] = []
        for document, score in results:
            hit = self._hit(document)
            if hit is not None:
                hits.append((hit[0], score, hit[1]))
        return hits

    def _fetch(self, units: list[int]) -> dict[int, np.ndarray]:
        try:
            documents = self._store.get_by_ids([self.node_id(u) for u in units])
        except NotImplementedError:
            return {}  # the store cannot return documents: only the local copy is available
        out: dict[int, np.ndarray] = {}
        for document in documents:
            hit = self._hit(document)
            unit = None if hit is None else self._unit_of(hit[0])
            if hit is not None and unit is not None and hit[1] is not None:
                out[unit] = hit[1]
        return out

    def _list(self) -> dict[int, np.ndarray | None] | None:
        if not self._in_memory:
            return None  # LangChain has no standard way to list a store's documents
        listed: dict[int, np.ndarray | None] = {}
        for record in list(self._store.store.values()):
            metadata = record.get("metadata") or {}
            unit = self._unit_of(record.get("id"))
            if unit is not None and metadata.get(SESSION_KEY) == self._session_id:
                listed[unit] = _decode_vector(metadata.get(VECTOR_KEY), self._dimension)
        return listed

    def _delete_session(self) -> None:
        listed = self._list()
        units = set(listed) if listed is not None else set(self._ids)
        if units:
            self._delete([self.node_id(u) for u in sorted(units)])


def _add_embeddings_style(vector_store: Any) -> str | None:
    """How the store's ``add_embeddings`` takes vectors: ``"pairs"``, ``"columns"``, or None (it has none)."""
    method = getattr(vector_store, "add_embeddings", None)
    if not callable(method):
        return None
    try:
        parameters = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return None
    if "text_embeddings" in parameters:
        return "pairs"
    if "texts" in parameters and "embeddings" in parameters:
        return "columns"
    return None

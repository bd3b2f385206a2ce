"""`LangChainVectorIndex`: a session's recall vectors in a LangChain vector store.

Many servers can share one store instead of each keeping a `FaissIndex` of
its own: a LangChain ``VectorStore`` that can be given vectors, either one with
``add_embeddings`` (community ``FAISS``, ``PGVector``) or any store built with
`PrecomputedEmbeddings` as its embedding model
(``InMemoryVectorStore(PrecomputedEmbeddings())``, Chroma, ...). The behaviour
every such adapter shares (tenant and session walls, log generations, cosine
similarity, the local id set and vector copy) is described in
``convmem.integration.StoreBackedIndex``.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from convmem import ConfigError, StoreError
from convmem.integration import (
    SCOPE_KEY,
    SESSION_KEY,
    UNIT_KEY,
    VECTOR_KEY,
    StoreBackedIndex,
    decode_vector,
    encode_vector,
)

__all__ = ["LangChainVectorIndex", "PrecomputedEmbeddings"]


class PrecomputedEmbeddings(Embeddings):
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


def _in_memory_filter(match: Mapping[str, str]) -> Callable[[Any], bool]:
    wanted = dict(match)

    def same_scope(document: Any) -> bool:
        metadata = document.metadata or {}
        return all(metadata.get(key) == value for key, value in wanted.items())

    return same_scope


def _dict_filter(match: Mapping[str, str]) -> dict[str, str]:
    return dict(match)


class LangChainVectorIndex(StoreBackedIndex):
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
        namespace: the tenant, e.g. the ``namespace`` of the convmem store the
            session lives in (what `Recall` passes).
        session_id: the session this adapter reads and writes.
        dimension: vector length (the embedder's).
        user_id: the session's owner, kept in each document's metadata (``convmem_user``).
        generation: the log generation whose vectors this adapter serves
            (``Store.stats(session_id).generation``).
        metadata_filter: builds the store's ``filter=`` argument that keeps a
            search inside this tenant's session and log generation, from the
            metadata every such document has (a dict such as
            ``{"convmem_scope": "5f1c...", "convmem_generation": "9a0e..."}``).
            Defaults: a function of the ``Document`` for ``InMemoryVectorStore``,
            else that dict, the form community FAISS, Chroma, PGVector and
            Pinecone take. For another form, e.g. Qdrant::

                from qdrant_client import models
                metadata_filter=lambda match: models.Filter(must=[
                    models.FieldCondition(key=f"metadata.{key}", match=models.MatchValue(value=value))
                    for key, value in match.items()])

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
    ids. The scope's existing ids are read when the adapter is created when
    the store can list them (``InMemoryVectorStore``); with other stores
    ``ids()`` knows what this adapter wrote or found in a search, and `clear`
    deletes only those (use the store's own delete by metadata, on
    ``convmem_scope``, to erase what other processes wrote).

    For `Recall`, make one per scope with `factory`::

        from langchain_core.vectorstores import InMemoryVectorStore
        shared = InMemoryVectorStore(PrecomputedEmbeddings())
        recall = Recall(embedder, index_factory=LangChainVectorIndex.factory(shared))
        # or directly:
        index = LangChainVectorIndex(shared, namespace="tenant-a", session_id="s1", dimension=384)
    """

    framework = "langchain"

    def __init__(
        self,
        vector_store: Any,
        *,
        namespace: str,
        session_id: str,
        dimension: int,
        user_id: str | None = None,
        generation: str | None = None,
        metadata_filter: Callable[[Mapping[str, str]], Any] | None = None,
        score_to_similarity: Callable[[float], float] | None = None,
        cache_vectors: bool = True,
    ) -> None:
        name = type(vector_store).__name__
        for method in ("similarity_search_with_score_by_vector", "delete"):
            if not callable(getattr(vector_store, method, None)):
                raise ConfigError(
                    f"LangChainVectorIndex needs a LangChain vector store with {method}(); {name} has none"
                )
        if metadata_filter is not None and not callable(metadata_filter):
            raise ConfigError(
                f"metadata_filter must be a function of the metadata to match returning the store's "
                f"filter, got {metadata_filter!r}"
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
            namespace=namespace,
            session_id=session_id,
            dimension=dimension,
            user_id=user_id,
            generation=generation,
            score_to_similarity=score_to_similarity,
            cache_vectors=cache_vectors,
        )
        self._build_filter = metadata_filter or (_in_memory_filter if self._in_memory else _dict_filter)
        self._filter = self._build_filter(self.match())
        self._open()

    def _scope_changed(self) -> None:
        self._filter = self._build_filter(self.match())

    def _extra_bytes_per_vector(self) -> int:
        # The metadata copy of the vector (base64) and the text (the node id).
        return 4 * ((4 * self._dimension + 2) // 3) + len(self.node_id(0))

    def _metadata(self, unit: int, vector: np.ndarray) -> dict[str, Any]:
        return {**self.metadata(unit), VECTOR_KEY: encode_vector(vector)}

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
                Document(id=i, page_content=i, metadata=m) for i, m in zip(node_ids, metadatas, strict=True)
            ]
            with self._precomputed.staged(node_ids, vectors):
                self._store.add_documents(documents, ids=node_ids)

    def _delete(self, node_ids: list[str]) -> None:
        if self._store.delete(ids=node_ids) is False:
            raise StoreError(f"{self.kind}.delete reported failure for {len(node_ids)} ids")

    def _hit(self, document: Any) -> tuple[str, np.ndarray | None] | None:
        metadata = document.metadata or {}
        if any(metadata.get(key) != value for key, value in self.match().items()):
            return None
        node_id = document.id
        if node_id is None:  # not every store returns ids with documents
            unit = metadata.get(UNIT_KEY)
            if isinstance(unit, bool) or not isinstance(unit, int):
                return None
            node_id = self.node_id(unit)
        return node_id, decode_vector(metadata.get(VECTOR_KEY), self._dimension)

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

    def _list(self) -> dict[str, np.ndarray | None] | None:
        if not self._in_memory:
            return None  # LangChain has no standard way to list a store's documents
        listed: dict[str, np.ndarray | None] = {}
        for record in list(self._store.store.values()):
            metadata = record.get("metadata") or {}
            node_id = record.get("id")
            if metadata.get(SCOPE_KEY) == self.scope_key and self._parse(node_id) is not None:
                listed[node_id] = decode_vector(metadata.get(VECTOR_KEY), self._dimension)
        return listed

    def _delete_scope(self) -> None:
        listed = self._list()
        node_ids = sorted(listed) if listed is not None else [self.node_id(u) for u in sorted(self._ids)]
        if node_ids:
            self._delete(node_ids)

    def _delete_legacy(self) -> int:
        if not self._in_memory:
            return 0  # they cannot be found here; they are never read either
        legacy = [
            record.get("id")
            for record in list(self._store.store.values())
            if (record.get("metadata") or {}).get(SESSION_KEY) == self._session_id
            and SCOPE_KEY not in (record.get("metadata") or {})
        ]
        if legacy:
            self._delete(legacy)
        return len(legacy)


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

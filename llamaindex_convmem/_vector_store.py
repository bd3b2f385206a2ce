"""`LlamaIndexVectorIndex`: a session's recall vectors in a LlamaIndex vector store.

Many servers can share one store (``SimpleVectorStore``, or an integration
store: Qdrant, Chroma, PGVector, ...) instead of each keeping a `FaissIndex`
of its own; the behaviour every such adapter shares (session walls, cosine
similarity, the local id set and vector copy) is described in
``convmem.integration.StoreBackedIndex``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import (
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
    VectorStoreQuery,
)

from convmem import ConfigError
from convmem.integration import SESSION_KEY, UNIT_KEY, StoreBackedIndex, stored_vector

__all__ = ["LlamaIndexVectorIndex"]


class LlamaIndexVectorIndex(StoreBackedIndex):
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
            ``vectors()`` (see ``convmem.integration.StoreBackedIndex``).

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
        self._filters = MetadataFilters(
            filters=[MetadataFilter(key=SESSION_KEY, value=session_id, operator=FilterOperator.EQ)]
        )
        self._refresh_if_listable()

    def _simple_data(self) -> Any:
        """``SimpleVectorStore``'s data, which it exposes instead of ``get_nodes``."""
        return self._store.data if isinstance(self._store, SimpleVectorStore) else None

    def _write(self, units: list[int], matrix: np.ndarray) -> None:
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
        query = VectorStoreQuery(
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
            hits.append((node_id, score, stored_vector(getattr(node, "embedding", None), self._dimension)))
        return hits

    def _fetch(self, units: list[int]) -> dict[int, np.ndarray]:
        data = self._simple_data()
        out: dict[int, np.ndarray] = {}
        if data is not None:
            for unit in units:
                vector = stored_vector(data.embedding_dict.get(self.node_id(unit)), self._dimension)
                if vector is not None:
                    out[unit] = vector
            return out
        try:
            nodes = self._store.get_nodes(node_ids=[self.node_id(u) for u in units])
        except NotImplementedError:
            return out  # this store cannot return nodes: only the local copy is available
        for node in nodes:
            found = self._unit_of(node.node_id)
            vector = stored_vector(node.embedding, self._dimension)
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
                    listed[unit] = stored_vector(data.embedding_dict.get(node_id), self._dimension)
            return listed
        try:
            nodes = self._store.get_nodes(filters=self._filters)
        except NotImplementedError:
            return None
        for node in nodes:
            unit = self._unit_of(node.node_id)
            if unit is not None and node.metadata.get(SESSION_KEY) == self._session_id:
                listed[unit] = stored_vector(node.embedding, self._dimension)
        return listed

    def _delete_session(self) -> None:
        self._store.delete(self._document_id)

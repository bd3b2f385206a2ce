"""`LlamaIndexVectorIndex`: a session's recall vectors in a LlamaIndex vector store.

Many servers can share one store (``SimpleVectorStore``, or an integration
store: Qdrant, Chroma, PGVector, ...) instead of each keeping a `FaissIndex`
of its own; the behaviour every such adapter shares (tenant and session walls,
log generations, cosine similarity, the local id set and vector copy) is
described in ``convmem.integration.StoreBackedIndex``.
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
from convmem.integration import (
    SCOPE_KEY,
    SESSION_KEY,
    StoreBackedIndex,
    legacy_session_key,
    stored_vector,
)

__all__ = ["LlamaIndexVectorIndex"]


def _filters(match: dict[str, str]) -> MetadataFilters:
    return MetadataFilters(
        filters=[MetadataFilter(key=k, value=v, operator=FilterOperator.EQ) for k, v in match.items()]
    )


class LlamaIndexVectorIndex(StoreBackedIndex):
    """A session's vectors in a LlamaIndex vector store (``BasePydanticVectorStore``).

    Args:
        vector_store: a store that keeps the embeddings it is given
            (``is_embedding_query`` true) and honours ``MetadataFilters`` in
            ``query``, e.g. ``SimpleVectorStore()``.
        namespace: the tenant, e.g. the ``namespace`` of the convmem store the
            session lives in (what `Recall` passes).
        session_id: the session this adapter reads and writes.
        dimension: vector length (the embedder's).
        user_id: the session's owner, kept in each node's metadata (``convmem_user``).
        generation: the log generation whose vectors this adapter serves
            (``Store.stats(session_id).generation``).
        score_to_similarity: converts the store's score to cosine similarity
            when the vector of a hit is not at hand. ``None`` (default) takes the
            score as cosine similarity, which is what ``SimpleVectorStore``
            reports, and stores using a cosine metric. For a store reporting a
            distance between unit vectors, pass e.g. ``lambda d: 1 - d * d / 2``
            (L2), ``lambda d: 1 - d / 2`` (squared L2) or ``lambda d: 1 - d``
            (cosine distance).
        cache_vectors: keep the vectors this adapter wrote or read in memory for
            ``vectors()`` (see ``convmem.integration.StoreBackedIndex``).

    Each unit is a ``TextNode`` with empty text, the vector, the scope metadata
    and, as source document, ``"convmem-<scope key>"``, so `clear` is one
    ``delete(ref_doc_id)``, which every LlamaIndex store implements, and removes
    every generation of this tenant's session and nothing of another's.
    Removal uses ``delete_nodes(node_ids=...)``. The scope's existing ids are
    read when the adapter is created: from ``SimpleVectorStore``'s data, or
    ``get_nodes(filters=...)`` on stores that implement it.

    For `Recall`, make one per scope with `factory`::

        from llama_index.core.vector_stores import SimpleVectorStore
        shared = SimpleVectorStore()
        recall = Recall(embedder, index_factory=LlamaIndexVectorIndex.factory(shared))
        # or directly:
        index = LlamaIndexVectorIndex(shared, namespace="tenant-a", session_id="s1", dimension=384)
    """

    framework = "llamaindex"

    def __init__(
        self,
        vector_store: Any,
        *,
        namespace: str,
        session_id: str,
        dimension: int,
        user_id: str | None = None,
        generation: str | None = None,
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
            namespace=namespace,
            session_id=session_id,
            dimension=dimension,
            user_id=user_id,
            generation=generation,
            score_to_similarity=score_to_similarity,
            cache_vectors=cache_vectors,
        )
        self._document_id = f"convmem-{self.scope_key}"
        self._scope_filters = _filters({SCOPE_KEY: self.scope_key})
        self._filters = _filters(self.match())
        self._open()

    def _scope_changed(self) -> None:
        self._filters = _filters(self.match())

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
                metadata=self.metadata(unit),
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
            if node is not None and not self._matches(node.metadata):
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
            if found is not None and vector is not None and self._matches(node.metadata):
                out[found] = vector
        return out

    def _list(self) -> dict[str, np.ndarray | None] | None:
        data = self._simple_data()
        listed: dict[str, np.ndarray | None] = {}
        if data is not None:
            for node_id, metadata in data.metadata_dict.items():
                if metadata.get(SCOPE_KEY) == self.scope_key and self._parse(node_id) is not None:
                    listed[node_id] = stored_vector(data.embedding_dict.get(node_id), self._dimension)
            return listed
        try:
            nodes = self._store.get_nodes(filters=self._scope_filters)
        except NotImplementedError:
            return None
        for node in nodes:
            if node.metadata.get(SCOPE_KEY) == self.scope_key and self._parse(node.node_id) is not None:
                listed[node.node_id] = stored_vector(node.embedding, self._dimension)
        return listed

    def _delete_scope(self) -> None:
        self._store.delete(self._document_id)

    def _delete_legacy(self) -> int:
        # convmem 0.1 gave every node of a session id one source document, whoever's it was.
        document_id = f"convmem-session-{legacy_session_key(self._session_id)}"
        data = self._simple_data()
        if data is not None:
            found = sum(1 for ref in data.text_id_to_ref_doc_id.values() if ref == document_id)
        else:
            try:
                nodes = self._store.get_nodes(filters=_filters({SESSION_KEY: self._session_id}))
            except NotImplementedError:
                return 0  # they cannot be found here; they are never read either
            found = sum(1 for node in nodes if SCOPE_KEY not in node.metadata)
        if found:
            self._store.delete(document_id)
        return found

"""`LlamaIndexVectorIndex` and `LangChainVectorIndex`: the `VectorIndex` contract over shared stores."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from convmem import (
    ConfigError,
    ConversationMemory,
    HashingEmbedder,
    IndexScope,
    InMemoryStore,
    InvalidSessionIdError,
    Message,
    PostgresStore,
    Recall,
    RedisStore,
    SQLiteStore,
    Store,
    StoreError,
    TiktokenCounter,
    VectorIndex,
    expire_idle,
    forget_session,
)
from convmem._recall.vector_index import FaissIndex

pytest.importorskip("llama_index.core")
pytest.importorskip("langchain_core")

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding, Embeddings
from langchain_core.vectorstores import InMemoryVectorStore, VectorStore
from llama_index.core.schema import NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import VectorStoreQuery, VectorStoreQueryResult
from redis_server import delete_prefix, new_prefix

from convmem.integration import legacy_session_key
from langchain_convmem import LangChainVectorIndex, PrecomputedEmbeddings
from llamaindex_convmem import LlamaIndexVectorIndex

DIM = 16
TENANT = "tenant-a"


def unit_vectors(count: int, dimension: int = DIM, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class Framework:
    """How to make a shared store and an adapter over it, for one framework."""

    def __init__(self, name: str, new_store: Callable[[], Any], adapter: Callable[..., Any]) -> None:
        self.name = name
        self.new_store = new_store
        self.adapter = adapter

    def __repr__(self) -> str:
        return self.name

    def index(self, store: Any = None, session_id: str = "s1", **options: Any) -> Any:
        options.setdefault("namespace", TENANT)
        return self.adapter(
            self.new_store() if store is None else store, session_id=session_id, dimension=DIM, **options
        )


FRAMEWORKS = [
    Framework("llamaindex", SimpleVectorStore, LlamaIndexVectorIndex),
    Framework("langchain", lambda: InMemoryVectorStore(PrecomputedEmbeddings()), LangChainVectorIndex),
]


@pytest.fixture(params=FRAMEWORKS, ids=repr)
def framework(request: pytest.FixtureRequest) -> Framework:
    framework: Framework = request.param
    return framework


def hit_ids(hits: Iterable[tuple[int, float]]) -> list[int]:
    return [unit for unit, _ in hits]


# -- the VectorIndex contract ----------------------------------------------------------------


def test_adapter_satisfies_the_protocol(framework: Framework) -> None:
    assert isinstance(framework.index(), VectorIndex)


def test_search_finds_the_vector_itself_first(framework: Framework) -> None:
    vectors = unit_vectors(50)
    index = framework.index()
    index.add(range(100, 150), vectors)
    best_id, similarity = index.search(vectors[7], 3)[0]
    assert best_id == 107
    assert similarity == pytest.approx(1.0, abs=1e-5)


def test_search_returns_at_most_what_is_stored(framework: Framework) -> None:
    index = framework.index()
    index.add([1, 2], unit_vectors(2))
    assert len(index.search(unit_vectors(1, seed=1)[0], 10)) == 2


def test_search_skips_excluded_ids(framework: Framework) -> None:
    vectors = unit_vectors(10)
    index = framework.index()
    index.add(range(10), vectors)
    assert 3 not in hit_ids(index.search(vectors[3], 5, exclude=[3]))


def test_search_still_returns_k_results_when_some_are_excluded(framework: Framework) -> None:
    vectors = unit_vectors(10)
    index = framework.index()
    index.add(range(10), vectors)
    assert len(index.search(vectors[3], 5, exclude=[3, 4, 5])) == 5


def test_search_results_are_best_first(framework: Framework) -> None:
    index = framework.index()
    index.add(range(30), unit_vectors(30))
    similarities = [s for _, s in index.search(unit_vectors(1, seed=9)[0], 10)]
    assert similarities == sorted(similarities, reverse=True)


def test_search_with_k_zero_returns_nothing(framework: Framework) -> None:
    index = framework.index()
    index.add([1], unit_vectors(1))
    assert index.search(unit_vectors(1)[0], 0) == []


def test_removed_ids_are_not_found(framework: Framework) -> None:
    vectors = unit_vectors(10)
    index = framework.index()
    index.add(range(10), vectors)
    index.remove([3])
    assert 3 not in index
    assert 3 not in hit_ids(index.search(vectors[3], 10))
    assert len(index) == 9


def test_removing_unknown_ids_is_ignored(framework: Framework) -> None:
    index = framework.index()
    index.add([1, 2], unit_vectors(2))
    index.remove([7, 8])
    assert index.ids() == {1, 2}


def test_adding_an_existing_id_replaces_its_vector(framework: Framework) -> None:
    vectors = unit_vectors(3)
    index = framework.index()
    index.add([1, 2], vectors[:2])
    index.add([1], vectors[2:3])
    assert len(index) == 2
    np.testing.assert_allclose(index.vectors([1])[1], vectors[2], rtol=1e-5)
    assert index.search(vectors[2], 1)[0][0] == 1
    assert index.search(vectors[0], 2)[0][1] < 0.99  # the old vector is gone from the store


def test_ids_len_and_contains_follow_add_and_remove(framework: Framework) -> None:
    index = framework.index()
    index.add([5, 6, 7], unit_vectors(3))
    index.remove([6])
    assert index.ids() == {5, 7}
    assert len(index) == 2
    assert 5 in index
    assert 6 not in index


def test_vectors_returns_stored_vectors_of_present_ids_only(framework: Framework) -> None:
    vectors = unit_vectors(4)
    index = framework.index()
    index.add([10, 11, 12, 13], vectors)
    found = index.vectors([11, 99])
    assert set(found) == {11}
    np.testing.assert_allclose(found[11], vectors[1], rtol=1e-5)


def test_vectors_are_stored_normalized(framework: Framework) -> None:
    vector = unit_vectors(1)
    index = framework.index()
    index.add([1], 7.5 * vector)
    np.testing.assert_allclose(index.vectors([1])[1], vector[0], rtol=1e-5)


def test_similarity_is_the_cosine_of_the_vectors(framework: Framework) -> None:
    stored, query = unit_vectors(2)
    index = framework.index()
    index.add([1], 3.0 * stored)
    [(_, similarity)] = index.search(0.5 * query, 1)
    assert similarity == pytest.approx(float(stored @ query), abs=1e-5)


def test_results_match_the_faiss_index(framework: Framework) -> None:
    pytest.importorskip("faiss")
    vectors = unit_vectors(40)
    faiss_index = FaissIndex(DIM)
    faiss_index.add(range(40), vectors)
    index = framework.index()
    index.add(range(40), vectors)
    for query in unit_vectors(5, seed=3):
        expected = faiss_index.search(query, 5, exclude=[1, 2])
        got = index.search(query, 5, exclude=[1, 2])
        assert hit_ids(got) == hit_ids(expected)
        np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], atol=1e-5)


def test_memory_per_vector_covers_the_vector_and_its_id(framework: Framework) -> None:
    index = framework.index()
    index.add(range(10), unit_vectors(10))
    assert index.bytes_per_vector() >= DIM * 4 + 8


def test_kind_names_the_framework_and_store(framework: Framework) -> None:
    assert framework.index().kind.startswith(f"{framework.name}:")


# -- sessions are walls ----------------------------------------------------------------------


def test_sessions_sharing_a_store_never_see_each_others_units(framework: Framework) -> None:
    store = framework.new_store()
    alice = framework.index(store, "alice")
    bob = framework.index(store, "bob")
    vectors = unit_vectors(10)
    alice.add(range(10), vectors)
    bob.add(range(10, 20), vectors + 1e-4)  # near-identical content, other ids
    for query in vectors:
        assert set(hit_ids(alice.search(query, 20))) <= set(range(10))
        assert set(hit_ids(bob.search(query, 20))) <= set(range(10, 20))
    assert alice.ids() == set(range(10))
    assert alice.vectors(range(10, 20)) == {}


def test_the_same_unit_id_in_two_sessions_is_two_units(framework: Framework) -> None:
    store = framework.new_store()
    alice = framework.index(store, "alice")
    bob = framework.index(store, "bob")
    vectors = unit_vectors(2)
    alice.add([1], vectors[:1])
    bob.add([1], vectors[1:])
    np.testing.assert_allclose(alice.vectors([1])[1], vectors[0], rtol=1e-5)
    np.testing.assert_allclose(bob.vectors([1])[1], vectors[1], rtol=1e-5)


def test_removing_a_unit_leaves_the_same_unit_of_another_session(framework: Framework) -> None:
    store = framework.new_store()
    alice = framework.index(store, "alice")
    bob = framework.index(store, "bob")
    vectors = unit_vectors(3)
    alice.add(range(3), vectors)
    bob.add(range(3), vectors)
    alice.remove([1])
    assert hit_ids(bob.search(vectors[1], 1)) == [1]
    assert 1 not in hit_ids(alice.search(vectors[1], 3))


def test_clear_deletes_this_session_only(framework: Framework) -> None:
    store = framework.new_store()
    alice = framework.index(store, "alice")
    bob = framework.index(store, "bob")
    vectors = unit_vectors(5)
    alice.add(range(5), vectors)
    bob.add(range(5), vectors)
    alice.clear()
    assert len(alice) == 0
    assert alice.search(vectors[0], 5) == []
    assert len(bob.search(vectors[0], 5)) == 5
    assert framework.index(store, "alice").ids() == set()


def test_clear_deletes_units_another_adapter_of_the_session_wrote(framework: Framework) -> None:
    store = framework.new_store()
    first = framework.index(store, "alice")
    second = framework.index(store, "alice")
    second.add(range(4), unit_vectors(4))
    first.clear()
    assert framework.index(store, "alice").ids() == set()


@pytest.mark.parametrize("other", ["a", "a:1", "a\\", "../a", "*", "a:1:2"])
def test_look_alike_session_ids_are_separate(framework: Framework, other: str) -> None:
    store = framework.new_store()
    mine = framework.index(store, "a:1")
    theirs = framework.index(store, other)
    vectors = unit_vectors(4)
    theirs.add(range(4), vectors)
    if other == "a:1":
        assert hit_ids(mine.search(vectors[0], 1)) == [0]
    else:
        assert mine.search(vectors[0], 4) == []


# -- several adapters, one session -----------------------------------------------------------


def test_a_new_adapter_knows_the_units_already_in_the_store(framework: Framework) -> None:
    store = framework.new_store()
    vectors = unit_vectors(6)
    framework.index(store, "alice").add(range(6), vectors)
    later = framework.index(store, "alice")
    assert later.ids() == set(range(6))
    np.testing.assert_allclose(later.vectors([2])[2], vectors[2], rtol=1e-5)


def test_refresh_reads_units_another_adapter_wrote_since(framework: Framework) -> None:
    store = framework.new_store()
    first = framework.index(store, "alice")
    second = framework.index(store, "alice")
    second.add([1, 2], unit_vectors(2))
    assert first.ids() == set()
    assert first.refresh() == 2
    assert first.ids() == {1, 2}


def test_search_finds_units_another_adapter_wrote_and_learns_them(framework: Framework) -> None:
    store = framework.new_store()
    first = framework.index(store, "alice")
    second = framework.index(store, "alice")
    vectors = unit_vectors(3)
    second.add(range(3), vectors)
    assert hit_ids(first.search(vectors[2], 1)) == [2]
    assert 2 in first
    np.testing.assert_allclose(first.vectors([2])[2], vectors[2], rtol=1e-5)


def test_without_the_local_copy_vectors_are_read_from_the_store(framework: Framework) -> None:
    vectors = unit_vectors(3)
    index = framework.index(cache_vectors=False)
    index.add(range(3), vectors)
    np.testing.assert_allclose(index.vectors([1])[1], vectors[1], rtol=1e-5)
    assert hit_ids(index.search(vectors[1], 1)) == [1]


# -- bad input --------------------------------------------------------------------------------


def test_add_rejects_mismatched_ids_and_vectors(framework: Framework) -> None:
    with pytest.raises(ConfigError, match="3 ids for 2 vectors"):
        framework.index().add([1, 2, 3], unit_vectors(2))


def test_add_rejects_the_same_id_twice(framework: Framework) -> None:
    with pytest.raises(ConfigError, match="same id twice"):
        framework.index().add([1, 1], unit_vectors(2))


def test_add_rejects_vectors_of_the_wrong_dimension(framework: Framework) -> None:
    with pytest.raises(ConfigError, match=f"{DIM} dimensions"):
        framework.index().add([1], unit_vectors(1, dimension=DIM + 1))


def test_add_rejects_a_zero_vector(framework: Framework) -> None:
    with pytest.raises(ConfigError, match="zero vector"):
        framework.index().add([1], np.zeros((1, DIM), dtype=np.float32))


def test_add_rejects_nan(framework: Framework) -> None:
    vectors = unit_vectors(1)
    vectors[0, 3] = np.nan
    with pytest.raises(ConfigError, match="NaN"):
        framework.index().add([1], vectors)


def test_add_rejects_ids_that_are_not_ints(framework: Framework) -> None:
    with pytest.raises(ConfigError, match="ints"):
        framework.index().add(["1"], unit_vectors(1))


def test_a_rejected_add_stores_nothing(framework: Framework) -> None:
    store = framework.new_store()
    index = framework.index(store)
    with pytest.raises(ConfigError):
        index.add([1, 1], unit_vectors(2))
    assert framework.index(store).ids() == set()


def test_search_rejects_a_query_of_the_wrong_dimension(framework: Framework) -> None:
    index = framework.index()
    index.add([1], unit_vectors(1))
    with pytest.raises(ConfigError, match=f"{DIM} dimensions"):
        index.search(unit_vectors(1, dimension=4)[0], 1)


def test_an_invalid_session_id_is_rejected(framework: Framework) -> None:
    with pytest.raises(InvalidSessionIdError):
        framework.index(session_id="bad\x00id")


@pytest.mark.parametrize("dimension", [0, -3, 2.5, True])
def test_a_bad_dimension_is_rejected(framework: Framework, dimension: Any) -> None:
    with pytest.raises(ConfigError, match="dimension"):
        framework.adapter(framework.new_store(), namespace=TENANT, session_id="s1", dimension=dimension)


# -- LlamaIndex specifics ---------------------------------------------------------------------


def test_llamaindex_nodes_carry_the_session_and_unit() -> None:
    store = SimpleVectorStore()
    index = LlamaIndexVectorIndex(store, namespace=TENANT, session_id="alice", dimension=DIM)
    index.add([42], unit_vectors(1))
    metadata = store.data.metadata_dict[index.node_id(42)]
    assert metadata["convmem_session"] == "alice"
    assert metadata["convmem_unit"] == 42
    assert index.node_id(42).endswith(":42")


class _DistanceReportingStore(SimpleVectorStore):
    """Reports cosine distances, as some stores do, instead of similarities."""

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        result = super().query(query, **kwargs)
        result.similarities = [1.0 - s for s in result.similarities or []]
        return result


def test_llamaindex_store_scores_are_converted_to_similarities() -> None:
    stored, query = unit_vectors(2)
    index = LlamaIndexVectorIndex(
        _DistanceReportingStore(),
        namespace=TENANT,
        session_id="s1",
        dimension=DIM,
        score_to_similarity=lambda distance: 1.0 - distance,
        cache_vectors=False,
    )
    index.add([1], stored)
    [(_, similarity)] = index.search(query, 1)
    assert similarity == pytest.approx(float(stored @ query), abs=1e-5)


class _FilterIgnoringStore(SimpleVectorStore):
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        query.filters = None
        return super().query(query, **kwargs)


def test_llamaindex_walls_hold_even_if_the_store_ignores_filters() -> None:
    store = _FilterIgnoringStore()
    alice = LlamaIndexVectorIndex(store, namespace=TENANT, session_id="alice", dimension=DIM)
    bob = LlamaIndexVectorIndex(store, namespace=TENANT, session_id="bob", dimension=DIM)
    vectors = unit_vectors(4)
    bob.add(range(4), vectors)
    alice.add([9], unit_vectors(1, seed=5))
    assert hit_ids(alice.search(vectors[0], 5)) == [9]


class _TextEmbeddingStore:
    is_embedding_query = False

    def add(self, nodes: Any) -> list[str]:
        return []

    def query(self, query: Any) -> Any:
        return None

    def delete(self, ref_doc_id: str) -> None:
        return None


def test_llamaindex_store_that_embeds_text_itself_is_rejected() -> None:
    with pytest.raises(ConfigError, match="precomputed embeddings"):
        LlamaIndexVectorIndex(_TextEmbeddingStore(), namespace=TENANT, session_id="s1", dimension=DIM)


def test_llamaindex_adapter_rejects_something_that_is_not_a_vector_store() -> None:
    with pytest.raises(ConfigError, match="LlamaIndex vector store"):
        LlamaIndexVectorIndex(object(), namespace=TENANT, session_id="s1", dimension=DIM)


class _BrokenStore(SimpleVectorStore):
    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        raise ConnectionError("vector database unreachable")


def test_llamaindex_store_failure_is_a_store_error() -> None:
    index = LlamaIndexVectorIndex(_BrokenStore(), namespace=TENANT, session_id="s1", dimension=DIM)
    index.add([1], unit_vectors(1))
    with pytest.raises(StoreError, match="unreachable"):
        index.search(unit_vectors(1)[0], 1)


# -- LangChain specifics ----------------------------------------------------------------------


def test_langchain_documents_carry_the_session_unit_and_vector() -> None:
    store = InMemoryVectorStore(PrecomputedEmbeddings())
    index = LangChainVectorIndex(store, namespace=TENANT, session_id="alice", dimension=DIM)
    vectors = unit_vectors(1)
    index.add([42], vectors)
    record = store.store[index.node_id(42)]
    assert record["metadata"]["convmem_session"] == "alice"
    assert record["metadata"]["convmem_unit"] == 42
    np.testing.assert_allclose(record["vector"], vectors[0], rtol=1e-6)


def test_langchain_store_that_cannot_take_vectors_is_rejected() -> None:
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=DIM))
    with pytest.raises(ConfigError, match="PrecomputedEmbeddings"):
        LangChainVectorIndex(store, namespace=TENANT, session_id="s1", dimension=DIM)


def test_langchain_adapter_rejects_something_that_is_not_a_vector_store() -> None:
    with pytest.raises(ConfigError, match="similarity_search_with_score_by_vector"):
        LangChainVectorIndex(object(), namespace=TENANT, session_id="s1", dimension=DIM)


def test_precomputed_embeddings_are_langchain_embeddings() -> None:
    assert isinstance(PrecomputedEmbeddings(), Embeddings)


def test_precomputed_embeddings_refuse_to_embed_a_query_text() -> None:
    with pytest.raises(ConfigError, match="by vector"):
        PrecomputedEmbeddings().embed_query("hello")


def test_precomputed_embeddings_refuse_documents_nobody_staged() -> None:
    store = InMemoryVectorStore(PrecomputedEmbeddings())
    with pytest.raises(ConfigError, match="only serves vectors staged"):
        store.add_documents([Document(page_content="hello")])


def test_precomputed_embeddings_forget_vectors_once_added() -> None:
    embeddings = PrecomputedEmbeddings()
    with embeddings.staged(["a"], [[1.0, 0.0]]), embeddings.staged(["a"], [[1.0, 0.0]]):
        pass
    with pytest.raises(ConfigError):
        embeddings.embed_documents(["a"])


def test_langchain_walls_hold_even_without_a_filter() -> None:
    store = InMemoryVectorStore(PrecomputedEmbeddings())
    alice = LangChainVectorIndex(
        store, namespace=TENANT, session_id="alice", dimension=DIM, metadata_filter=lambda match: None
    )
    bob = LangChainVectorIndex(store, namespace=TENANT, session_id="bob", dimension=DIM)
    vectors = unit_vectors(4)
    bob.add(range(4), vectors)
    alice.add([9], unit_vectors(1, seed=5))
    assert hit_ids(alice.search(vectors[0], 5)) == [9]


class FaissLikeStore(VectorStore):
    """Behaves like community FAISS: ``add_embeddings`` of (text, vector) pairs, squared L2
    distances as scores, dict filters, refuses existing ids on add and unknown ids on delete,
    cannot list or return documents by id."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[np.ndarray, Document]] = {}
        self.filters: list[Any] = []

    def add_embeddings(
        self,
        text_embeddings: Iterable[tuple[str, list[float]]],
        metadatas: list[dict[str, Any]] | None = None,
        ids: list[str] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        pairs = list(text_embeddings)
        assert ids is not None and metadatas is not None
        if any(i in self.rows for i in ids):
            raise ValueError(f"Tried to add ids that already exist: {ids}")
        for (text, vector), metadata, id_ in zip(pairs, metadatas, ids, strict=True):
            self.rows[id_] = (np.asarray(vector), Document(id=id_, page_content=text, metadata=metadata))
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        missing = [i for i in ids or [] if i not in self.rows]
        if missing:
            raise ValueError(f"Some specified ids do not exist in the current store: {missing}")
        for id_ in ids or []:
            del self.rows[id_]
        return True

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict[str, Any] | None = None, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        self.filters.append(filter)
        query = np.asarray(embedding)
        scored = [
            (document, float(np.sum((vector - query) ** 2)))
            for vector, document in self.rows.values()
            if filter is None or all(document.metadata.get(key) == value for key, value in filter.items())
        ]
        return sorted(scored, key=lambda pair: pair[1])[:k]

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        raise NotImplementedError

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings, metadatas: Any = None, **kwargs: Any) -> Any:
        raise NotImplementedError


def test_store_with_add_embeddings_gets_convmems_vectors() -> None:
    store = FaissLikeStore()
    index = LangChainVectorIndex(store, namespace=TENANT, session_id="s1", dimension=DIM)
    vectors = unit_vectors(5)
    index.add(range(5), vectors)
    np.testing.assert_allclose(store.rows[index.node_id(3)][0], vectors[3], rtol=1e-6)


def test_distance_scores_become_cosine_similarities() -> None:
    stored, query = unit_vectors(2)
    index = LangChainVectorIndex(
        FaissLikeStore(), namespace=TENANT, session_id="s1", dimension=DIM, cache_vectors=False
    )
    index.add([1], stored)
    [(_, similarity)] = index.search(query, 1)
    assert similarity == pytest.approx(float(stored @ query), abs=1e-5)


def test_replacing_works_on_a_store_that_refuses_existing_ids() -> None:
    vectors = unit_vectors(2)
    index = LangChainVectorIndex(FaissLikeStore(), namespace=TENANT, session_id="s1", dimension=DIM)
    index.add([1], vectors[:1])
    index.add([1], vectors[1:])
    assert hit_ids(index.search(vectors[1], 2)) == [1]
    assert index.search(vectors[1], 1)[0][1] == pytest.approx(1.0, abs=1e-5)


def test_removing_unknown_ids_works_on_a_store_that_refuses_them() -> None:
    index = LangChainVectorIndex(FaissLikeStore(), namespace=TENANT, session_id="s1", dimension=DIM)
    index.add([1, 2], unit_vectors(2))
    index.remove([2, 77])
    assert index.ids() == {1}


def test_default_filter_is_a_metadata_dict_of_the_scope_and_generation_for_other_stores() -> None:
    store = FaissLikeStore()
    index = LangChainVectorIndex(store, namespace=TENANT, session_id="alice", dimension=DIM, generation="g1")
    index.add([1], unit_vectors(1))
    index.search(unit_vectors(1)[0], 1)
    assert store.filters == [{"convmem_scope": index.scope_key, "convmem_generation": "g1"}]


def test_metadata_filter_builds_the_stores_filter() -> None:
    store = FaissLikeStore()
    index = LangChainVectorIndex(
        store,
        namespace=TENANT,
        session_id="alice",
        dimension=DIM,
        metadata_filter=lambda match: {"convmem_scope": match["convmem_scope"]},
    )
    index.add([1], unit_vectors(1))
    assert hit_ids(index.search(unit_vectors(1)[0], 1)) == [1]
    assert store.filters == [{"convmem_scope": index.scope_key}]


def test_sessions_are_walls_on_a_store_with_dict_filters() -> None:
    store = FaissLikeStore()
    alice = LangChainVectorIndex(store, namespace=TENANT, session_id="alice", dimension=DIM)
    bob = LangChainVectorIndex(store, namespace=TENANT, session_id="bob", dimension=DIM)
    vectors = unit_vectors(4)
    alice.add(range(4), vectors)
    bob.add(range(4), vectors + 1e-4)
    assert set(hit_ids(alice.search(vectors[0], 8))) == set(range(4))
    assert len(store.rows) == 8


def test_a_store_that_cannot_list_starts_with_no_known_ids() -> None:
    store = FaissLikeStore()
    LangChainVectorIndex(store, namespace=TENANT, session_id="s1", dimension=DIM).add([1], unit_vectors(1))
    later = LangChainVectorIndex(store, namespace=TENANT, session_id="s1", dimension=DIM)
    assert later.ids() == set()
    with pytest.raises(ConfigError, match="cannot list"):
        later.refresh()


def test_a_metadata_filter_that_is_not_a_function_is_rejected() -> None:
    with pytest.raises(ConfigError, match="metadata_filter"):
        LangChainVectorIndex(
            FaissLikeStore(),
            namespace=TENANT,
            session_id="s1",
            dimension=DIM,
            metadata_filter={"convmem_session": "s1"},  # type: ignore[arg-type]
        )


# -- Recall over a shared store ------------------------------------------------------


class CountingEmbedder(HashingEmbedder):
    """Counts documents embedded, to show a second server reuses the shared vectors."""

    def __init__(self) -> None:
        super().__init__(64)
        self.documents = 0

    def embed_documents(self, texts: list[str]) -> np.ndarray:  # type: ignore[override]
        self.documents += len(texts)
        return super().embed_documents(texts)


def test_recall_on_two_servers_shares_one_vector_store_and_forget_erases_it() -> None:
    from llama_index.core.vector_stores import SimpleVectorStore

    shared, log = SimpleVectorStore(), InMemoryStore()

    factory = LlamaIndexVectorIndex.factory(shared)
    first_embedder, second_embedder = CountingEmbedder(), CountingEmbedder()
    first = Recall(first_embedder, index_factory=factory)
    memory = ConversationMemory("alice", log, recall=first)
    memory.add_turn("My dog is called Rex and he loves the beach.", "Rex sounds lovely.")
    memory.add_turn("I work as a nurse in Oslo.", "Thank you for your work.")
    ConversationMemory("bob", log, recall=first).add_turn("My dog is called Rex too.", "Two Rexes!")
    assert first_embedder.documents > 0

    second = Recall(second_embedder, index_factory=factory)
    result = second.search(
        "alice",
        "what is my dog called?",
        store=log,
        exclude_seqs=(),
        max_tokens=200,
        counter=TiktokenCounter(),
    )
    assert "Rex" in result.text and "too" not in result.text
    assert second_embedder.documents == 0, "the second server reused the vectors in the shared store"

    second.forget("alice", store=log)
    assert stored_sessions(shared) == {"bob"}


def test_recall_refuses_both_an_index_dir_and_an_index_factory(tmp_path: Path) -> None:

    with pytest.raises(ConfigError, match="not both"):
        Recall(HashingEmbedder(8), index_dir=tmp_path, index_factory=lambda session, dimension: None)  # type: ignore[arg-type,return-value]


# -- tenants, forgets and log generations in a shared store ----------------------------------

COUNTER = TiktokenCounter()
SECRET = "My locker code is 4471 and the spare key hangs behind the blue door."
OTHER_SECRET = "The wifi password at the cabin is lighthouse-27."


def stored_metadata(shared: Any) -> list[dict[str, Any]]:
    """The metadata of every unit in one of the test's shared stores."""
    if isinstance(shared, SimpleVectorStore):
        return list(shared.data.metadata_dict.values())
    return [record["metadata"] for record in shared.store.values()]


def stored_sessions(shared: Any) -> set[str]:
    return {metadata["convmem_session"] for metadata in stored_metadata(shared)}


def stored_scopes(shared: Any) -> set[str]:
    return {metadata["convmem_scope"] for metadata in stored_metadata(shared)}


def shared_recall(framework: Framework, shared: Any, **options: Any) -> Recall:
    return Recall(HashingEmbedder(64), index_factory=framework.adapter.factory(shared), **options)


def index_of(framework: Framework, shared: Any, store: Store, session_id: str = "s1") -> Any:
    """An adapter over the scope of `session_id` in `store`, as another server would make it."""
    stats = store.stats(session_id)
    scope = IndexScope(
        namespace=store.namespace,  # type: ignore[attr-defined]
        session_id=session_id,
        user_id=stats.user_id,
        generation=stats.generation,
        dimension=64,
    )
    return framework.adapter.factory(shared)(scope)


def best_similarity(index: Any, text: str) -> float:
    hits = index.search(HashingEmbedder(64).embed_query(text), 10)
    return max((similarity for _, similarity in hits), default=0.0)


def test_two_tenants_with_the_same_session_id_never_share_vectors(framework: Framework) -> None:
    shared = framework.new_store()
    recall = shared_recall(framework, shared)
    alice, bob = InMemoryStore(), InMemoryStore()
    alice_memory = ConversationMemory("s1", alice, recall=recall)
    alice_memory.add_turn(SECRET, "Noted.")
    alice_memory.add_turn(OTHER_SECRET, "Noted too.")
    ConversationMemory("s1", bob, recall=recall).add_turn(
        "We walked along the river to the old mill.", "How far was the mill?"
    )

    assert best_similarity(index_of(framework, shared, bob), OTHER_SECRET) < 0.5
    assert best_similarity(index_of(framework, shared, alice), SECRET) == pytest.approx(1.0, abs=1e-5)
    assert len(stored_scopes(shared)) == 2


def test_one_tenants_forget_leaves_the_other_tenants_vectors(framework: Framework) -> None:
    shared = framework.new_store()
    recall = shared_recall(framework, shared)
    alice, bob = InMemoryStore(), InMemoryStore()
    ConversationMemory("s1", alice, recall=recall).add_turn(SECRET, "Noted.")
    ConversationMemory("s1", bob, recall=recall).add_turn(
        "We walked along the river to the old mill.", "How far was the mill?"
    )
    bob_units = index_of(framework, shared, bob).ids()

    forget_session(alice, "s1", recall=recall)

    assert stored_scopes(shared) == {index_of(framework, shared, bob).scope_key}
    assert index_of(framework, shared, bob).ids() == bob_units


def test_clearing_a_memory_deletes_its_tenants_vectors_only(framework: Framework) -> None:
    shared = framework.new_store()
    recall = shared_recall(framework, shared)
    alice, bob = InMemoryStore(), InMemoryStore()
    alice_memory = ConversationMemory("s1", alice, recall=recall)
    alice_memory.add_turn(SECRET, "Noted.")
    ConversationMemory("s1", bob, recall=recall).add_turn(
        "We walked along the river to the old mill.", "How far was the mill?"
    )
    bob_key = index_of(framework, shared, bob).scope_key

    alice_memory.clear()

    assert stored_scopes(shared) == {bob_key}


def forget_by_forget_session(store: Store) -> None:
    forget_session(store, "s1")  # no recall=: the vectors stay behind


def forget_by_expire_idle(store: Store) -> None:
    assert expire_idle(store, 0) == ["s1"]


@pytest.mark.parametrize(
    "forget", [forget_by_forget_session, forget_by_expire_idle], ids=["forget", "expire"]
)
def test_a_session_forgotten_without_recall_never_lends_its_vectors_to_the_next(
    framework: Framework, forget: Callable[[Store], None]
) -> None:
    shared = framework.new_store()
    store = InMemoryStore()
    ConversationMemory("s1", store, recall=shared_recall(framework, shared)).add_turn(SECRET, "Noted.")
    forget(store)

    # A new conversation with the same id, served by another process.
    later = ConversationMemory("s1", store, recall=shared_recall(framework, shared))
    later.add_turn("Can you suggest a good book?", "Try Middlemarch.")

    assert best_similarity(index_of(framework, shared, store), SECRET) < 0.5
    generation = store.stats("s1").generation
    assert {metadata["convmem_generation"] for metadata in stored_metadata(shared)} == {generation}


@pytest.mark.redis
def test_a_session_expired_by_redis_ttl_never_lends_its_vectors_to_the_next(
    framework: Framework, redis_url: str
) -> None:
    prefix = new_prefix()
    store = RedisStore(redis_url, prefix=prefix, ttl_seconds=1)
    try:
        shared = framework.new_store()
        ConversationMemory("s1", store, recall=shared_recall(framework, shared)).add_turn(SECRET, "Noted.")
        deadline = time.monotonic() + 30
        while store.stats("s1").message_count and time.monotonic() < deadline:
            time.sleep(0.05)  # Redis expires the session by itself
        assert store.stats("s1").message_count == 0

        later = ConversationMemory("s1", store, recall=shared_recall(framework, shared))
        later.add_turn("Can you suggest a good book?", "Try Middlemarch.")

        assert best_similarity(index_of(framework, shared, store), SECRET) < 0.5
        generation = store.stats("s1").generation
        assert {metadata["convmem_generation"] for metadata in stored_metadata(shared)} == {generation}
    finally:
        store.close()
        delete_prefix(redis_url, prefix)


def test_an_edited_log_keeps_its_other_vectors_under_the_new_generation(framework: Framework) -> None:
    shared = framework.new_store()
    store = InMemoryStore()
    recall = shared_recall(framework, shared)
    memory = ConversationMemory("s1", store, recall=recall)
    memory.add_turn(SECRET, "Noted.")
    memory.add_turn("Can you suggest a good book?", "Try Middlemarch.")
    before = store.stats("s1").generation

    memory.delete_messages([1])
    recall.search("s1", "book", store=store, max_tokens=100, counter=COUNTER)

    after = store.stats("s1").generation
    assert after != before
    assert {metadata["convmem_generation"] for metadata in stored_metadata(shared)} == {after}
    index = index_of(framework, shared, store)
    assert 1 not in index.ids() and 3 in index.ids()
    assert best_similarity(index, "Can you suggest a good book?") == pytest.approx(1.0, abs=1e-5)


def test_the_same_session_in_two_namespaces_has_other_node_ids(framework: Framework) -> None:
    store = framework.new_store()
    mine = framework.index(store, "s1", namespace="tenant-a")
    theirs = framework.index(store, "s1", namespace="tenant-b")
    vectors = unit_vectors(3)
    theirs.add(range(3), vectors)
    assert mine.node_id(1) != theirs.node_id(1)
    assert mine.search(vectors[0], 3) == []
    assert framework.index(store, "s1", namespace="tenant-a").ids() == set()


def test_an_adapter_reads_and_keeps_only_its_generation(framework: Framework) -> None:
    store = framework.new_store()
    framework.index(store, "s1", generation="old").add(range(3), unit_vectors(3))
    current = framework.index(store, "s1", generation="new")
    assert current.ids() == set()
    assert current.search(unit_vectors(3)[0], 3) == []
    assert framework.index(store, "s1", generation="old").ids() == set()  # cleaned when "new" opened


def test_clear_deletes_every_generation_of_its_scope_and_nothing_else(framework: Framework) -> None:
    store = framework.new_store()
    old = framework.index(store, "s1", generation="old")
    old.add([1], unit_vectors(1))
    other_tenant = framework.index(store, "s1", namespace="tenant-b", generation="old")
    other_tenant.add([1], unit_vectors(1))
    old.follow_generation("new")
    old.add([2], unit_vectors(1, seed=4))
    old.clear()
    assert stored_scopes(store) == {other_tenant.scope_key}


def write_legacy_unit(shared: Any, session_id: str, unit: int, vector: np.ndarray) -> None:
    """A unit as convmem 0.1 stored it: keyed by the session id alone."""
    node_id = f"{legacy_session_key(session_id)}:{unit}"
    metadata: dict[str, Any] = {"convmem_session": session_id, "convmem_unit": unit}
    if isinstance(shared, SimpleVectorStore):
        source = RelatedNodeInfo(node_id=f"convmem-session-{legacy_session_key(session_id)}")
        node = TextNode(
            id_=node_id,
            text="",
            embedding=vector.tolist(),
            metadata=metadata,
            relationships={NodeRelationship.SOURCE: source},
        )
        shared.add([node])
    else:
        from convmem.integration import encode_vector

        metadata["convmem_vector"] = encode_vector(vector)
        with shared.embeddings.staged([node_id], [vector.tolist()]):
            shared.add_documents(
                [Document(id=node_id, page_content=node_id, metadata=metadata)], ids=[node_id]
            )


def test_vectors_of_convmem_0_1_are_never_read_and_are_deleted_with_a_warning(
    framework: Framework, caplog: pytest.LogCaptureFixture
) -> None:
    shared = framework.new_store()
    vector = unit_vectors(1)[0]
    write_legacy_unit(shared, "s1", 1, vector)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        index = framework.index(shared, "s1")
    assert index.ids() == set()
    assert index.search(vector, 3) == []
    assert stored_metadata(shared) == []
    assert "convmem 0.1" in caplog.text


def test_recall_embeds_again_a_session_whose_vectors_convmem_0_1_wrote(framework: Framework) -> None:
    shared = framework.new_store()
    store = InMemoryStore()
    store.append("s1", [Message.create("user", SECRET)])
    write_legacy_unit(shared, "s1", 1, unit_vectors(64, dimension=64)[5])  # not SECRET's vector
    recall = shared_recall(framework, shared)
    recall.catch_up("s1", store)
    assert best_similarity(index_of(framework, shared, store), SECRET) == pytest.approx(1.0, abs=1e-5)
    assert all("convmem_scope" in metadata for metadata in stored_metadata(shared))


def test_recall_refuses_a_factory_of_session_id_and_dimension() -> None:
    with pytest.raises(ConfigError, match="IndexScope"):
        Recall(HashingEmbedder(8), index_factory=lambda session_id, dimension: None)  # type: ignore[arg-type,misc,return-value]


def test_forget_without_a_store_refuses_to_choose_between_tenants(framework: Framework) -> None:
    shared = framework.new_store()
    recall = shared_recall(framework, shared)
    alice, bob = InMemoryStore(), InMemoryStore()
    ConversationMemory("s1", alice, recall=recall).add_turn(SECRET, "Noted.")
    ConversationMemory("s1", bob, recall=recall).add_turn(
        "We walked along the river to the old mill.", "How far was the mill?"
    )
    with pytest.raises(ConfigError, match="store="):
        recall.forget("s1")
    assert len(stored_scopes(shared)) == 2


def test_servers_reaching_one_store_share_its_vectors(framework: Framework, tmp_path: Path) -> None:
    shared = framework.new_store()
    first, second = CountingEmbedder(), CountingEmbedder()
    path = tmp_path / "chat.db"
    writer, reader = SQLiteStore(path), SQLiteStore(path)  # two servers on one file
    try:
        memory = ConversationMemory(
            "s1", writer, recall=Recall(first, index_factory=framework.adapter.factory(shared))
        )
        memory.add_turn(SECRET, "Noted.")
        other = Recall(second, index_factory=framework.adapter.factory(shared))
        result = other.search("s1", "locker code", store=reader, max_tokens=200, counter=COUNTER)
    finally:
        writer.close()
        reader.close()
    assert "4471" in result.text
    assert first.documents > 0 and second.documents == 0


@pytest.mark.parametrize("given", ["string", "function"])
def test_a_namespace_given_to_recall_names_the_tenant(framework: Framework, given: str) -> None:
    shared = framework.new_store()
    store = InMemoryStore()
    seen: list[Store] = []

    def acme(of: Store) -> str:
        seen.append(of)
        return "acme"

    recall = Recall(
        HashingEmbedder(64),
        index_factory=framework.adapter.factory(shared),
        namespace="acme" if given == "string" else acme,
    )
    ConversationMemory("s1", store, recall=recall).add_turn(SECRET, "Noted.")
    assert stored_scopes(shared) == {IndexScope("acme", "s1", None, None, 64).key}
    assert all(of is store for of in seen)


@pytest.mark.parametrize("namespace", ["", "   ", "a\x00b", 7])
def test_recall_refuses_an_unusable_namespace(namespace: object) -> None:
    with pytest.raises(ConfigError, match="namespace"):
        Recall(HashingEmbedder(8), namespace=namespace)  # type: ignore[arg-type]


def test_every_convmem_store_names_where_its_data_lives(tmp_path: Path) -> None:
    assert InMemoryStore().namespace != InMemoryStore().namespace
    first, again, other = (SQLiteStore(tmp_path / name) for name in ("a.db", "a.db", "b.db"))
    try:
        assert first.namespace == again.namespace
        assert other.namespace != first.namespace
    finally:
        for store in (first, again, other):
            store.close()


@pytest.mark.redis
def test_a_redis_namespace_names_server_and_prefix_without_credentials(redis_url: str) -> None:
    host_port = redis_url.split("//", 1)[1].split("/", 1)[0]
    with (
        RedisStore(f"redis://someone:hunter2@{host_port}/0", prefix="tenant-a") as one,
        RedisStore(f"redis://{host_port}/0", prefix="tenant-b") as two,
    ):
        assert "hunter2" not in one.namespace and "someone" not in one.namespace
        assert "tenant-a" in one.namespace
        assert one.namespace != two.namespace


@pytest.mark.postgres
def test_a_postgres_vector_factory_refuses_another_stores_sessions(postgres_url: str, schema: str) -> None:
    with PostgresStore(postgres_url, schema=schema) as store:
        factory = store.vector_index_factory("model")
        other = InMemoryStore()
        scope = IndexScope(other.namespace, "s1", None, None, 8, store=other)
        with pytest.raises(ConfigError, match="its own factory"):
            factory(scope)
        assert "://" not in store.namespace and schema in store.namespace

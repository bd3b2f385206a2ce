"""Embedders: the model-free hashing embedder, the MiniLM default and the framework adapters."""

from __future__ import annotations

import numpy as np
import pytest

from convmem import ConfigError
from convmem._embedder import (
    DEFAULT_MODEL,
    Embedder,
    HashingEmbedder,
    LangChainEmbedder,
    LlamaIndexEmbedder,
    SentenceTransformerEmbedder,
    normalize_rows,
)


def test_hashing_embedder_returns_unit_float32_rows() -> None:
    vectors = HashingEmbedder(64).embed_documents(["my dog is called Duoduo", "我喜欢吃苹果"])
    assert vectors.shape == (2, 64)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_hashing_embedder_is_deterministic_across_instances() -> None:
    first = HashingEmbedder().embed_query("the same words")
    second = HashingEmbedder().embed_query("the same words")
    np.testing.assert_array_equal(first, second)


def test_hashing_embedder_puts_shared_words_closer_than_unrelated_ones() -> None:
    embedder = HashingEmbedder()
    query = embedder.embed_query("what is my dog called")
    related, unrelated = embedder.embed_documents(["my dog is called Duoduo", "trains leave at noon"])
    assert float(query @ related) > float(query @ unrelated)


def test_hashing_embedder_gives_chinese_sentences_overlapping_vectors() -> None:
    embedder = HashingEmbedder()
    query = embedder.embed_query("我的狗叫什么名字？")
    related, unrelated = embedder.embed_documents(["我养了一只狗，名字叫多多。", "明天要下雨。"])
    assert float(query @ related) > float(query @ unrelated)


def test_hashing_embedder_names_its_dimension() -> None:
    assert HashingEmbedder(128).name != HashingEmbedder(256).name


def test_hashing_embedder_rejects_a_tiny_dimension() -> None:
    with pytest.raises(ConfigError, match="dimension"):
        HashingEmbedder(2)


def test_embedding_no_documents_gives_an_empty_matrix() -> None:
    assert HashingEmbedder(32).embed_documents([]).shape == (0, 32)


async def test_async_twins_return_what_the_sync_methods_return() -> None:
    embedder = HashingEmbedder()
    np.testing.assert_array_equal(await embedder.aembed_query("hello"), embedder.embed_query("hello"))
    np.testing.assert_array_equal(
        await embedder.aembed_documents(["a b", "c d"]), embedder.embed_documents(["a b", "c d"])
    )


def test_embedders_satisfy_the_protocol() -> None:
    assert isinstance(HashingEmbedder(), Embedder)
    assert isinstance(SentenceTransformerEmbedder(), Embedder)


def test_normalize_rows_keeps_zero_rows_zero() -> None:
    rows = normalize_rows([[3.0, 4.0], [0.0, 0.0]], 2)
    np.testing.assert_allclose(rows, [[0.6, 0.8], [0.0, 0.0]])


def test_normalize_rows_rejects_the_wrong_width() -> None:
    with pytest.raises(ConfigError, match="expected"):
        normalize_rows([[1.0, 2.0, 3.0]], 2)


def test_langchain_embeddings_are_adapted_and_normalized() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    embedder = LangChainEmbedder(DeterministicFakeEmbedding(size=24))
    vectors = embedder.embed_documents(["one", "two"])
    assert embedder.dimension == 24
    assert vectors.shape == (2, 24)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert embedder.name.startswith("langchain:DeterministicFakeEmbedding")


async def test_langchain_adapter_uses_the_async_api() -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    embedder = LangChainEmbedder(DeterministicFakeEmbedding(size=8))
    np.testing.assert_allclose(await embedder.aembed_query("x"), embedder.embed_query("x"), rtol=1e-6)


def test_langchain_adapter_rejects_an_object_without_embedding_methods() -> None:
    with pytest.raises(ConfigError, match="embed_documents"):
        LangChainEmbedder(object())


def test_llamaindex_embeddings_are_adapted_and_normalized() -> None:
    from llama_index.core.embeddings import MockEmbedding

    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=16))
    vectors = embedder.embed_documents(["one", "two", "three"])
    assert embedder.dimension == 16
    assert vectors.shape == (3, 16)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


async def test_llamaindex_adapter_uses_the_async_api() -> None:
    from llama_index.core.embeddings import MockEmbedding

    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=16))
    assert (await embedder.aembed_query("x")).shape == (16,)


def test_llamaindex_adapter_rejects_an_object_without_embedding_methods() -> None:
    with pytest.raises(ConfigError, match="BaseEmbedding"):
        LlamaIndexEmbedder(object())


def test_sentence_transformer_embedder_loads_lazily() -> None:
    embedder = SentenceTransformerEmbedder()
    assert embedder._model is None
    assert embedder.name == DEFAULT_MODEL


def test_sentence_transformer_embedder_rejects_a_bad_batch_size() -> None:
    with pytest.raises(ConfigError, match="batch_size"):
        SentenceTransformerEmbedder(batch_size=0)


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    pytest.importorskip("sentence_transformers")
    return SentenceTransformerEmbedder(device="cpu", show_progress=False)


def test_minilm_gives_384_dimensional_unit_vectors(minilm: SentenceTransformerEmbedder) -> None:
    vectors = minilm.embed_documents(["My dog is called Duoduo.", "我养了一只狗。"])
    assert minilm.dimension == 384
    assert vectors.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-4)


def test_minilm_ranks_a_paraphrase_above_an_unrelated_sentence(minilm: SentenceTransformerEmbedder) -> None:
    query = minilm.embed_query("What is the name of my pet?")
    related, unrelated = minilm.embed_documents(["My dog is called Duoduo.", "The train leaves at noon."])
    assert float(query @ related) > float(query @ unrelated)

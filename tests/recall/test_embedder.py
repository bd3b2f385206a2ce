"""Embedders: the base class, the model-free hashing embedder and the MiniLM default.

The LangChain and LlamaIndex adapters are tested with their wrappers
(test_langchain_adapters.py, test_llamaindex_adapters.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from convmem import ConfigError, Embedder, HashingEmbedder, SentenceTransformerEmbedder
from convmem._recall.embedder import DEFAULT_MODEL, BaseEmbedder, normalize_rows


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


class ListEmbedder(BaseEmbedder):
    """A remote-API-like model: returns plain lists, says nothing about its width up front."""

    def __init__(self, width: int = 6, **options: Any) -> None:
        super().__init__(name="list-model", **options)
        self.width = width
        self.calls: list[tuple[int, bool]] = []

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        self.calls.append((len(texts), query))
        return [[float(len(text) + i) for i in range(self.width)] for text in texts]


class ClassAttributeEmbedder(BaseEmbedder):
    name = "fixed-v1"
    dimension = 3
    batch_size = 2

    def _embed(self, texts: list[str], *, query: bool) -> list[list[float]]:
        return [[1.0, 2.0, 2.0] for _ in texts]


def test_a_base_embedder_learns_its_dimension_from_the_first_vectors() -> None:
    embedder = ListEmbedder(width=6)
    vectors = embedder.embed_documents(["one", "two"])
    assert embedder.dimension == 6
    assert embedder.calls == [(2, False)]
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_asking_a_base_embedder_its_dimension_first_embeds_one_probe_text() -> None:
    embedder = ListEmbedder(width=5)
    assert embedder.dimension == 5
    assert embedder.calls == [(1, True)]


def test_a_given_dimension_is_checked_against_the_models_vectors() -> None:
    embedder = ListEmbedder(width=5, dimension=4)
    assert embedder.dimension == 4
    with pytest.raises(ConfigError, match="expected"):
        embedder.embed_query("hello")


def test_a_base_embedder_batches_documents() -> None:
    embedder = ListEmbedder(batch_size=2)
    assert embedder.embed_documents(["a", "b", "c", "d", "e"]).shape == (5, 6)
    assert embedder.calls == [(2, False), (2, False), (1, False)]


async def test_a_base_embedder_runs_the_sync_model_for_async_callers() -> None:
    embedder = ListEmbedder()
    np.testing.assert_array_equal(await embedder.aembed_query("hi"), embedder.embed_query("hi"))


def test_a_base_embedder_names_itself_in_its_repr() -> None:
    assert repr(ListEmbedder()) == "ListEmbedder('list-model')"


def test_name_and_dimension_can_be_class_attributes() -> None:
    embedder = ClassAttributeEmbedder()
    assert (embedder.name, embedder.dimension, embedder.batch_size) == ("fixed-v1", 3, 2)
    np.testing.assert_allclose(embedder.embed_query("x"), [1 / 3, 2 / 3, 2 / 3], rtol=1e-6)
    assert isinstance(embedder, Embedder)


@pytest.mark.parametrize("options", [{"dimension": 0}, {"dimension": "384"}, {"batch_size": 0}])
def test_a_base_embedder_rejects_a_bad_dimension_or_batch_size(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="must be None or an int from 1 to"):
        ListEmbedder(**options)


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

"""`FaissIndex`: exact when small, HNSW when large, deletes, and files; `IndexFiles`: a folder of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from convmem import ConfigError, VectorIndex
from convmem._recall.vector_index import FaissIndex, IndexFileError, IndexFiles

pytest.importorskip("faiss")


def unit_vectors(count: int, dimension: int = 16, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, dimension)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_search_finds_the_vector_itself_first() -> None:
    vectors = unit_vectors(50)
    index = FaissIndex(16)
    index.add(range(100, 150), vectors)
    best_id, similarity = index.search(vectors[7], 3)[0]
    assert best_id == 107
    assert similarity == pytest.approx(1.0, abs=1e-5)


def test_search_returns_at_most_what_is_stored() -> None:
    index = FaissIndex(16)
    index.add([1, 2], unit_vectors(2))
    assert len(index.search(unit_vectors(1)[0], 10)) == 2


def test_search_skips_excluded_ids() -> None:
    vectors = unit_vectors(10)
    index = FaissIndex(16)
    index.add(range(10), vectors)
    assert 3 not in [i for i, _ in index.search(vectors[3], 5, exclude=[3])]


def test_removed_ids_are_not_found() -> None:
    vectors = unit_vectors(10)
    index = FaissIndex(16)
    index.add(range(10), vectors)
    index.remove([3])
    assert 3 not in index
    assert 3 not in [i for i, _ in index.search(vectors[3], 10)]
    assert len(index) == 9


def test_adding_an_existing_id_replaces_its_vector() -> None:
    vectors = unit_vectors(3)
    index = FaissIndex(16)
    index.add([1, 2], vectors[:2])
    index.add([1], vectors[2:3])
    assert len(index) == 2
    np.testing.assert_allclose(index.vectors([1])[1], vectors[2], rtol=1e-6)


def test_index_becomes_hnsw_above_the_threshold() -> None:
    index = FaissIndex(16, hnsw_threshold=40)
    index.add(range(30), unit_vectors(30))
    assert index.kind == "flat"
    index.add(range(30, 60), unit_vectors(30, seed=1))
    assert index.kind == "hnsw"
    assert len(index) == 60


def test_hnsw_hides_removed_ids_and_accepts_them_again() -> None:
    vectors = unit_vectors(80)
    index = FaissIndex(16, hnsw_threshold=40)
    index.add(range(80), vectors)
    index.remove([5])
    assert 5 not in [i for i, _ in index.search(vectors[5], 10)]
    index.add([5], vectors[5:6])
    assert index.search(vectors[5], 1)[0][0] == 5


def test_hnsw_finds_the_exact_vector() -> None:
    vectors = unit_vectors(300)
    index = FaissIndex(16, hnsw_threshold=100)
    index.add(range(300), vectors)
    hits = [index.search(vectors[i], 1)[0][0] for i in range(0, 300, 10)]
    assert hits == list(range(0, 300, 10))


def test_vectors_returns_stored_vectors_of_present_ids_only() -> None:
    vectors = unit_vectors(4)
    index = FaissIndex(16)
    index.add([10, 11, 12, 13], vectors)
    found = index.vectors([11, 99])
    assert set(found) == {11}
    np.testing.assert_allclose(found[11], vectors[1], rtol=1e-6)


@pytest.mark.parametrize("threshold", [1000, 20])
def test_saved_index_loads_with_identical_results(tmp_path: Path, threshold: int) -> None:
    vectors = unit_vectors(60)
    index = FaissIndex(16, hnsw_threshold=threshold)
    index.add(range(60), vectors)
    index.remove([4])
    index.save(tmp_path / "s.faiss")
    loaded = FaissIndex.load(tmp_path / "s.faiss", hnsw_threshold=threshold)
    assert loaded.kind == index.kind
    assert loaded.ids() == index.ids()
    for i in (0, 17, 59):
        assert loaded.search(vectors[i], 5) == index.search(vectors[i], 5)


def test_loading_a_truncated_file_raises_index_file_error(tmp_path: Path) -> None:
    index = FaissIndex(16)
    index.add(range(20), unit_vectors(20))
    path = tmp_path / "s.faiss"
    index.save(path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(IndexFileError):
        FaissIndex.load(path)


def test_loading_garbage_raises_index_file_error(tmp_path: Path) -> None:
    path = tmp_path / "s.faiss"
    path.write_bytes(b"not a faiss index at all")
    with pytest.raises(IndexFileError):
        FaissIndex.load(path)


def test_loading_a_missing_file_raises_index_file_error(tmp_path: Path) -> None:
    with pytest.raises(IndexFileError, match="cannot read"):
        FaissIndex.load(tmp_path / "missing.faiss")


def test_memory_per_vector_covers_the_vector_and_its_id() -> None:
    index = FaissIndex(384)
    index.add(range(10), unit_vectors(10, 384))
    assert index.bytes_per_vector() >= 384 * 4 + 8


def test_add_rejects_mismatched_ids_and_vectors() -> None:
    with pytest.raises(ConfigError, match="ids"):
        FaissIndex(16).add([1, 2, 3], unit_vectors(2))


def test_faiss_index_satisfies_the_protocol() -> None:
    assert isinstance(FaissIndex(8), VectorIndex)


# -- IndexFiles ------------------------------------------------------------------------

IDENTITY = {"embedder": "hashing-v1-16", "dimension": 16}


def saved_files(tmp_path: Path) -> tuple[IndexFiles, FaissIndex]:
    files = IndexFiles(tmp_path / "vectors")
    index = FaissIndex(16)
    index.add(range(5), unit_vectors(5))
    files.save("s1", index, IDENTITY, {"last_indexed_seq": 4})
    return files, index


def test_index_files_load_what_they_saved(tmp_path: Path) -> None:
    files, index = saved_files(tmp_path)
    loaded = files.load("s1", IDENTITY)
    assert loaded is not None and loaded.ids() == index.ids()


def test_index_files_load_nothing_for_a_session_never_saved(tmp_path: Path) -> None:
    assert IndexFiles(tmp_path).load("never", IDENTITY) is None


def test_index_files_refuse_an_index_made_with_another_identity(tmp_path: Path) -> None:
    files, _ = saved_files(tmp_path)
    with pytest.raises(IndexFileError, match="manifest does not match"):
        files.load("s1", {**IDENTITY, "embedder": "another-model"})


def test_index_files_refuse_a_file_that_does_not_match_its_checksum(tmp_path: Path) -> None:
    files, _ = saved_files(tmp_path)
    path = files.path("s1")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IndexFileError, match="checksum"):
        files.load("s1", IDENTITY)


def test_index_files_refuse_a_file_without_its_manifest(tmp_path: Path) -> None:
    files, _ = saved_files(tmp_path)
    files.manifest_path("s1").unlink()
    with pytest.raises(IndexFileError):
        files.load("s1", IDENTITY)


def test_deleting_index_files_removes_both(tmp_path: Path) -> None:
    files, _ = saved_files(tmp_path)
    files.delete("s1")
    assert not files.path("s1").exists()
    assert not files.manifest_path("s1").exists()
    assert files.load("s1", IDENTITY) is None

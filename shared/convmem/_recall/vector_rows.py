"""Vectors as a vector store keeps them: unit ids that fit its columns, unit-length
float32 rows (so cosine, inner product and L2 rank alike), and vectors written as
text and read back. Shared by `StoreBackedIndex` and the PostgreSQL vector table.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable

import numpy as np

from .._errors import ConfigError

__all__ = ["decode_vector", "encode_vector", "stored_vector", "unit_ids", "unit_rows"]

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def unit_ids(ids: Iterable[int]) -> list[int]:
    """`ids` as unit ids: ints that fit in 64 bits; raises `ConfigError` on anything else."""
    out: list[int] = []
    for value in ids:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ConfigError(f"unit ids must be ints, got {type(value).__name__}: {value!r:.60}")
        unit = int(value)
        if not _INT64_MIN <= unit <= _INT64_MAX:
            raise ConfigError(f"unit id {unit} does not fit in 64 bits")
        out.append(unit)
    return out


def unit_rows(vectors: np.ndarray, dimension: int, what: str) -> np.ndarray:
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


def encode_vector(vector: np.ndarray) -> str:
    """A vector as text (base64 of little-endian float32), for stores that keep only text."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: object, dimension: int) -> np.ndarray | None:
    """`encode_vector` read back, normalized; None when `text` is not such a vector."""
    if not isinstance(text, str):
        return None
    try:
        return stored_vector(np.frombuffer(base64.b64decode(text, validate=True), dtype="<f4"), dimension)
    except (ValueError, TypeError):
        return None


def stored_vector(embedding: object, dimension: int) -> np.ndarray | None:
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

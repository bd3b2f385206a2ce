"""A disk cache of model vectors for benchmarks, keyed by (model name, sha256 of the text),
kept outside the repository: a rerun measures recall, not the model."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from convmem._recall.embedder import BaseEmbedder


def cache_dir() -> Path:
    """Where vectors are cached between runs (outside the repository)."""
    env = os.environ.get("CONVMEM_BENCH_CACHE")
    folder = Path(env) if env else Path(tempfile.gettempdir()) / "convmem-bench-cache"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class CachedEmbedder(BaseEmbedder):
    """A model behind a disk cache keyed by (model name, sha256 of the text): a text is
    embedded once across runs. Reruns of a benchmark then measure recall, not the model.

    `hits` and `misses` count texts served from the cache and embedded now.
    """

    def __init__(self, model: Any, folder: Path | None = None) -> None:
        self.model = model
        super().__init__(name=model.name, dimension=model.dimension)
        path = (folder or cache_dir()) / "vectors.sqlite"
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB)")
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _key(self, text: str) -> bytes:
        return hashlib.sha256(f"{self.model.name}\0{text}".encode("utf-8", "surrogatepass")).digest()

    def lookup(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        keys = {self._key(t): t for t in dict.fromkeys(texts)}
        items = list(keys.items())
        with self._lock:
            for start in range(0, len(items), 500):
                chunk = items[start : start + 500]
                rows = self._db.execute(
                    f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(chunk))})",
                    [key for key, _ in chunk],
                ).fetchall()
                for key, blob in rows:
                    found[keys[key]] = np.frombuffer(blob, dtype=np.float32)
        return found

    def _embed(self, texts: list[str], *, query: bool) -> Any:
        found = self.lookup(texts)
        missing = [t for t in dict.fromkeys(texts) if t not in found]
        self.hits += len(texts) - len(missing)
        self.misses += len(missing)
        if missing:
            # sentence-transformers embeds a query as it embeds a document
            vectors = self.model.embed_documents(missing)
            with self._lock:
                self._db.executemany(
                    "INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                    [
                        (self._key(t), np.asarray(v, dtype=np.float32).tobytes())
                        for t, v in zip(missing, vectors, strict=True)
                    ],
                )
                self._db.commit()
            found.update(zip(missing, vectors, strict=True))
        return np.stack([found[t] for t in texts])

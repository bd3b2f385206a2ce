"""What recall keeps outside the process for a session: vectors in index files next to
the store (adopted when they match the log's generation and the embedder, rebuilt
otherwise)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .columns import is_exchange_unit
from .config import RecallConfig
from .embedder import Embedder
from .units import UNKNOWN, SessionMirror
from .vector_index import FaissIndex, IndexFiles

__all__ = ["SavedVectors", "known_generation", "load_saved", "save_mirror"]

logger = logging.getLogger("convmem")


def known_generation(generation: object) -> str | None:
    """A mirror's generation as a file name wants it: UNKNOWN (never read) names no generation."""
    return generation if isinstance(generation, str) else None


def load_saved(
    files: IndexFiles,
    state: SessionMirror,
    generation: str | None,
    identity: dict[str, Any],
    *,
    hnsw_threshold: int,
) -> None:
    """Adopt the saved index of this log generation when it was made with `identity`;
    otherwise discard it (it is rebuilt from the log)."""
    try:
        state.index = files.load(
            state.session_id, identity, hnsw_threshold=hnsw_threshold, generation=generation
        )
    except Exception as exc:  # anything wrong with derived files means: rebuild
        logger.warning(
            "recall index for session %r at %s is unusable (%s); rebuilding it from the log",
            state.session_id,
            files.path(state.session_id, generation),
            exc,
        )
        files.delete(state.session_id, generation)


def save_mirror(files: IndexFiles, state: SessionMirror, identity: Callable[[int], dict[str, Any]]) -> None:
    """Write the mirror's vectors to its file (`identity(dimension)` goes in the manifest)."""
    with state.lock:
        if state.forgotten or not isinstance(state.index, FaissIndex) or state.generation is UNKNOWN:
            # nothing yet, vectors that live in a shared store, or a log not read yet
            return
        generation = known_generation(state.generation)
        index = state.index
        embedded = [u for u in index.ids() if not is_exchange_unit(u)]
        try:
            files.save(
                state.session_id,
                index,
                identity(index.dimension),
                {"last_indexed_seq": max(embedded, default=0)},
                generation=generation,
            )
            state.unsaved = 0
        except OSError as exc:
            logger.warning(
                "could not save the recall index of %r to %s: %s",
                state.session_id,
                files.path(state.session_id, generation),
                exc,
            )


class SavedVectors:
    """The index files of a `Recall` with an ``index_dir``: each session's vectors, saved
    under its log's generation with what made them (the embedder, the dimension, the
    granularity), adopted at first sight when those match."""

    def __init__(self, index_dir: Path, embedder: Embedder, config: Callable[[], RecallConfig]) -> None:
        self.files = IndexFiles(index_dir)
        self.embedder = embedder
        self.config = config

    def identity(self, dimension: int) -> dict[str, Any]:
        """What a saved index must have been made with to be adopted."""
        return {
            "embedder": self.embedder.name,
            "dimension": dimension,
            "granularity": self.config().granularity,
        }

    def load(self, state: SessionMirror, generation: str | None) -> None:
        """`load_saved` of the session's file for `generation`."""
        identity = self.identity(self.embedder.dimension)
        load_saved(self.files, state, generation, identity, hnsw_threshold=self.config().hnsw_threshold)

    def save(self, state: SessionMirror) -> None:
        """`save_mirror` to the session's file."""
        save_mirror(self.files, state, self.identity)

"""Recall's embedding queue: the units a session's mirror queued, embedded in batches.

Embedding is the slow part of ingest: it runs outside the mirror's lock, a batch
at a time, and each batch is stored as soon as it is embedded, so a failure or a
crash midway keeps what was embedded before it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from .config import RecallConfig
from .plan import EmbedDocuments, Plan
from .units import SessionMirror
from .vector_index import VectorIndex

__all__ = ["EMBED_BATCH_UNITS", "embed_queued"]

logger = logging.getLogger("convmem")

# Units per embedder call: large enough that a model batches and pads well (and a
# bulk import of 512 texts or more still shows the embedder's progress bar), small
# enough that a failure or a crash midway keeps what was embedded before it.
EMBED_BATCH_UNITS = 1024


def embed_queued(
    mirror: SessionMirror, config: RecallConfig, new_index: Callable[[int], VectorIndex]
) -> Plan[bool]:
    """Embed the queued units; embedding, the slow part, runs outside the lock.

    Units go to the embedder `EMBED_BATCH_UNITS` at a time, each batch stored as
    soon as it is embedded, and a text several units share (a message said twice)
    is embedded once. Returns whether the index file is due a rewrite.
    `new_index(dimension)` makes the index when the first vectors arrive. If the
    embedder fails, the batches already embedded are kept and the rest stay
    queued (logged) for a later attempt: a failure never loses a turn.
    """
    with mirror.lock:
        todo = {u: t for u, t in mirror.pending.items() if u not in mirror.inflight}
        mirror.inflight.update(todo)
    ids = list(todo)
    due = False
    for start in range(0, len(ids), EMBED_BATCH_UNITS):
        if mirror.forgotten:  # nothing embedded now would be kept
            with mirror.lock:
                mirror.inflight.difference_update(ids[start:])
            return due
        batch = ids[start : start + EMBED_BATCH_UNITS]
        texts = list(dict.fromkeys(todo[u] for u in batch))
        try:
            vectors = yield EmbedDocuments(texts)
        except Exception as exc:
            left = ids[start:]
            logger.warning(
                "embedding %d recall units of session %r failed (%s: %s); they stay queued and "
                "are found by keywords until a later add() embeds them",
                len(left),
                mirror.session_id,
                type(exc).__name__,
                exc,
            )
            with mirror.lock:
                mirror.inflight.difference_update(left)
            return due
        row = {text: i for i, text in enumerate(texts)}
        rows = vectors[[row[todo[u]] for u in batch]] if len(texts) < len(batch) else vectors
        due = _commit(mirror, batch, rows, todo, config, new_index) or due
    return due


def _commit(
    mirror: SessionMirror,
    ids: list[int],
    vectors: np.ndarray,
    todo: dict[int, str],
    config: RecallConfig,
    new_index: Callable[[int], VectorIndex],
) -> bool:
    with mirror.lock:
        mirror.inflight.difference_update(ids)
        if mirror.forgotten:
            return False
        # Only what is still wanted: the log may have moved on while we embedded.
        keep = [i for i, unit in enumerate(ids) if mirror.pending.get(unit) == todo[unit]]
        if not keep:
            return False
        if mirror.index is None:
            mirror.index = new_index(int(vectors.shape[1]))
        mirror.index.add([ids[i] for i in keep], vectors[keep])
        mirror.count_vectors([ids[i] for i in keep], vectors[keep])
        for i in keep:
            mirror.pending.pop(ids[i], None)
        mirror.unsaved += len(keep)
        # Rewriting the file costs O(index): wait for a tenth of it to be new, so saving
        # stays O(1) per vector however long the session (catching up re-embeds anything lost).
        return mirror.unsaved >= max(config.persist_every, len(mirror.index) // 10)

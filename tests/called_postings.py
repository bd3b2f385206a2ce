"""The postings a session's log calls for, derived from the whole log at once: what a
store's keyword index must read back however it wrote them."""

from __future__ import annotations

from convmem import Store
from convmem._recall.config import RecallConfig
from convmem._recall.index_rows import IndexCursor, derive


def called_postings(store: Store, session_id: str, base: int = 0) -> list[tuple[str, int, int, int, int]]:
    """(term, kind, key, count, length) of every posting of the session, sorted; keys are
    `base` | the document's id within the session (`base`: the session's slot, shifted)."""
    batch = derive(
        IndexCursor(),
        store.messages(session_id),
        RecallConfig(),
        session_id=session_id,
        generation=None,
        reset=True,
    )
    rows = [
        (term, 0, base | doc, count, length)
        for doc, counts, length in batch.passages
        for term, count in counts.items()
    ]
    rows += [
        (term, 1, base | first, count, length)
        for first, counts, length, _ in batch.exchanges
        for term, count in counts.items()
    ]
    return sorted(rows)

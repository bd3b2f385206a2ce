"""What an append may leave for later: the rows a store keeps wait for a batch.

After each append the memory asks recall to catch up with ``batched=True``: the rows
a store keeps (`KeptHistories.catch_up`) are written once `WRITE_EVERY` messages are
due, which it finds out from the session's stats. The messages the append stored
already say how far the log reaches at least, so while they leave fewer than that due
nothing is read: the stats would only say to wait. (Another writer's messages are
indexed by the next batch, search, ``flush`` or ``close``, as they would be anyway.)
"""

from __future__ import annotations

from .._stores.base import Store
from .kept_history import WRITE_EVERY
from .kept_route import KeptRoute

__all__ = ["rows_can_wait"]


def rows_can_wait(kept: KeptRoute, store: Store, session_id: str, appended_through: int) -> bool:
    """Whether `store` keeps the session's rows and a log reaching seq `appended_through`
    leaves fewer than `WRITE_EVERY` messages past what this process last saw written."""
    tables = kept.tables(store)
    if tables is None:
        return False
    # The seq this process last saw the rows written through (the one figure batching reads).
    written = kept.histories.written_through(tables, session_id)
    return appended_through - written < WRITE_EVERY

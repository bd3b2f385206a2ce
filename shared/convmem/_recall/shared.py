"""One lexical `Recall` per store in a process, for memories that share it."""

from __future__ import annotations

import threading
import weakref
from typing import Any

from .._stores.base import Store
from .engine import Recall

__all__ = ["shared_lexical_recall"]

_SHARED: weakref.WeakKeyDictionary[Any, Recall] = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def shared_lexical_recall(store: Store) -> Recall:
    """The one `Recall()` (by words, default settings) of `store` in this process.

    Memories of one store that recall by words can share it: it keeps each session's
    mirror once, within its `max_sessions` bound, where a `Recall` per memory keeps a
    copy of every session of the user per memory. A store that cannot be weakly
    referenced gets a `Recall` of its own at each call.
    """
    with _SHARED_LOCK:
        try:
            recall = _SHARED.get(store)
        except TypeError:
            return Recall()
        if recall is None:
            recall = _SHARED[store] = Recall()
        return recall

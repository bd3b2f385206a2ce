"""One lexical `Recall` per store in a process, for memories that share it."""

from __future__ import annotations

import os
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


def _forget_shared_in_child() -> None:
    # A forked child must not take over the parent's recall: a lock a parent thread held at
    # the fork would never be released there. Memories the child makes get a new one.
    global _SHARED, _SHARED_LOCK
    _SHARED = weakref.WeakKeyDictionary()
    _SHARED_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_shared_in_child)

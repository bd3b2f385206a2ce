"""The store a file path names: one `SQLiteStore` per file in a process, shared by every
memory and registry opened on that path (`open_store`).

The one place outside `convmem._stores.sqlite` that names the SQLite backend: choosing
the default durable store for a path is the store layer's business, not the facade's.
"""

from __future__ import annotations

import os
import threading
import weakref
from pathlib import Path

from .sqlite.store import SQLiteStore

__all__ = ["DEFAULT_DB_ENV", "DEFAULT_DB_PATH", "open_store"]

DEFAULT_DB_ENV = "CONVMEM_DB"
DEFAULT_DB_PATH = "convmem.db"

_stores_lock = threading.Lock()
_stores: weakref.WeakValueDictionary[Path, SQLiteStore] = weakref.WeakValueDictionary()


def open_store(path: str | os.PathLike[str] | None = None) -> SQLiteStore:
    """The `SQLiteStore` for `path`, shared by every memory opened on the same file.

    Without a path: ``$CONVMEM_DB``, else ``convmem.db`` in the working directory.
    """
    resolved = Path(path if path is not None else os.environ.get(DEFAULT_DB_ENV, DEFAULT_DB_PATH)).resolve()
    with _stores_lock:
        store = _stores.get(resolved)
        if store is None or store.closed:
            store = SQLiteStore(resolved)
            _stores[resolved] = store
        return store

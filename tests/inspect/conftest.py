"""Stores with a few users and sessions for the inspector's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from inspector_data import fill

from convmem import InMemoryStore, SQLiteStore, Store


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Iterator[Path]:
    """A SQLite file holding the conversations of `fill` (closed: tests open it by URL)."""
    path = tmp_path / "chat.db"
    store = fill(SQLiteStore(path))
    store.close()
    yield path


@pytest.fixture(params=["memory", "sqlite"])
def filled_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The conversations of `fill` in each embedded store: the catalog lists an in-memory
    store by scanning it and a SQLite file by querying its session table."""
    store: Store = InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "chat.db")
    yield fill(store)
    store.close()

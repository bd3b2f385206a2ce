from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from convmem import InMemoryStore, SQLiteStore, Store

pytest_plugins = ("redis_server", "postgres_server", "extras_guard", "llamaindex_engines", "notebook_kernel")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Each embedded store: the behaviour under test must hold for both."""
    if request.param == "memory":
        yield InMemoryStore()
    else:
        sqlite = SQLiteStore(tmp_path / "memory.db")
        yield sqlite
        sqlite.close()

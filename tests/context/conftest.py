"""Fixtures shared by the context tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from shared_stores import SERVER_KINDS, Location, location_for

from convmem import InMemoryStore, Store


@pytest.fixture(params=["memory", "sqlite", *SERVER_KINDS])
def two_handles(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two store objects on the same data (one object for the in-memory store): what one
    memory writes through one, another memory's build must see through the other."""
    if request.param == "memory":
        store = InMemoryStore()
        yield store, store
        return
    location = (
        Location("sqlite", str(tmp_path / "m.db"), "")
        if request.param == "sqlite"
        else location_for(request.param, request)
    )
    first, second = location.open(), location.open()
    yield first, second
    first.close()
    second.close()
    if request.param != "sqlite":
        location.cleanup()

"""Dispose of the aiosqlite engines LlamaIndex's `Memory` opens, on the loop that opened them.

`Memory.from_defaults()` keeps its queue in an in-memory SQLite database reached
through aiosqlite, whose worker thread reports back to the event loop that opened
the connection. Left open, that thread may report after pytest has closed the
test's loop ("Event loop is closed"), failing a later, unrelated test. Tests that
make a `Memory` use the ``llamaindex_engines`` fixture (an async fixture, so its
teardown runs on the test's own loop; engines a sync call opened on a loop of its
own are closed on a fresh one).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

_OPENED: list[tuple[asyncio.AbstractEventLoop, Any]] = []


@pytest.fixture
async def llamaindex_engines(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    sql = pytest.importorskip("llama_index.core.storage.chat_store.sql")
    setup = sql.SQLAlchemyChatStore._setup_connections

    async def recording(self: Any) -> Any:
        engine, factory = await setup(self)
        _OPENED.append((asyncio.get_running_loop(), engine))
        return engine, factory

    monkeypatch.setattr(sql.SQLAlchemyChatStore, "_setup_connections", recording)
    yield
    loop = asyncio.get_running_loop()
    opened = list(_OPENED)
    _OPENED.clear()
    for opened_on, engine in dict.fromkeys(opened):
        if opened_on is loop:
            await engine.dispose()
        else:
            # Opened by a sync call on a loop of its own, now closed: aiosqlite answers each
            # request on the loop that makes it, so a fresh loop can close the connections.
            await asyncio.to_thread(asyncio.run, engine.dispose())

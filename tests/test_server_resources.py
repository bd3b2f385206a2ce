"""A server that runs for months keeps its file descriptors and threads flat.

Threads come and go in a server (a thread per request, executors that grow
and shrink); nothing convmem holds per thread may outlive the thread.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from convmem import Message, SQLiteStore

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def run_in_new_threads(count: int, work: object) -> None:
    for index in range(count):
        thread = threading.Thread(target=work, args=(index,))  # type: ignore[arg-type]
        thread.start()
        thread.join()


# -- SQLite connections ---------------------------------------------------------------------------------


def test_short_lived_threads_leave_no_sqlite_connections_open(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    store.append("warm-up", [Message.create("user", "hi")])
    before = open_fds()

    def append_and_read(index: int) -> None:
        session = f"s{index % 50}"
        store.append(session, [Message.create("user", f"message {index}")])
        assert store.tail(session, 1)[0].text == f"message {index}"

    run_in_new_threads(5_000, append_and_read)
    assert abs(open_fds() - before) <= 10
    assert sum(store.stats(f"s{n}").message_count for n in range(50)) == 5_000
    store.close()


def test_bursts_of_concurrent_threads_do_not_accumulate_connections(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "memory.db", pool_size=2)

    def burst() -> None:
        barrier = threading.Barrier(16)

        def append_together(index: int) -> None:
            barrier.wait()
            store.append("s", [Message.create("user", f"message {index}")])

        threads = [threading.Thread(target=append_together, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # Up to 16 connections (two descriptors each: the database and its -wal) are open
    # during a burst. Afterwards the pool keeps two; SQLite keeps the descriptors of the
    # others for its next opens of the file. So the count follows the peak number of
    # threads inside the store at once, never the number of threads there ever were.
    before = open_fds()
    for _ in range(33):
        burst()
    assert open_fds() - before <= 16 * 2 + 10
    assert store.stats("s").message_count == 33 * 16
    assert len(store._idle) <= 2
    store.close()


def test_close_releases_every_pooled_connection(tmp_path: Path) -> None:
    before = open_fds()
    store = SQLiteStore(tmp_path / "memory.db")
    run_in_new_threads(20, lambda n: store.append("s", [Message.create("user", f"m{n}")]))
    store.close()
    assert open_fds() <= before

"""Reliability of the stores under load, crashes, outages and abuse, with real processes and servers
(a SQLite file, Redis on one node and as a 3-master Cluster, PostgreSQL)."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import re
import signal
import sqlite3
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from postgres_server import PostgresServer, drop_schema, new_schema
from redis_server import (
    RedisClusterServers,
    RedisServer,
    RedisUnavailable,
    open_shared_store,
    skip_or_fail,
)
from shared_stores import SERVER_KINDS, location_for

import convmem
from convmem import (
    InMemoryStore,
    InvalidMessageError,
    InvalidSessionIdError,
    Message,
    PostgresStore,
    RedisStore,
    SQLiteStore,
    Store,
    StoreError,
    TurnStatus,
)
from convmem._models import MAX_CONTENT_DEPTH
from convmem._stores.base import validate_id
from convmem._stores.postgres.migrations import SCHEMA_VERSION

PROCESSES = 8
THREADS_PER_PROCESS = 4
# 25 keeps the default run short; CONVMEM_APPENDS_PER_THREAD=250 gives the full load
# (8 x 4 x 250), which benchmarks/bench_stores.py also measures.
APPENDS_PER_THREAD = int(os.environ.get("CONVMEM_APPENDS_PER_THREAD", "25"))
SESSION_COUNT = 100
# Every BATCH_EVERY-th append writes a question and its answer in one call.
BATCH_EVERY = 5

Ack = tuple[str, int, str]  # session id, seq, text


# -- concurrency: 8 processes x 4 threads ------------------------------------------------------


def append_from_threads(
    kind: str, location: str, prefix: str, process: int, sessions: list[str]
) -> list[Ack]:
    """Run in a child process: THREADS_PER_PROCESS threads append; return every acknowledged message."""
    store = open_shared_store(kind, location, prefix)
    acks: list[Ack] = []
    lock = threading.Lock()
    failures: list[BaseException] = []

    def work(thread: int) -> None:
        try:
            for step in range(APPENDS_PER_THREAD):
                session = sessions[
                    ((process * THREADS_PER_PROCESS + thread) * APPENDS_PER_THREAD + step) % len(sessions)
                ]
                tag = f"{session}|p{process}|t{thread}|{step}"
                batch = [Message.create("user", f"{tag}|q")]
                if step % BATCH_EVERY == 0:
                    batch.append(Message.create("assistant", f"{tag}|a"))
                stored = store.append(session, batch, user_id=f"owner of {session}")
                with lock:
                    acks.extend((session, m.seq or 0, m.text) for m in stored)
        except BaseException as exc:  # reported to the parent below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS_PER_PROCESS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    if failures:
        raise failures[0]
    return acks


@pytest.fixture(scope="module")
def writer_processes() -> Iterator[Any]:
    """PROCESSES spawned children, shared by the tests of this module: starting eight Python
    processes (and importing convmem in each) costs more than most of the work they do."""
    with multiprocessing.get_context("spawn").Pool(PROCESSES) as pool:
        yield pool


def run_writers(pool: Any, kind: str, location: str, prefix: str, sessions: list[str]) -> list[Ack]:
    # One task per child: chunksize 1 and as many tasks as children, so all write at once.
    results = pool.starmap(
        append_from_threads, [(kind, location, prefix, p, sessions) for p in range(PROCESSES)], chunksize=1
    )
    return [ack for result in results for ack in result]


def expected_texts() -> Counter[str]:
    texts: Counter[str] = Counter()
    for step in range(APPENDS_PER_THREAD):
        texts["q"] += 1
        if step % BATCH_EVERY == 0:
            texts["a"] += 1
    return texts


def check_concurrent_log(store: Store, sessions: list[str], acks: list[Ack]) -> None:
    writers = PROCESSES * THREADS_PER_PROCESS
    per_writer = expected_texts()
    assert len(acks) == writers * sum(per_writer.values())

    stored_everywhere: list[str] = []
    for session in sessions:
        stored = store.messages(session)
        # Seqs are exactly 1..N: none lost, none assigned twice, strictly increasing.
        assert [m.seq for m in stored] == list(range(1, len(stored) + 1)), session
        stats = store.stats(session)
        assert (stats.message_count, stats.last_seq) == (len(stored), len(stored))
        assert stats.user_id == f"owner of {session}"
        # No message written to another session shows up here.
        assert [m.text for m in stored if not m.text.startswith(f"{session}|")] == []
        by_seq = {m.seq: m.text for m in stored}
        for ack_session, seq, text in acks:
            if ack_session == session:
                assert by_seq.get(seq) == text
        # A question and its answer appended together sit next to each other.
        for m in stored:
            if m.text.endswith("|a"):
                assert by_seq[(m.seq or 0) - 1] == m.text[:-2] + "|q"
        stored_everywhere.extend(m.text for m in stored)

    assert len(stored_everywhere) == len(set(stored_everywhere)) == len(acks)

    # Each writer saw its own appends to a session get ever larger seqs.
    order: dict[tuple[str, str], list[int]] = defaultdict(list)
    for session, seq, text in acks:
        _, process, thread, _step, _kind = text.split("|")
        order[(session, process + thread)].append(seq)
    assert all(seq_list == sorted(seq_list) for seq_list in order.values())


@pytest.mark.parametrize("session_count", [1, SESSION_COUNT])
def test_sqlite_keeps_every_concurrent_append_exactly_once(
    tmp_path: Path, session_count: int, writer_processes: Any
) -> None:
    path = str(tmp_path / "memory.db")
    SQLiteStore(path).close()
    sessions = [f"session-{i}" for i in range(session_count)]
    acks = run_writers(writer_processes, "sqlite", path, "", sessions)
    with closing(SQLiteStore(path)) as store:
        check_concurrent_log(store, sessions, acks)


@pytest.mark.parametrize("session_count", [1, SESSION_COUNT])
@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_a_server_store_keeps_every_concurrent_append_exactly_once(
    kind: str, session_count: int, request: pytest.FixtureRequest, writer_processes: Any
) -> None:
    location = location_for(kind, request)
    # Ids that need escaping or quoting, spread over a Cluster's slots.
    sessions = [f"session:{{{i}}}'*" for i in range(session_count)]
    try:
        acks = run_writers(writer_processes, kind, location.url, location.namespace, sessions)
        with closing(location.open()) as store:
            check_concurrent_log(store, sessions, acks)
            assert store.sessions() == sorted(sessions)
    finally:
        location.cleanup()


def test_in_memory_store_keeps_every_concurrent_append_exactly_once() -> None:
    store = InMemoryStore()
    sessions = [f"session-{i}" for i in range(SESSION_COUNT)]
    results: list[list[Ack]] = []
    lock = threading.Lock()

    def writer(process: int) -> None:
        acks = _append_with_shared_store(store, process, sessions)
        with lock:
            results.append(acks)

    threads = [threading.Thread(target=writer, args=(p,)) for p in range(PROCESSES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check_concurrent_log(store, sessions, [ack for acks in results for ack in acks])


def _append_with_shared_store(store: Store, process: int, sessions: list[str]) -> list[Ack]:
    acks: list[Ack] = []
    lock = threading.Lock()

    def work(thread: int) -> None:
        for step in range(APPENDS_PER_THREAD):
            session = sessions[
                ((process * THREADS_PER_PROCESS + thread) * APPENDS_PER_THREAD + step) % len(sessions)
            ]
            tag = f"{session}|p{process}|t{thread}|{step}"
            batch = [Message.create("user", f"{tag}|q")]
            if step % BATCH_EVERY == 0:
                batch.append(Message.create("assistant", f"{tag}|a"))
            stored = store.append(session, batch, user_id=f"owner of {session}")
            with lock:
                acks.extend((session, m.seq or 0, m.text) for m in stored)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS_PER_PROCESS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return acks


# -- crash safety -------------------------------------------------------------------------------


def append_until_killed(path: str, ack_path: str, threads: int) -> None:
    """Run in a child process: append 3-message batches forever, logging each acknowledged first seq."""
    store = SQLiteStore(path)
    ack_file = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def work(thread: int) -> None:
        session = f"session-{thread}"
        step = 0
        while True:
            batch = [
                Message.create("user", f"{session} q{step}"),
                Message.create("assistant", f"{session} a{step}"),
                Message.create("user", f"{session} thanks{step}"),
            ]
            stored = store.append(session, batch)
            # One write() per line: a line in the file means the append had returned.
            os.write(ack_file, f"{session} {stored[0].seq} {step}\n".encode())
            step += 1

    workers = [threading.Thread(target=work, args=(t,), daemon=True) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def wait_for_lines(path: Path, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.01)
    raise AssertionError(f"the writer acknowledged fewer than {count} appends in {timeout} s")


def test_sqlite_reopens_with_every_acknowledged_message_after_the_writer_is_killed(tmp_path: Path) -> None:
    path = tmp_path / "memory.db"
    ack_path = tmp_path / "acks.txt"
    SQLiteStore(path).close()
    writer = multiprocessing.get_context("spawn").Process(
        target=append_until_killed, args=(str(path), str(ack_path), 2)
    )
    writer.start()
    try:
        wait_for_lines(ack_path, 300)
    finally:
        os.kill(writer.pid or 0, signal.SIGKILL)
        writer.join()
    assert writer.exitcode == -signal.SIGKILL

    acks = [line.split() for line in ack_path.read_text().splitlines()]
    with sqlite3.connect(path) as raw:
        assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    raw.close()
    with closing(SQLiteStore(path)) as store:
        for session, first_seq, step in acks:
            stored = store.get(session, [int(first_seq), int(first_seq) + 1, int(first_seq) + 2])
            assert [m.text for m in stored] == [
                f"{session} q{step}",
                f"{session} a{step}",
                f"{session} thanks{step}",
            ]
        for session in ("session-0", "session-1"):
            log = store.messages(session)
            # Whole batches only (the append in flight at the kill is all there or absent).
            assert len(log) % 3 == 0
            assert [m.seq for m in log] == list(range(1, len(log) + 1))
            assert store.stats(session).message_count == len(log)
            assert [m.seq for m in store.append(session, [Message.create("user", "after")])] == [len(log) + 1]


# -- closing a SQLite store that threads are using ----------------------------------------------------

CLOSE_ROUNDS = 10
READERS = 4
WRITERS = 2
CALLS_BEFORE_CLOSE = 20


def close_under_threads(path: Path) -> tuple[list[int], list[str]]:
    """Readers and writers call a store until it is closed under them; return their call
    counts and how each one stopped."""
    store = SQLiteStore(path)
    store.append("s", [Message.create("user", f"line {i} " * 40) for i in range(100)], user_id="ana")
    calls = [0] * (READERS + WRITERS)
    stops = [""] * len(calls)
    go = threading.Barrier(len(calls) + 1)

    def read(index: int) -> None:
        store.messages("s")
        store.tail("s", 30)
        store.stats("s")
        store.get_state("s", "summary")
        store.sessions(user_id="ana")

    def write(index: int) -> None:
        store.append("s", [Message.create("user", f"thread {index} says hi")])
        store.put_state("s", "summary", f"call {calls[index]}")

    def loop(index: int) -> None:
        work = read if index < READERS else write
        go.wait()
        while True:
            try:
                work(index)
            except StoreError as exc:
                stops[index] = str(exc)
                return
            except BaseException as exc:  # reported, not raised: the report says which thread
                stops[index] = f"{type(exc).__name__}: {exc}"
                return
            calls[index] += 1

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    go.wait()
    while min(calls) < CALLS_BEFORE_CLOSE and not any(stops):
        time.sleep(0.001)
    store.close()
    for thread in threads:
        thread.join(timeout=60)
    return calls, stops


def use_while_closing(folder: str, report_path: str) -> None:
    """Run in a child, which a crash (a connection closed while another thread runs a
    statement on it) kills; write a JSON report of every round."""
    report: dict[str, list[Any]] = {"calls": [], "stops": []}
    for round_index in range(CLOSE_ROUNDS):
        calls, stops = close_under_threads(Path(folder) / f"round-{round_index}.db")
        report["calls"].extend(calls)
        report["stops"].extend(stops)
    Path(report_path).write_text(json.dumps(report))


def test_closing_a_sqlite_store_while_threads_use_it_neither_crashes_nor_fails_them_uncleanly(
    tmp_path: Path,
) -> None:
    report_path = tmp_path / "report.json"
    child = multiprocessing.get_context("spawn").Process(
        target=use_while_closing, args=(str(tmp_path), str(report_path))
    )
    child.start()
    child.join(timeout=300)
    assert child.exitcode == 0, f"the process died (exit code {child.exitcode}) while the store was closed"
    report = json.loads(report_path.read_text())
    # Every thread was busy when close() came, and its next call raised StoreError saying why.
    assert min(report["calls"]) >= CALLS_BEFORE_CLOSE
    assert [stop for stop in report["stops"] if not re.search(r"SQLiteStore\(.*\) is closed", stop)] == []


def test_every_call_on_a_closed_sqlite_store_raises_store_error(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    store.append("s", [Message.create("user", "hi")], user_id="ana")
    outcomes: list[str] = []

    def call_everything() -> None:
        calls = {
            "append": lambda: store.append("s", [Message.create("user", "late")]),
            "messages": lambda: store.messages("s"),
            "tail": lambda: store.tail("s", 3),
            "get": lambda: store.get("s", [1]),
            "set_status": lambda: store.set_status("s", 1, convmem.TurnStatus.FAILED),
            "stats": lambda: store.stats("s"),
            "get_state": lambda: store.get_state("s", "k"),
            "put_state": lambda: store.put_state("s", "k", "v"),
            "delete_state": lambda: store.delete_state("s", "k"),
            "clear": lambda: store.clear("s"),
            "sessions": lambda: store.sessions(),
            "forget_user": lambda: store.forget_user("ana"),
            "expire_idle": lambda: store.expire_idle(0),
        }
        for name, call in calls.items():
            try:
                call()
            except StoreError as exc:
                outcomes.append("closed" if "is closed" in str(exc) else f"{name}: {exc}")
            else:
                outcomes.append(f"{name} succeeded")

    # A thread that had its own connection before close, and one that starts afterwards.
    connected, closed = threading.Event(), threading.Event()

    def connect_then_call_after_close() -> None:
        store.stats("s")
        connected.set()
        closed.wait(30)
        call_everything()

    had_connection = threading.Thread(target=connect_then_call_after_close)
    had_connection.start()
    assert connected.wait(30)
    store.close()
    closed.set()
    had_connection.join()
    call_everything()
    late_thread = threading.Thread(target=call_everything)
    late_thread.start()
    late_thread.join()
    store.close()  # closing again does nothing
    assert outcomes == ["closed"] * 39


# -- deleted text on disk (SQLite) ---------------------------------------------------------------------


@pytest.fixture
def insecure_sqlite_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """Connections that keep deleted bytes unless told otherwise, as many SQLite builds do."""
    connect = sqlite3.connect

    def connect_keeping_deleted_bytes(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.execute("PRAGMA secure_delete=OFF")
        return conn

    monkeypatch.setattr(sqlite3, "connect", connect_keeping_deleted_bytes)


def files_holding(path: Path, marker: str) -> list[str]:
    """The database file and its companions (-wal, -shm, -journal) that contain `marker`."""
    return sorted(f.name for f in path.parent.glob(path.name + "*") if marker.encode() in f.read_bytes())


@pytest.mark.parametrize("deletion", ["clear", "forget_user", "expire_idle"])
@pytest.mark.usefixtures("insecure_sqlite_default")
def test_a_sqlite_delete_leaves_no_copy_of_the_deleted_text_in_any_file(
    tmp_path: Path, deletion: str
) -> None:
    path = tmp_path / "memory.db"
    with closing(SQLiteStore(path)) as store:
        secret, kept = "secretmarker" + "7" * 20, "keptmarker" + "3" * 20
        store.append(
            "doomed", [Message.create("user", f"{secret} number {i}") for i in range(50)], user_id="ana"
        )
        store.put_state("doomed", "summary", f"the user said {secret}")
        if deletion == "expire_idle":
            time.sleep(0.3)
        store.append("kept", [Message.create("user", f"{kept} stays")], user_id="bob")
        assert files_holding(path, secret) != []

        if deletion == "clear":
            store.clear("doomed")
        elif deletion == "forget_user":
            assert store.forget_user("ana") == ["doomed"]
        else:
            assert store.expire_idle(0.2) == ["doomed"]

        # Checked while the store is still open: the -wal file must not keep the old pages either.
        assert files_holding(path, secret) == []
        assert files_holding(path, kept) != []
        assert store.sessions() == ["kept"]


def test_a_checkpoint_held_back_by_a_reader_is_logged_and_a_repeated_clear_finishes_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "memory.db"
    secret = "secretmarker" + "5" * 20
    with closing(SQLiteStore(path, timeout=0.2)) as store:
        store.append("doomed", [Message.create("user", f"{secret} {i}") for i in range(20)])
        reader = sqlite3.connect(path, isolation_level=None)
        try:
            reader.execute("BEGIN")
            reader.execute(
                "SELECT count(*) FROM messages"
            ).fetchone()  # holds a snapshot from before the delete
            with caplog.at_level("WARNING", logger="convmem"):
                store.clear("doomed")
            assert f"{path}-wal" in caplog.text
            assert store.messages("doomed") == []
        finally:
            reader.close()
        store.clear("doomed")
        assert files_holding(path, secret) == []


# -- Redis outages --------------------------------------------------------------------------------


@pytest.mark.redis
def test_redis_killed_mid_run_fails_cleanly_and_recovers_after_restart(private_redis: RedisServer) -> None:
    store = RedisStore(private_redis.url, prefix="outage", socket_timeout=2)
    acks: list[tuple[str, int, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    stop = threading.Event()

    def work(thread: int) -> None:
        step = 0
        while not stop.is_set():
            batch = [
                Message.create("user", f"t{thread} q{step}"),
                Message.create("assistant", f"t{thread} a{step}"),
            ]
            try:
                stored = store.append("shared", batch, user_id="ana")
            except StoreError as exc:
                with lock:
                    errors.append(exc)
                return
            with lock:
                acks.append(("shared", stored[0].seq or 0, thread * 1_000_000 + step))
            step += 1

    workers = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 30
    while len(acks) < 200 and time.monotonic() < deadline:
        time.sleep(0.005)
    private_redis.kill()
    for worker in workers:
        worker.join(timeout=30)
    stop.set()
    assert len(acks) >= 200
    assert len(errors) == len(workers)
    assert all(re.search(rf"Redis at 127\.0\.0\.1:{private_redis.port}", str(e)) for e in errors)
    with pytest.raises(StoreError, match="reachable"):
        store.tail("shared", 5)

    private_redis.start()
    log = store.messages("shared")
    assert [m.seq for m in log] == list(range(1, len(log) + 1))
    assert len(log) % 2 == 0, "half of a question/answer batch was stored"
    by_seq = {m.seq: m.text for m in log}
    for _, first_seq, tag in acks:
        thread, step = divmod(tag, 1_000_000)
        assert (by_seq[first_seq], by_seq[first_seq + 1]) == (f"t{thread} q{step}", f"t{thread} a{step}")
    assert store.stats("shared").message_count == len(log)
    raw = redis.Redis.from_url(private_redis.url)
    assert raw.hlen("outage:session:{shared}:log") == len(log)
    raw.close()
    assert [m.seq for m in store.append("shared", [Message.create("user", "back")])] == [len(log) + 1]
    assert store.sessions(user_id="ana") == ["shared"]
    store.close()


@pytest.mark.redis
def test_every_kind_of_call_raises_store_error_while_redis_is_down(private_redis: RedisServer) -> None:
    store = RedisStore(private_redis.url, prefix="down", socket_timeout=2)
    store.append("s", [Message.create("user", "hi")])
    private_redis.stop()
    calls = {
        "append": lambda: store.append("s", [Message.create("user", "lost")]),
        "messages": lambda: store.messages("s"),
        "tail": lambda: store.tail("s", 3),
        "get": lambda: store.get("s", [1]),
        "stats": lambda: store.stats("s"),
        "put_state": lambda: store.put_state("s", "k", "v"),
        "get_state": lambda: store.get_state("s", "k"),
        "sessions": lambda: store.sessions(),
        "forget_user": lambda: store.forget_user("ana"),
        "expire_idle": lambda: store.expire_idle(60),
        "clear": lambda: store.clear("s"),
    }
    not_clean = []
    for name, call in calls.items():
        try:
            call()
        except StoreError as exc:
            if "check that Redis is running" not in str(exc):
                not_clean.append(name)
        else:
            not_clean.append(name)
    assert not_clean == []
    private_redis.start()
    assert [m.text for m in store.messages("s")] == ["hi"]
    store.close()


# -- PostgreSQL outages ----------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_killed_mid_run_fails_cleanly_and_recovers_after_restart(
    private_postgres: PostgresServer,
) -> None:
    store = PostgresStore(private_postgres.url, schema="outage", timeout=5)
    acks: list[tuple[int, int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(thread: int) -> None:
        step = 0
        while True:
            batch = [
                Message.create("user", f"t{thread} q{step}"),
                Message.create("assistant", f"t{thread} a{step}"),
            ]
            try:
                stored = store.append("shared", batch, user_id="ana")
            except StoreError as exc:
                with lock:
                    errors.append(exc)
                return
            with lock:
                acks.append((stored[0].seq or 0, thread * 1_000_000 + step))
            step += 1

    workers = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + 60
    while len(acks) < 200 and time.monotonic() < deadline:
        time.sleep(0.005)
    private_postgres.kill()
    for worker in workers:
        worker.join(timeout=60)
    assert len(acks) >= 200
    assert len(errors) == len(workers)
    assert all(re.search(rf"PostgreSQL at 127\.0\.0\.1:{private_postgres.port}", str(e)) for e in errors)
    with pytest.raises(StoreError, match="reachable"):
        store.tail("shared", 5)

    private_postgres.start()
    log = store.messages("shared")  # the pool drops the dead connections and opens new ones
    assert [m.seq for m in log] == list(range(1, len(log) + 1))
    assert len(log) % 2 == 0, "half of a question/answer batch was stored"
    by_seq = {m.seq: m.text for m in log}
    for first_seq, tag in acks:
        thread, step = divmod(tag, 1_000_000)
        assert (by_seq[first_seq], by_seq[first_seq + 1]) == (f"t{thread} q{step}", f"t{thread} a{step}")
    assert store.stats("shared").message_count == len(log)
    assert [m.seq for m in store.append("shared", [Message.create("user", "back")])] == [len(log) + 1]
    assert store.sessions(user_id="ana") == ["shared"]
    store.close()


def every_call(store: Store) -> dict[str, Any]:
    return {
        "append": lambda: store.append("s", [Message.create("user", "lost")], user_id="ana"),
        "messages": lambda: store.messages("s"),
        "tail": lambda: store.tail("s", 3),
        "get": lambda: store.get("s", [1]),
        "set_status": lambda: store.set_status("s", 1, TurnStatus.FAILED),
        "stats": lambda: store.stats("s"),
        "put_state": lambda: store.put_state("s", "k", "v"),
        "get_state": lambda: store.get_state("s", "k"),
        "delete_state": lambda: store.delete_state("s", "k"),
        "sessions": lambda: store.sessions(),
        "forget_user": lambda: store.forget_user("ana"),
        "expire_idle": lambda: store.expire_idle(60),
        "clear": lambda: store.clear("s"),
    }


def calls_that_did_not_fail_cleanly(store: Store, expected: str) -> list[str]:
    not_clean = []
    for name, call in every_call(store).items():
        try:
            call()
        except StoreError as exc:
            if not re.search(expected, str(exc)):
                not_clean.append(f"{name}: {exc}")
        else:
            not_clean.append(f"{name} succeeded")
    return not_clean


@pytest.mark.postgres
def test_every_kind_of_call_raises_store_error_while_postgres_is_down(
    private_postgres: PostgresServer,
) -> None:
    store = PostgresStore(private_postgres.url, schema="down", timeout=1)
    store.append("s", [Message.create("user", "hi")], user_id="ana")
    private_postgres.stop()
    assert calls_that_did_not_fail_cleanly(store, "check that PostgreSQL is running") == []
    private_postgres.start()
    assert [m.text for m in once_reconnected(store.messages, "s")] == ["hi"]
    store.close()


def once_reconnected(call: Any, *args: Any) -> Any:
    """Call until the pool has reconnected: it retries a lost server with a backoff of at most
    one timeout, so a call right after the server returns may still fail (cleanly)."""
    for _ in range(20):
        try:
            return call(*args)
        except StoreError as exc:
            assert "check that PostgreSQL is running" in str(exc)
    raise AssertionError("the store did not reconnect after 20 calls")


@pytest.mark.postgres
def test_a_frozen_postgres_server_gives_store_errors_not_a_hang(private_postgres: PostgresServer) -> None:
    """A server that accepts connections but never answers (SIGSTOP): every call ends by its timeout."""
    store = PostgresStore(private_postgres.url, schema="frozen", timeout=1, max_connections=2)
    store.append("s", [Message.create("user", "hi")], user_id="ana")
    private_postgres.freeze()
    try:
        not_clean = calls_that_did_not_fail_cleanly(store, r"no answer within 1 s|no connection within 1 s")
    finally:
        private_postgres.thaw()
    assert not_clean == []
    # A statement the server had received before it froze may still run once it thaws (the
    # client cannot know): writes are whole or absent, never half there.
    assert [m.text for m in once_reconnected(store.messages, "s")] in (["hi"], ["hi", "lost"])
    store.close()


@pytest.mark.postgres
def test_a_postgres_store_cannot_open_without_a_server() -> None:
    from redis_server import free_port

    with pytest.raises(StoreError, match=r"no connection within 1 s.*check that PostgreSQL is running"):
        PostgresStore(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres", timeout=1)


@pytest.mark.postgres
def test_a_schema_written_by_a_newer_convmem_is_refused(postgres_url: str) -> None:
    schema = new_schema()
    PostgresStore(postgres_url, schema=schema).close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(
            f'INSERT INTO "{schema}".schema_version (version, description) VALUES (99, %s)', ("future",)
        )
    try:
        with pytest.raises(StoreError, match="newer convmem"):
            PostgresStore(postgres_url, schema=schema)
    finally:
        drop_schema(postgres_url, schema)


def open_and_append(url: str, schema: str, index: int) -> int:
    """Run in a child: open the store (creating the schema if no one has yet) and append once."""
    with closing(PostgresStore(url, schema=schema)) as store:
        return store.append("s", [Message.create("user", f"from {index}")])[0].seq or 0


@pytest.mark.postgres
def test_many_processes_opening_a_new_schema_at_once_create_it_once(
    postgres_url: str, writer_processes: Any
) -> None:
    schema = new_schema()
    try:
        seqs = writer_processes.starmap(
            open_and_append, [(postgres_url, schema, i) for i in range(PROCESSES)], chunksize=1
        )
        assert sorted(seqs) == list(range(1, PROCESSES + 1))
        with psycopg.connect(postgres_url) as conn:
            rows = conn.execute(f'SELECT version FROM "{schema}".schema_version ORDER BY version').fetchall()
        assert rows == [(version,) for version in range(1, SCHEMA_VERSION + 1)]
    finally:
        drop_schema(postgres_url, schema)


# -- a Redis Cluster losing a node -------------------------------------------------------------------


@pytest.mark.redis
def test_a_cluster_that_loses_a_master_gives_store_errors_not_a_hang() -> None:
    try:
        cluster = RedisClusterServers().start()
    except RedisUnavailable as exc:
        skip_or_fail(f"a Redis Cluster cannot be started at all: {exc}")
        return
    try:
        store = RedisStore(cluster.url, cluster=True, prefix="lost", socket_timeout=2)
        sessions = [f"s{i}" for i in range(30)]
        for session_id in sessions:
            store.append(session_id, [Message.create("user", "before")])
        cluster.nodes[1].kill()
        outcomes = []
        for session_id in sessions:
            try:
                store.append(session_id, [Message.create("user", "after")])
                outcomes.append("ok")
            except StoreError as exc:
                outcomes.append("reachable" if "reachable" in str(exc) else str(exc))
        # The third of the slots on the lost master fail with a clean error; nothing hangs.
        assert "reachable" in outcomes
        assert set(outcomes) <= {"ok", "reachable"}
        store.close()
    finally:
        cluster.remove()


@pytest.mark.redis
def test_a_persistent_cluster_master_restarted_mid_run_loses_no_acknowledged_append() -> None:
    try:
        cluster = RedisClusterServers(persistent=True).start()
    except RedisUnavailable as exc:
        skip_or_fail(f"a Redis Cluster cannot be started at all: {exc}")
        return
    try:
        store = RedisStore(cluster.url, cluster=True, prefix="restart", socket_timeout=2)
        sessions = [f"s{i}" for i in range(30)]
        acks: dict[str, list[tuple[int, str]]] = defaultdict(list)
        errors: list[StoreError] = []
        lock = threading.Lock()
        stop = threading.Event()

        def work(thread: int) -> None:
            step = 0
            while not stop.is_set():
                session_id = sessions[(thread * 7 + step) % len(sessions)]
                tag = f"t{thread} n{step}"
                batch = [Message.create("user", f"{tag} q"), Message.create("assistant", f"{tag} a")]
                step += 1
                try:
                    stored = store.append(session_id, batch)
                except StoreError as exc:
                    with lock:
                        errors.append(exc)
                    time.sleep(0.05)
                    continue
                with lock:
                    acks[session_id].append((stored[0].seq or 0, tag))

        def acknowledged() -> int:
            with lock:
                return sum(len(batches) for batches in acks.values())

        workers = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for worker in workers:
            worker.start()
        deadline = time.monotonic() + 30
        while acknowledged() < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        cluster.nodes[1].kill()
        deadline = time.monotonic() + 30
        while not errors and time.monotonic() < deadline:
            time.sleep(0.01)
        cluster.nodes[1].start()
        cluster.wait_ok()
        before_recovery = acknowledged()
        deadline = time.monotonic() + 60
        while acknowledged() < before_recovery + 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
        assert not any(worker.is_alive() for worker in workers), "a writer hung"
        # Writers got clean errors while the master was down, and wrote again once it was back.
        assert errors and all(isinstance(e, StoreError) for e in errors)
        assert acknowledged() >= before_recovery + 300

        raw = redis.RedisCluster.from_url(cluster.url)
        lost_node_sessions = 0
        for session_id in sessions:
            log = store.messages(session_id)
            assert [m.seq for m in log] == list(range(1, len(log) + 1)), session_id
            texts = [m.text for m in log]
            assert len(texts) == len(set(texts)), f"a message of {session_id} was stored twice"
            by_seq = {m.seq: m.text for m in log}
            for first_seq, tag in acks[session_id]:
                assert (by_seq.get(first_seq), by_seq.get(first_seq + 1)) == (f"{tag} q", f"{tag} a")
            assert store.stats(session_id).message_count == len(log)
            key = f"restart:session:{{{session_id}}}:log"
            assert raw.hlen(key) == len(log)
            lost_node_sessions += raw.nodes_manager.get_node_from_slot(raw.keyslot(key)).port == (
                cluster.nodes[1].port
            )
        assert lost_node_sessions > 0, "no session lived on the restarted master"
        raw.close()
        store.close()
    finally:
        cluster.remove()


# -- bad input and abuse ------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite", *SERVER_KINDS])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield InMemoryStore()
        return
    if request.param == "sqlite":
        with closing(SQLiteStore(tmp_path / "memory.db")) as sqlite_store:
            yield sqlite_store
        return
    location = location_for(request.param, request)
    with closing(location.open()) as server_store:
        yield server_store
    location.cleanup()


def test_a_10_mb_message_round_trips(any_store: Store) -> None:
    huge = "长" * 1_000_000 + "x" * 9_000_000
    any_store.append("s", [Message.create("user", "before")])
    any_store.append("s", [Message.create("user", huge)])
    [back] = any_store.tail("s", 1)
    assert back.content == huge
    assert [m.text for m in any_store.messages("s", through_seq=1)] == ["before"]


def test_content_nested_to_the_allowed_depth_round_trips(any_store: Store) -> None:
    nested: Any = "deep"
    for _ in range(MAX_CONTENT_DEPTH - 3):
        nested = {"inner": nested}
    message = Message.create("user", [{"type": "text", "text": "see data"}, {"type": "data", "data": nested}])
    any_store.append("s", [message])
    [back] = any_store.messages("s")
    assert back.content == message.content


def test_text_that_is_not_utf8_is_refused_and_nothing_is_written(any_store: Store) -> None:
    any_store.append("s", [Message.create("user", "fine")])
    broken = dataclasses.replace(Message.create("user", "x"), content="half \udc80 a character")
    if isinstance(any_store, InMemoryStore):
        return  # keeps objects, not text: nothing to encode
    with pytest.raises(InvalidMessageError, match="UTF-8"):
        any_store.append("s", [Message.create("user", "ok"), broken])
    assert [m.text for m in any_store.messages("s")] == ["fine"]
    assert any_store.stats("s").message_count == 1


def test_a_nul_in_a_plain_text_field_is_stored_exactly_or_refused_and_nothing_is_written(
    any_store: Store,
) -> None:
    odd = Message.create("assistant", "a\x00b", name="bot\x00name", metadata={"k": "v\x00"})
    try:
        any_store.append("s", [Message.create("user", "ok"), odd])
    except InvalidMessageError as exc:
        assert "NUL" in str(exc)
        assert any_store.messages("s") == []
    else:
        assert [dataclasses.replace(m, seq=None) for m in any_store.messages("s")][1] == odd


def test_message_create_rejects_lone_surrogates() -> None:
    with pytest.raises(InvalidMessageError, match="surrogate"):
        Message.create("user", "bad \ud800")


@pytest.mark.parametrize(
    "bad_id", ["", "   ", "a\x00b", "line\nbreak", "x" * 10_000, "lone \udfff", None, 42]
)
def test_validate_id_rejects_unusable_ids(bad_id: object) -> None:
    with pytest.raises(InvalidSessionIdError):
        validate_id(bad_id)


@pytest.mark.parametrize(
    "good_id", ["../../etc/passwd", "a*", "a?b", "user:42:log", "{tag}", "会话 1", "x" * 256]
)
def test_validate_id_accepts_ids_that_stores_escape(good_id: str) -> None:
    assert validate_id(good_id) == good_id


def test_no_store_module_unpickles_or_evaluates_stored_data() -> None:
    # Every core module, so a store split into new modules is covered without a list to keep up.
    package = Path(convmem.__file__).parent
    modules = sorted(path.relative_to(package).as_posix() for path in package.rglob("*.py"))
    assert {
        "_stores/codec.py",
        "_stores/redis/layout.py",
        "_stores/postgres/queries.py",
        "_stores/sqlite/store.py",
    } <= set(modules)
    forbidden = re.compile(
        r"\bpickle\b|\bmarshal\b|\bshelve\b|(?<![.\w])eval\(|(?<![.\w])exec\(|yaml\.load\("
    )
    offenders = {name: forbidden.findall((package / name).read_text(encoding="utf-8")) for name in modules}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_a_sqlite_store_in_a_with_block_is_closed_at_its_end_even_on_an_error(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "memory.db") as store:
        store.append("s", [Message.create("user", "kept")])
    assert store.closed
    with pytest.raises(StoreError, match="is closed"):
        store.messages("s")
    with pytest.raises(RuntimeError, match="boom"), SQLiteStore(tmp_path / "memory.db") as again:
        raise RuntimeError("boom")
    assert again.closed
    reopened = SQLiteStore(tmp_path / "memory.db")
    assert [m.content for m in reopened.messages("s")] == ["kept"]  # nothing lost by either exit
    reopened.close()
    with InMemoryStore() as memory:
        memory.append("s", [Message.create("user", "hi")])
    assert [m.content for m in memory.messages("s")] == ["hi"]  # nothing to release

"""Store latency and concurrency: SQLite, Redis (one node), a Redis Cluster and PostgreSQL, side by side.

    python benchmarks/bench_stores.py [--messages 10000] [--builds 1000] [--processes 8]
                                      [--threads 4] [--appends 250] [--many 100]
                                      [--stores sqlite,redis,redis-cluster,postgres]

Two measurements per store:

1. One process, one session: ``--messages`` appends (one message per call, token
   counts computed beforehand, as `ConversationMemory.add` does), each timed;
   then ``--builds`` `build_context` calls on that session (default config and
   budget) with the log at its full size, each timed, with a question (keyword
   recall included) and without one (what the store costs a build). p50 and p99.
2. ``--processes`` processes x ``--threads`` threads x ``--appends`` appends (every
   5th a question and its answer in one call) to one session, then to ``--many``
   sessions, all starting together. Throughput, p50/p99 per append, and an
   integrity check of every session: seqs exactly 1..N, no acknowledged message
   lost, none stored twice.

Servers: ``$CONVMEM_REDIS_URL``, ``$CONVMEM_REDIS_CLUSTER_URL`` and
``$CONVMEM_POSTGRES_URL`` if set, else private ones started here on free loopback
ports (Redis without persistence; a 3-master Cluster; PostgreSQL with
``fsync=off``, so its figures are what the network round trips and the server's
work cost, not the disk's), removed at the end. SQLite: WAL,
``synchronous=NORMAL``, a temporary file. Errors are counted, not fatal.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _history import history
from postgres_server import PostgresServer, drop_schema, new_schema
from redis_server import RedisClusterServers, RedisServer, delete_prefix, new_prefix, open_shared_store

from convmem import ConversationMemory, Message, Store, StoreError, TiktokenCounter

KINDS = ("sqlite", "redis", "redis-cluster", "postgres")
LONG_SESSION = "long:{session}'s"


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a store lives, so that any process can open it."""

    kind: str
    location: str
    namespace: str

    def open(self) -> Store:
        return open_shared_store(self.kind, self.location, self.namespace)


def prepared_messages(count: int, seed: int) -> list[Message]:
    """`count` messages with their token counts, as the memory hands them to a store."""
    counter = TiktokenCounter()
    out = []
    for role, text in history(count, seed=seed):
        message = Message.create(role, text)
        out.append(dataclasses.replace(message, token_count=counter.count_message(message)))
    return out


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


# -- 1. one process, one long session -----------------------------------------------------


@dataclasses.dataclass
class SingleRun:
    append_latencies: list[float]
    build_latencies: list[float]
    plain_build_latencies: list[float]
    errors: int


def single_process(target: Target, messages: int, builds: int) -> SingleRun:
    store = target.open()
    errors = 0
    appends: list[float] = []
    try:
        for message in prepared_messages(messages, seed=1):
            start = time.perf_counter()
            try:
                store.append(LONG_SESSION, [message])
            except StoreError:
                errors += 1
            appends.append(time.perf_counter() - start)
        memory = ConversationMemory(LONG_SESSION, store)
        for _ in range(5):  # warm up: tokenizer, connections, prepared statements
            memory.build_context(query="warm up")
        built: list[float] = []
        plain: list[float] = []
        for _ in range(builds):
            start = time.perf_counter()
            try:
                memory.build_context(query="What did we decide about the database migration?")
            except StoreError:
                errors += 1
            built.append(time.perf_counter() - start)
            # Without a query: what the store costs a build, recall left out.
            start = time.perf_counter()
            try:
                memory.build_context()
            except StoreError:
                errors += 1
            plain.append(time.perf_counter() - start)
        return SingleRun(appends, built, plain, errors)
    finally:
        store.close()


# -- 2. processes x threads appending at once -----------------------------------------------

Ack = tuple[str, int, str]  # session, seq, text

_start_together: Any = None


def _keep_barrier(barrier: Any) -> None:
    global _start_together
    _start_together = barrier


def writer_process(
    target: Target, process: int, threads: int, appends: int, sessions: list[str]
) -> tuple[list[Ack], list[float], int, float, float]:
    """Run in a child: `threads` threads append; return acks, latencies, errors, start and end."""
    store = target.open()
    acks: list[Ack] = []
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()

    def work(thread: int) -> None:
        writer = process * threads + thread
        for step in range(appends):
            session = sessions[(writer * appends + step) % len(sessions)]
            tag = f"{session}|p{process}|t{thread}|{step}"
            batch = [Message.create("user", f"{tag}|q")]
            if step % 5 == 0:
                batch.append(Message.create("assistant", f"{tag}|a"))
            start = time.perf_counter()
            try:
                stored = store.append(session, batch, user_id=f"owner of {session}")
            except StoreError:
                with lock:
                    errors[0] += 1
                continue
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                acks.extend((session, m.seq or 0, m.text) for m in stored)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    _start_together.wait(timeout=300)
    began = time.time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    ended = time.time()
    store.close()
    return acks, latencies, errors[0], began, ended


def integrity(store: Store, sessions: list[str], acks: list[Ack]) -> str:
    """Every session's seqs are 1..N, and the stored messages are exactly the acknowledged ones."""
    stored: dict[tuple[str, int], str] = {}
    for session in sessions:
        log = store.messages(session)
        if [m.seq for m in log] != list(range(1, len(log) + 1)):
            return f"GAPS in {session!r}"
        stored.update({(session, m.seq or 0): m.text for m in log})
    acknowledged = {(s, seq): text for s, seq, text in acks}
    lost = sum(1 for key, text in acknowledged.items() if stored.get(key) != text)
    texts = list(stored.values())
    duplicated = len(texts) - len(set(texts))
    unacknowledged = len(stored) - len(acknowledged)
    return f"{lost} lost, {duplicated} duplicated, {unacknowledged} unacknowledged, gapless"


@dataclasses.dataclass
class ConcurrentRun:
    rate: float
    latencies: list[float]
    errors: int
    check: str


def concurrent(target: Target, args: argparse.Namespace, session_count: int) -> ConcurrentRun:
    sessions = [f"writers:{{{i}}}'s chat" for i in range(session_count)]
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(args.processes)
    with context.Pool(args.processes, initializer=_keep_barrier, initargs=(barrier,)) as pool:
        results = pool.starmap(
            writer_process,
            [(target, p, args.threads, args.appends, sessions) for p in range(args.processes)],
            chunksize=1,
        )
    acks = [ack for r in results for ack in r[0]]
    latencies = [x for r in results for x in r[1]]
    calls = len(latencies)
    elapsed = max(r[4] for r in results) - min(r[3] for r in results)
    store = target.open()
    try:
        check = integrity(store, sessions, acks)
    finally:
        store.close()
    return ConcurrentRun(calls / elapsed, latencies, sum(r[2] for r in results), check)


# -- servers -----------------------------------------------------------------------------


@contextmanager
def locations(kinds: list[str], folder: str) -> Iterator[dict[str, tuple[str, str]]]:
    """kind -> (location, note): the configured servers, or private ones for the run."""
    found: dict[str, tuple[str, str]] = {}
    with ExitStack() as stack:
        for kind in kinds:
            if kind == "sqlite":
                found[kind] = (folder, "WAL, synchronous=NORMAL, temporary files")
                continue
            variable = {
                "redis": "CONVMEM_REDIS_URL",
                "redis-cluster": "CONVMEM_REDIS_CLUSTER_URL",
                "postgres": "CONVMEM_POSTGRES_URL",
            }[kind]
            if os.environ.get(variable):
                found[kind] = (os.environ[variable], f"from ${variable}")
                continue
            server: Any
            if kind == "redis":
                server = RedisServer().start()
                note = "private redis-server, no persistence"
            elif kind == "redis-cluster":
                server = RedisClusterServers().start()
                note = "private 3-master Cluster, no persistence"
            else:
                server = PostgresServer().start()
                note = "private PostgreSQL, fsync=off"
            stack.callback(server.remove)
            found[kind] = (server.url, note)
        yield found


def new_target(kind: str, location: str, cleanups: list[Any]) -> Target:
    if kind == "sqlite":
        return Target(kind, f"{location}/{uuid.uuid4().hex}.db", "")
    if kind == "postgres":
        schema = new_schema()
        cleanups.append(lambda: drop_schema(location, schema))
        return Target(kind, location, schema)
    prefix = new_prefix()
    cleanups.append(lambda: delete_prefix(location, prefix, cluster=kind == "redis-cluster"))
    return Target(kind, location, prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000, help="messages in the long session")
    parser.add_argument("--builds", type=int, default=1_000, help="build_context calls on it")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=4, help="threads per process")
    parser.add_argument("--appends", type=int, default=250, help="appends per thread")
    parser.add_argument("--many", type=int, default=100, help="sessions in the many-session run")
    parser.add_argument("--stores", default=",".join(KINDS))
    args = parser.parse_args()
    kinds = args.stores.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown stores {unknown}; choose from {', '.join(KINDS)}")
    began = time.perf_counter()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"Machine: {os.cpu_count()} CPUs, load average {load} at start; Python {sys.version.split()[0]}")

    single_rows, concurrent_rows, notes = [], [], []
    cleanups: list[Any] = []
    with tempfile.TemporaryDirectory() as folder, locations(kinds, folder) as where:
        for kind in kinds:
            notes.append(f"{kind}: {where[kind][0]} ({where[kind][1]})")
        try:
            for kind in kinds:
                location = where[kind][0]
                single = single_process(new_target(kind, location, cleanups), args.messages, args.builds)
                single_rows.append(
                    f"{kind:<14} {ms(statistics.median(single.append_latencies)):>11} "
                    f"{ms(percentile(single.append_latencies, 0.99)):>11} "
                    f"{ms(statistics.median(single.build_latencies)):>11} "
                    f"{ms(percentile(single.build_latencies, 0.99)):>11} "
                    f"{ms(statistics.median(single.plain_build_latencies)):>11} "
                    f"{ms(percentile(single.plain_build_latencies, 0.99)):>11} {single.errors:>7}"
                )
                print(f"  {kind}: one session done", file=sys.stderr, flush=True)
                for session_count in (1, args.many):
                    run = concurrent(new_target(kind, location, cleanups), args, session_count)
                    concurrent_rows.append(
                        f"{kind:<14} {session_count:>8} {run.rate:>11,.0f} {ms(statistics.median(run.latencies)):>9} "
                        f"{ms(percentile(run.latencies, 0.99)):>9} {run.errors:>7}  {run.check}"
                    )
                    print(f"  {kind}: {session_count} sessions done", file=sys.stderr, flush=True)
        finally:
            for cleanup in cleanups:
                cleanup()

    print(
        f"\n1. One process, one session: {args.messages:,} appends (one message each), then "
        f"{args.builds:,} build_context calls at {args.messages:,} messages (default MemoryConfig) with a "
        "question (keyword recall included) and as many without one. ms per call."
    )
    header = (
        f"{'store':<14} {'append p50':>11} {'append p99':>11} {'build p50':>11} {'build p99':>11} "
        f"{'no query p50':>11} {'no query p99':>11} {'errors':>7}"
    )
    print(header)
    print("-" * len(header))
    print("\n".join(single_rows))
    writers = args.processes * args.threads
    print(
        f"\n2. {args.processes} processes x {args.threads} threads x {args.appends} appends "
        f"({writers * args.appends:,} calls, every 5th with two messages), all at once. ms per append."
    )
    header = f"{'store':<14} {'sessions':>8} {'appends/s':>11} {'p50':>9} {'p99':>9} {'errors':>7}  integrity"
    print(header)
    print("-" * len(header))
    print("\n".join(concurrent_rows))
    print()
    for note in notes:
        print(note)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nTotal time {time.perf_counter() - began:.0f} s; load average {load} at the end")


if __name__ == "__main__":
    main()

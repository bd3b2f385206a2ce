"""Store throughput: appends and `build_context` on every store, in one process and in several.

    python benchmarks/bench_stores.py [--messages 10000] [--sessions 1000] [--per-session 10]
                                      [--builds 2000] [--processes 4]

Two layouts per store (in memory, SQLite file, Redis on loopback):

- one long session of ``--messages`` messages (10k by default);
- ``--sessions`` sessions (1k by default) of ``--per-session`` messages each.

Appends go straight to the store, one message per call (token counts are
computed beforehand, as `ConversationMemory.add` does before it appends).
`build_context` is the facade's, with the default config and budget, on the
filled sessions. With ``--processes N`` the same work is split over N
processes writing to and reading from the same store at the same time (an
in-memory store cannot be shared: each process then has its own).

Redis: ``$CONVMEM_REDIS_URL`` if set, else a private ``redis-server`` on a
free loopback port (no persistence), stopped at the end. SQLite: WAL,
``synchronous=NORMAL``, a temporary file. Errors such as SQLite's "database
is locked" are counted, not fatal.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _history import history
from redis_server import RedisServer, delete_prefix

from convmem import (
    ConversationMemory,
    InMemoryStore,
    Message,
    RedisStore,
    SQLiteStore,
    Store,
    StoreError,
    TiktokenCounter,
)

URL_VARIABLE = "CONVMEM_REDIS_URL"
LONG_SESSION = "long"


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a store lives, so that any process can open it."""

    kind: str
    location: str = ""
    prefix: str = ""

    def open(self) -> Store:
        if self.kind == "sqlite":
            return SQLiteStore(self.location)
        if self.kind == "redis":
            return RedisStore(self.location, prefix=self.prefix)
        return InMemoryStore()


@dataclasses.dataclass
class Run:
    """What one process did: operations, errors, its own start and end, and per-call latencies."""

    operations: int = 0
    errors: int = 0
    locked: int = 0
    started: float = 0.0
    ended: float = 0.0
    latencies: list[float] = dataclasses.field(default_factory=list)


def prepared_messages(count: int, seed: int) -> list[Message]:
    """`count` messages with their token counts, as the memory hands them to a store."""
    counter = TiktokenCounter()
    out = []
    for role, text in history(count, seed=seed):
        message = Message.create(role, text)
        out.append(dataclasses.replace(message, token_count=counter.count_message(message)))
    return out


def session_name(index: int) -> str:
    return f"user-{index:05d}:chat"


def append_work(store: Store, jobs: list[tuple[str, Message]]) -> Run:
    run = Run(started=time.time())
    for session_id, message in jobs:
        try:
            store.append(session_id, [message])
            run.operations += 1
        except StoreError as exc:
            run.errors += 1
            run.locked += "locked" in str(exc)
    run.ended = time.time()
    return run


def build_work(
    store: Store, sessions: list[str], builds: int, seed: int, ready: Callable[[], object] = lambda: None
) -> Run:
    memories = {s: ConversationMemory(s, store) for s in set(sessions)}
    rng = random.Random(seed)
    for session_id in sessions[:3]:  # warm up: tokenizer, connections, statement cache
        memories[session_id].build_context(query="warm up")
    ready()
    run = Run(started=time.time())
    for _ in range(builds):
        memory = memories[rng.choice(sessions)]
        start = time.perf_counter()
        try:
            memory.build_context(query="What did we decide about the database migration?")
            run.operations += 1
        except StoreError as exc:
            run.errors += 1
            run.locked += "locked" in str(exc)
        run.latencies.append(time.perf_counter() - start)
    run.ended = time.time()
    return run


# -- the work of one process ---------------------------------------------------------------


_start_together: Any = None


def _keep_barrier(barrier: Any) -> None:
    global _start_together
    _start_together = barrier


def _wait_for_the_others() -> None:
    """Processes start one by one: measure only from the moment all of them are ready."""
    if _start_together is not None:
        _start_together.wait(timeout=120)


def _layout_jobs(
    layout: str, args: argparse.Namespace, worker: int, workers: int
) -> list[tuple[str, Message]]:
    """This worker's share of the appends of a layout (round-robin over sessions for the many-session one)."""
    if layout == "long":
        messages = prepared_messages(args.messages // workers, seed=worker)
        return [(LONG_SESSION, m) for m in messages]
    sessions = [session_name(i) for i in range(worker, args.sessions, workers)]
    messages = prepared_messages(len(sessions) * args.per_session, seed=worker)
    return [(sessions[i % len(sessions)], m) for i, m in enumerate(messages)]


def _sessions_of(layout: str, args: argparse.Namespace) -> list[str]:
    return [LONG_SESSION] if layout == "long" else [session_name(i) for i in range(args.sessions)]


def worker_appends(target: Target, layout: str, args: argparse.Namespace, worker: int, workers: int) -> Run:
    jobs = _layout_jobs(layout, args, worker, workers)
    store = target.open()
    try:
        _wait_for_the_others()
        return append_work(store, jobs)
    finally:
        store.close()


def worker_builds(target: Target, layout: str, args: argparse.Namespace, worker: int, workers: int) -> Run:
    store = target.open()
    try:
        if target.kind == "memory":  # a private store: fill it as the shared ones were filled
            for w in range(workers):
                append_work(store, _layout_jobs(layout, args, w, workers))
        return build_work(
            store, _sessions_of(layout, args), args.builds // workers, seed=worker, ready=_wait_for_the_others
        )
    finally:
        store.close()


def in_processes(
    function: Callable[..., Run], target: Target, layout: str, args: argparse.Namespace
) -> list[Run]:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(args.processes)
    with context.Pool(args.processes, initializer=_keep_barrier, initargs=(barrier,)) as pool:
        return pool.starmap(
            function, [(target, layout, args, w, args.processes) for w in range(args.processes)]
        )


# -- reporting -------------------------------------------------------------------------------


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def rate(runs: list[Run]) -> float:
    elapsed = max(r.ended for r in runs) - min(r.started for r in runs)
    return sum(r.operations for r in runs) / elapsed if elapsed > 0 else float("nan")


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def describe(layout: str, args: argparse.Namespace) -> str:
    if layout == "long":
        return f"1 session x {args.messages:,} msgs"
    return f"{args.sessions:,} sessions x {args.per_session} msgs"


def row(
    store: str, layout: str, procs: str, appends: list[Run], builds: list[Run], args: argparse.Namespace
) -> str:
    latencies = [x for r in builds for x in r.latencies]
    errors = sum(r.errors for r in appends + builds)
    return (
        f"{store:<7} {describe(layout, args):<26} {procs:>6} {rate(appends):>11,.0f} {rate(builds):>10,.0f} "
        f"{ms(statistics.median(latencies)):>11} {ms(percentile(latencies, 0.99)):>11} {errors:>7}"
    )


def check_log(target: Target, layout: str, args: argparse.Namespace) -> str:
    """After concurrent appends: is every message there once, with seqs 1..N in each session?"""
    store = target.open()
    try:
        sessions = _sessions_of(layout, args)
        sample = sessions if len(sessions) <= 50 else random.Random(0).sample(sessions, 50)
        for session_id in sample:
            seqs = [m.seq for m in store.messages(session_id)]
            if seqs != list(range(1, len(seqs) + 1)):
                return f"seqs of {session_id} are not 1..N"
        total = sum(store.stats(s).message_count for s in sessions)
        if layout == "long":
            expected = args.messages // args.processes * args.processes
        else:
            expected = args.sessions * args.per_session
        return "log ok" if total == expected else f"{total} of {expected} messages stored"
    finally:
        store.close()


# -- stores ----------------------------------------------------------------------------------


@contextmanager
def redis_location() -> Iterator[tuple[str, str]]:
    configured = os.environ.get(URL_VARIABLE)
    if configured:
        yield configured, "from $" + URL_VARIABLE
        return
    server = RedisServer().start()
    try:
        yield server.url, "private redis-server on loopback, no persistence"
    finally:
        server.remove()


def bench_store(
    kind: str, target_for: Callable[[str], Target], args: argparse.Namespace
) -> tuple[list[str], Run]:
    """Print this store's rows; return notes and the single-process build run on the long session."""
    notes = []
    long_builds = Run()
    for layout in ("long", "many"):
        store = target_for(layout).open()
        try:
            single_appends = append_work(store, _layout_jobs(layout, args, 0, 1))
            single_builds = build_work(store, _sessions_of(layout, args), args.builds, seed=0)
        finally:
            store.close()
        if layout == "long":
            long_builds = single_builds
        print(row(kind, layout, "1", [single_appends], [single_builds], args), flush=True)

        shared = target_for(layout + "-parallel")
        appends = in_processes(worker_appends, shared, layout, args)
        procs = f"{args.processes}*" if kind == "memory" else str(args.processes)
        if kind != "memory":
            locked = (
                f"{sum(r.locked for r in appends)} 'database is locked' errors, " if kind == "sqlite" else ""
            )
            notes.append(
                f"{kind} {describe(layout, args)}, {args.processes} writer processes at once: "
                f"{check_log(shared, layout, args)}, {locked}{sum(r.errors for r in appends)} errors in all"
            )
        builds = in_processes(worker_builds, shared, layout, args)
        print(row(kind, layout, procs, appends, builds, args), flush=True)
    return notes, long_builds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000, help="messages in the long session")
    parser.add_argument("--sessions", type=int, default=1_000, help="sessions in the many-session layout")
    parser.add_argument("--per-session", type=int, default=10, help="messages per session there")
    parser.add_argument("--builds", type=int, default=2_000, help="build_context calls per measurement")
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--stores", default="memory,sqlite,redis")
    args = parser.parse_args()
    stores = args.stores.split(",")
    unknown = sorted(set(stores) - {"memory", "sqlite", "redis"})
    if unknown:
        parser.error(f"unknown stores {unknown}; choose from memory, sqlite, redis")
    began = time.perf_counter()

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"Machine: {os.cpu_count()} CPUs, load average {load} at start; Python {sys.version.split()[0]}")
    print(
        f"Appends: one message per call, token counts precomputed. build_context: default MemoryConfig "
        f"(budget 4096, 10 recent turns), {args.builds:,} calls per row, split over the processes.\n"
        f"Rates are per second over all processes; '{args.processes}*' = independent in-memory "
        f"stores, one per process (an in-memory store cannot be shared).\n"
    )
    header = (
        f"{'store':<7} {'layout':<26} {'procs':>6} {'appends/s':>11} {'builds/s':>10} "
        f"{'build p50':>11} {'build p99':>11} {'errors':>7}"
    )
    notes: list[str] = []
    with tempfile.TemporaryDirectory() as folder, redis_location() as (url, redis_note):
        print(f"SQLite: {folder}/*.db (WAL, synchronous=NORMAL). Redis: {url} ({redis_note}).\n")
        print(header)
        print("-" * len(header))
        prefixes: list[str] = []

        def target_for(kind: str) -> Callable[[str], Target]:
            def target(layout: str) -> Target:
                if kind == "sqlite":
                    return Target("sqlite", f"{folder}/{layout}.db")
                if kind == "redis":
                    prefixes.append(f"convmem-bench-{uuid.uuid4().hex[:12]}")
                    return Target("redis", url, prefixes[-1])
                return Target("memory")

            return target

        try:
            for kind in stores:
                store_notes, long_builds = bench_store(kind, target_for(kind), args)
                notes += store_notes
                if kind == "redis":
                    p50, p99 = (
                        statistics.median(long_builds.latencies),
                        percentile(long_builds.latencies, 0.99),
                    )
                    notes.append(
                        f"redis build_context at {args.messages:,} messages in the session, one process: "
                        f"p50 {ms(p50)}, p99 {ms(p99)} over {len(long_builds.latencies):,} calls "
                        f"(target p99 < 5 ms: {'met' if p99 < 0.005 else 'NOT met'})"
                    )
        finally:
            for prefix in prefixes:
                delete_prefix(url, prefix)
    print()
    for note in notes:
        print(note)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nTotal time {time.perf_counter() - began:.0f} s; load average {load} at the end")


if __name__ == "__main__":
    main()

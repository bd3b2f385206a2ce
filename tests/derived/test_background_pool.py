"""`WorkerPool`: one bounded pool per process for background work, with keyed, cancellable jobs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from convmem import ConfigError, ConversationMemory, InMemoryStore, MemoryConfig, set_background_workers
from convmem._derived.background import WorkerPool, shared_pool


class Gate:
    """A job that blocks until opened, and counts its runs."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.runs = 0

    def __call__(self) -> None:
        self.runs += 1
        self.entered.set()
        assert self.opened.wait(30), "the test never opened the gate"


class Outcomes:
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def for_(self, label: str) -> Callable[[bool], None]:
        return lambda ok: self.seen.append((label, ok))


def counter() -> tuple[list[int], Callable[[], None]]:
    runs: list[int] = []
    return runs, lambda: runs.append(1)


def wait_until(condition: Callable[[], bool], seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def pool() -> WorkerPool:
    return WorkerPool(1)


def test_requests_for_a_queued_key_join_the_queued_job(pool: WorkerPool) -> None:
    gate = Gate()
    assert pool.submit("busy", gate, owner="a", timeout=30)
    assert gate.entered.wait(10)
    runs, job = counter()
    outcomes = Outcomes()
    for owner in ("a", "b", "c"):
        assert pool.submit("summary", job, owner=owner, timeout=30, on_done=outcomes.for_(owner))
    assert pool.stats()["queued"] == 1
    gate.opened.set()
    assert pool.flush(timeout=30)
    assert len(runs) == 1
    assert sorted(outcomes.seen) == [("a", True), ("b", True), ("c", True)]


def test_a_running_key_gets_exactly_one_follow_up() -> None:
    pool = WorkerPool(4)
    gate = Gate()
    assert pool.submit("summary", gate, owner="m", timeout=30)
    assert gate.entered.wait(10)
    for _ in range(5):
        assert pool.submit("summary", gate, owner="m", timeout=30)
    assert pool.stats()["queued"] == 1 and pool.stats()["running"] == 1
    gate.opened.set()
    assert pool.flush("m", timeout=30)
    assert gate.runs == 2


def test_flush_waits_only_for_its_owners_jobs(pool: WorkerPool) -> None:
    gate = Gate()
    assert pool.submit("other", gate, owner="other", timeout=30)
    assert gate.entered.wait(10)
    assert pool.flush("mine", timeout=30)
    assert not pool.flush("other", timeout=0.05)
    gate.opened.set()
    assert pool.flush("other", timeout=30)


def test_cancel_drops_queued_jobs_nobody_else_waits_for(pool: WorkerPool) -> None:
    gate = Gate()
    assert pool.submit("busy", gate, owner="x", timeout=30)
    assert gate.entered.wait(10)
    mine, job = counter()
    shared, shared_job = counter()
    assert pool.submit("mine", job, owner="closing", timeout=30)
    assert pool.submit("shared", shared_job, owner="closing", timeout=30)
    assert pool.submit("shared", shared_job, owner="staying", timeout=30)
    assert pool.cancel("closing") == 1
    assert pool.flush("closing", timeout=0)
    gate.opened.set()
    assert pool.flush(timeout=30)
    assert mine == [] and shared == [1]


def test_a_timed_out_job_is_reported_failed_and_its_key_takes_nothing_until_it_returns() -> None:
    pool = WorkerPool(2)
    gate = Gate()
    outcomes = Outcomes()
    assert pool.submit("summary", gate, owner="m", timeout=1.0, on_done=outcomes.for_("first"))
    assert gate.entered.wait(10)
    assert pool.submit("summary", gate, owner="m", timeout=1.0, on_done=outcomes.for_("follow-up"))
    assert pool.flush("m", timeout=30)
    assert outcomes.seen == [("first", False), ("follow-up", False)]
    assert pool.stats()["abandoned"] == 1
    assert not pool.submit("summary", gate, owner="m", timeout=0.1)
    # Other keys still run on a replacement thread.
    runs, job = counter()
    assert pool.submit("facts", job, owner="m", timeout=30)
    assert pool.flush("m", timeout=30) and runs == [1]
    gate.opened.set()
    assert wait_until(lambda: pool.stats()["abandoned"] == 0)
    ran = threading.Event()
    assert pool.submit("summary", ran.set, owner="m", timeout=30)  # accepted again once it returned
    assert ran.wait(30)
    assert gate.runs == 1


def test_a_pool_whose_threads_are_all_stuck_refuses_work_instead_of_growing() -> None:
    pool = WorkerPool(1)
    gates = [Gate(), Gate()]
    for name, gate in zip(("a", "b"), gates, strict=True):
        assert pool.submit(name, gate, owner="m", timeout=0.1)
        assert gate.entered.wait(10)
        assert pool.flush("m", timeout=30)
    assert pool.stats()["abandoned"] == 2
    assert not pool.submit("c", lambda: None, owner="m", timeout=30)
    for gate in gates:
        gate.opened.set()
    assert wait_until(lambda: pool.stats()["abandoned"] == 0)  # the returning threads make room again
    ran = threading.Event()
    assert pool.submit("c", ran.set, owner="m", timeout=30)
    assert ran.wait(30)


def test_a_failing_job_is_reported_and_the_worker_goes_on(pool: WorkerPool) -> None:
    outcomes = Outcomes()

    def boom() -> None:
        raise RuntimeError("model unavailable")

    assert pool.submit("a", boom, owner="m", timeout=30, on_done=outcomes.for_("a"))
    runs, job = counter()
    assert pool.submit("b", job, owner="m", timeout=30, on_done=outcomes.for_("b"))
    assert pool.flush("m", timeout=30)
    assert outcomes.seen == [("a", False), ("b", True)] and runs == [1]


def test_the_number_of_workers_is_validated_and_can_be_changed() -> None:
    for bad in (0, -1, 65, 2.0, True, "4", None):
        with pytest.raises(ConfigError, match="background workers must be an int from 1 to 64"):
            set_background_workers(bad)  # type: ignore[arg-type]
    before = shared_pool().max_workers
    set_background_workers(8)
    try:
        assert shared_pool().max_workers == 8
    finally:
        set_background_workers(before)


def test_memories_on_one_session_coalesce_their_background_jobs() -> None:
    store = InMemoryStore()
    gate = Gate()

    class GatedExtractor:
        def extract(self, messages: object) -> list[object]:
            gate()
            return []

        async def aextract(self, messages: object) -> list[object]:
            return self.extract(messages)

    config = MemoryConfig(background=True, summary_trigger="never")
    first = ConversationMemory("s", store, config, fact_extractor=GatedExtractor())  # type: ignore[arg-type]
    first.add("user", "one")
    assert gate.entered.wait(10)
    others = [ConversationMemory("s", store, config, fact_extractor=GatedExtractor()) for _ in range(5)]  # type: ignore[arg-type]
    for index, memory in enumerate(others):
        memory.add("user", f"more {index}")
    gate.opened.set()
    for memory in [first, *others]:
        assert memory.flush(timeout=30)
    assert gate.runs == 2  # the running job, and one follow-up for all five

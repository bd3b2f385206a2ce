"""Running slow derived work (summaries, facts, embeddings) off the hot path.

Every memory with ``background=True`` hands its jobs to one `WorkerPool` per
process (`shared_pool`): a few daemon threads (`DEFAULT_WORKERS`, changed with
`set_background_workers`), so a server holding thousands of memories runs a
handful of threads, not one per memory.

Jobs are keyed by what they update, e.g. (store, session, "summary"):

- At most one job per key waits in the queue. A request for a key already
  queued joins that job, because every job reads the latest log when it runs.
- At most one job per key runs. A request for a running key queues one
  follow-up, which starts when the running one ends.
- A job that runs past its timeout is abandoned: reported as failed (the
  caller retries later, see `Backoff`), its queued follow-up is cancelled, and
  its thread is replaced. Python cannot stop a thread, so the abandoned job
  goes on until its model call returns (jobs write with compare-and-set, so a
  late result is harmless); until then its key takes no new job. A hung model
  therefore holds one thread per key, never one per retry, and the pool never
  has more than ``2 * max_workers`` threads (plus a watchdog): when abandoned
  jobs hold all of them, it refuses jobs until one returns.

`Backoff` remembers failures per key so a failing summarizer or embedder is
retried on a later trigger (after 1 s, 2 s, 4 s ... up to 60 s), not on every
message.

`ModelCalls` puts a deadline on each model call (``MemoryConfig.model_timeout``),
inline as well as in a job: the call runs in a daemon thread of its own, and the
caller stops waiting at the deadline (`ModelTimeoutError`; the work is retried
later). The call is left to end by itself, its answer dropped (so is a call whose
caller was cancelled); until it does, its key (store, session, kind) starts no new call. So a hung model holds one thread per
key, outside the worker pool and outside any event loop's executor: the job that
waited on it ends, and every other session's work goes on. A model down for every
session would hold one thread per session: past `MAX_LATE_CALLS` such calls in the
process, no new model call starts until one ends.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from .._errors import ConfigError, ModelTimeoutError

__all__ = [
    "DEFAULT_WORKERS",
    "Backoff",
    "Identity",
    "ModelCalls",
    "WorkerPool",
    "model_calls",
    "set_background_workers",
    "shared_pool",
]

logger = logging.getLogger("convmem")

MAX_BACKOFF_SECONDS = 60.0
DEFAULT_WORKERS = 4
MAX_WORKERS = 64
# An idle worker thread ends after this long; the next job starts another.
IDLE_SECONDS = 5.0
# Model calls past their deadline that may still run in one process (one thread each).
MAX_LATE_CALLS = 64


class Identity:
    """A key part that stands for one object, compared by identity, and keeps it alive.

    ``id(store)`` alone is not a key: once a store is freed, a new store can get the same
    number and would inherit the old one's running job or late model call. An `Identity`
    held in a key keeps its object alive as long as the key is in use.
    """

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"Identity({type(self.obj).__name__} at {id(self.obj):#x})"


class Backoff:
    """Consecutive failures per key, and when the key may run again."""

    def __init__(self, *, max_delay: float = MAX_BACKOFF_SECONDS) -> None:
        self._max_delay = max_delay
        self._failures: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def ready(self, key: str) -> bool:
        with self._lock:
            failures, not_before = self._failures.get(key, (0, 0.0))
            return not failures or time.monotonic() >= not_before

    def failures(self, key: str) -> int:
        with self._lock:
            return self._failures.get(key, (0, 0.0))[0]

    def record(self, key: str, ok: bool) -> None:
        with self._lock:
            if ok:
                self._failures.pop(key, None)
                return
            count = self._failures.get(key, (0, 0.0))[0] + 1
            delay = min(self._max_delay, 2.0 ** (count - 1))
            self._failures[key] = (count, time.monotonic() + delay)


Job = Callable[[], object]
Done = Callable[[bool], None]


@dataclasses.dataclass(eq=False)
class _Job:
    key: Hashable
    name: str
    run: Job
    timeout: float
    # Everyone waiting for this job (a flush waits on its owner), and what to tell them.
    waiters: dict[object, Done | None]
    deadline: float = 0.0
    abandoned: bool = False


def _validate_workers(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_WORKERS:
        raise ConfigError(f"background workers must be an int from 1 to {MAX_WORKERS}, got {count!r}")
    return count


class WorkerPool:
    """A few daemon threads that run keyed jobs, each with a timeout (see the module docstring)."""

    def __init__(self, max_workers: int = DEFAULT_WORKERS, *, name: str = "convmem-worker") -> None:
        self._max_workers = _validate_workers(max_workers)
        self._name = name
        self._cond = threading.Condition()
        self._queue: deque[_Job] = deque()
        self._queued: dict[Hashable, _Job] = {}
        self._running: dict[Hashable, _Job] = {}  # abandoned jobs stay here until they return
        self._waiting: Counter[object] = Counter()  # owner -> its queued or running jobs
        self._workers = 0  # threads taking jobs (not stuck in an abandoned one)
        self._idle = 0
        self._abandoned = 0
        self._watchdog: threading.Thread | None = None
        self._threads_started = 0

    @property
    def max_workers(self) -> int:
        return self._max_workers

    def resize(self, max_workers: int) -> None:
        """Run at most `max_workers` jobs at once from now on (surplus threads end when idle)."""
        with self._cond:
            self._max_workers = _validate_workers(max_workers)
            self._cond.notify_all()

    def stats(self) -> dict[str, int]:
        """Counts for monitoring: workers, idle, abandoned, queued, running."""
        with self._cond:
            return {
                "workers": self._workers,
                "idle": self._idle,
                "abandoned": self._abandoned,
                "queued": len(self._queue),
                "running": len(self._running) - self._abandoned,
                "threads_started": self._threads_started,
            }

    def submit(
        self,
        key: Hashable,
        job: Job,
        *,
        owner: object,
        timeout: float,
        on_done: Done | None = None,
        name: str | None = None,
    ) -> bool:
        """Queue `job` under `key` for `owner`, or join the job already queued for `key`.

        `on_done(ok)` is called once the job ran (``ok=False`` when it raised,
        timed out or was cancelled). Returns False, without queuing anything,
        when the job for `key` timed out and is still running, or when every
        thread the pool may use is stuck in an abandoned job.
        """
        with self._cond:
            queued = self._queued.get(key)
            if queued is not None:
                if owner not in queued.waiters:
                    queued.waiters[owner] = on_done
                    self._waiting[owner] += 1
                return True
            running = self._running.get(key)
            if running is not None and running.abandoned:
                return False
            if not self._can_run():
                return False
            entry = _Job(key, name or repr(key), job, timeout, {owner: on_done})
            self._queue.append(entry)
            self._queued[key] = entry
            self._waiting[owner] += 1
            if len(self._queue) > self._idle and not self._start_worker() and not self._workers:
                # No thread could be started and none would ever take the job.
                self._unqueue(entry)
                self._release(owner)
                return False
            self._cond.notify()
            return True

    def flush(self, owner: object = None, timeout: float | None = None) -> bool:
        """Wait until `owner`'s jobs (every job when None) ran or were abandoned; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._waiting[owner] if owner is not None else self._waiting:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def cancel(self, owner: object) -> int:
        """Stop waiting for `owner`'s jobs; drop the queued ones nobody else waits for. Returns how many."""
        dropped = 0
        with self._cond:
            for entry in [*self._queue, *self._running.values()]:
                if owner in entry.waiters:
                    del entry.waiters[owner]
                    self._release(owner)
                    if not entry.waiters and entry.key in self._queued:
                        self._unqueue(entry)
                        dropped += 1
            self._cond.notify_all()
        return dropped

    # -- internals (called with self._cond held unless said otherwise) ------------

    def _can_run(self) -> bool:
        return self._workers > 0 or self._abandoned < 2 * self._max_workers

    def _release(self, owner: object) -> None:
        self._waiting[owner] -= 1
        if self._waiting[owner] <= 0:
            del self._waiting[owner]

    def _unqueue(self, entry: _Job) -> None:
        self._queue.remove(entry)
        del self._queued[entry.key]

    def _start_worker(self) -> bool:
        """Start one more worker thread if the limits allow; False if none was started."""
        if self._workers >= self._max_workers or self._workers + self._abandoned >= 2 * self._max_workers:
            return False
        try:
            threading.Thread(target=self._work, name=self._name, daemon=True).start()
        except RuntimeError as exc:  # the process is out of threads
            logger.warning("cannot start a background worker thread: %s", exc)
            return False
        self._workers += 1
        self._threads_started += 1
        return True

    def _next_job(self) -> _Job | None:
        for entry in self._queue:
            if entry.key not in self._running:
                self._unqueue(entry)
                entry.deadline = time.monotonic() + entry.timeout
                self._running[entry.key] = entry
                if self._watchdog is None:
                    watchdog = threading.Thread(
                        target=self._watch, name=f"{self._name}-watchdog", daemon=True
                    )
                    try:
                        watchdog.start()
                    except RuntimeError as exc:  # tried again when the next job starts
                        logger.warning("cannot start the background watchdog thread: %s", exc)
                    else:
                        self._watchdog = watchdog
                self._cond.notify_all()  # the watchdog may need to wake earlier
                return entry
        return None

    def _finish(self, entry: _Job, ok: bool) -> list[tuple[Done | None, bool]]:
        """Release `entry`'s waiters; the callbacks to run (outside the lock) with the outcome."""
        for owner in entry.waiters:
            self._release(owner)
        callbacks = [(callback, ok) for callback in entry.waiters.values()]
        entry.waiters = {}
        self._cond.notify_all()
        return callbacks

    # -- threads ----------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._cond:
                entry = self._next_job()
                while entry is None:
                    if self._workers > self._max_workers:
                        self._workers -= 1
                        return
                    self._idle += 1
                    woken = self._cond.wait(IDLE_SECONDS)
                    self._idle -= 1
                    entry = self._next_job()
                    if entry is None and not woken:
                        self._workers -= 1
                        return
            ok = self._run(entry)
            with self._cond:
                del self._running[entry.key]
                if entry.abandoned:
                    # Replaced when it was abandoned: this thread ends, or rejoins if there is room.
                    self._abandoned -= 1
                    if self._workers >= self._max_workers:
                        self._cond.notify_all()
                        return
                    self._workers += 1
                    callbacks: list[tuple[Done | None, bool]] = []
                else:
                    callbacks = self._finish(entry, ok)
                self._cond.notify_all()
            _call(entry.name, callbacks)

    def _run(self, entry: _Job) -> bool:
        try:
            entry.run()
        except BaseException as exc:  # reported, never lost; the worker goes on
            if not entry.abandoned:
                logger.warning(
                    "background job %s failed; it will be retried: %r", entry.name, exc, exc_info=exc
                )
            return False
        return True

    def _watch(self) -> None:
        """Abandon jobs that run past their deadline; ends when nothing is running."""
        while True:
            with self._cond:
                live = [e for e in self._running.values() if not e.abandoned]
                if not live:
                    self._watchdog = None
                    return
                now = time.monotonic()
                late = [e for e in live if e.deadline <= now]
                if not late:
                    self._cond.wait(min(e.deadline for e in live) - now)
                    continue
                callbacks = []
                for entry in late:
                    callbacks.extend(self._abandon(entry))
            _call("timed-out jobs", callbacks)

    def _abandon(self, entry: _Job) -> list[tuple[Done | None, bool]]:
        logger.warning(
            "background job %s timed out after %.1fs; it will be retried", entry.name, entry.timeout
        )
        entry.abandoned = True
        self._abandoned += 1
        self._workers -= 1
        callbacks = self._finish(entry, False)
        follow_up = self._queued.get(entry.key)
        if follow_up is not None:  # it could not start before the abandoned job returns
            self._unqueue(follow_up)
            callbacks.extend(self._finish(follow_up, False))
        if self._queue:
            self._start_worker()
        if self._workers == 0 and not self._can_run():
            logger.warning(
                "every background thread (%d) is stuck in a job that timed out; "
                "background work is refused until one returns",
                self._abandoned,
            )
            while self._queue:
                queued = self._queue[0]
                self._unqueue(queued)
                callbacks.extend(self._finish(queued, False))
        return callbacks


_T = TypeVar("_T")


class ModelCalls:
    """Model calls that the caller stops waiting for at a deadline (see the module docstring)."""

    def __init__(self, *, max_late: int = MAX_LATE_CALLS) -> None:
        self._max_late = max_late
        self._lock = threading.Lock()
        # key -> whether the call that outlived its deadline there has ended
        self._late: dict[Hashable, Callable[[], bool]] = {}

    def late(self) -> int:
        """How many calls outlived their deadline and are still running (for monitoring)."""
        with self._lock:
            self._prune()
            return len(self._late)

    def _prune(self) -> None:
        for key in [key for key, ended in self._late.items() if ended()]:
            del self._late[key]

    def _claim(self, key: Hashable, what: str) -> None:
        with self._lock:
            self._prune()
            if key in self._late:
                raise ModelTimeoutError(
                    f"{what}: the previous call (past its deadline, or left by a cancelled caller) "
                    "is still running; no new one starts before it ends (retried later)"
                )
            if len(self._late) >= self._max_late:
                raise ModelTimeoutError(
                    f"{what}: {len(self._late)} model calls in this process outlived their deadline "
                    "and are still running (is the model down?); no new one starts before one "
                    "ends (retried later)"
                )

    def _left_running(self, key: Hashable, ended: Callable[[], bool]) -> None:
        """Hold `key` until `ended()`: its call goes on though nobody waits for it."""
        with self._lock:
            self._late[key] = ended

    def _outlived(
        self, key: Hashable, ended: Callable[[], bool], what: str, timeout: float
    ) -> ModelTimeoutError:
        self._left_running(key, ended)
        return ModelTimeoutError(
            f"{what} took longer than model_timeout ({timeout:g} s); it is retried later, and the "
            "call is left to end in its own thread"
        )

    def call(self, key: Hashable, run: Callable[[], _T], *, timeout: float, what: str) -> _T:
        """`run()` in a thread of its own; its result, or `ModelTimeoutError` after `timeout` seconds."""
        self._claim(key, what)
        ended = threading.Event()
        outcome: list[tuple[bool, Any]] = []

        def target() -> None:
            try:
                outcome.append((True, run()))
            except BaseException as exc:  # handed to the caller, if it still waits
                outcome.append((False, exc))
            finally:
                ended.set()

        threading.Thread(target=target, name=f"convmem-model {what}", daemon=True).start()
        if not ended.wait(timeout):
            raise self._outlived(key, ended.is_set, what, timeout)
        ok, value = outcome[0]
        if not ok:
            raise value
        result: _T = value
        return result

    async def acall(
        self, key: Hashable, run: Callable[[], Awaitable[_T]], *, timeout: float, what: str
    ) -> _T:
        """Await `run()`; `ModelTimeoutError` after `timeout` seconds, the call left to end by itself.

        A caller cancelled while it waits leaves the call the same way: it holds its key
        until it ends, and its outcome is read then, so nothing is logged as lost."""
        self._claim(key, what)
        task = asyncio.ensure_future(run())
        loop = asyncio.get_running_loop()

        def ended() -> bool:
            # A call whose event loop was closed never ends: it no longer holds its key.
            return task.done() or loop.is_closed()

        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout)
        except asyncio.TimeoutError:
            task.add_done_callback(_drop_outcome)
            raise self._outlived(key, ended, what, timeout) from None
        except asyncio.CancelledError:
            task.add_done_callback(_drop_outcome)
            self._left_running(key, ended)
            raise


def _drop_outcome(task: asyncio.Future[Any]) -> None:
    """Read the outcome of a call nobody waits for, so asyncio does not report it as lost."""
    if not task.cancelled():
        task.exception()


_model_calls = ModelCalls()


def model_calls() -> ModelCalls:
    """The process's record of model calls (one per process, shared by every memory)."""
    return _model_calls


def _call(what: str, callbacks: list[tuple[Done | None, bool]]) -> None:
    for callback, ok in callbacks:
        if callback is None:
            continue
        try:
            callback(ok)
        except Exception:  # a callback must not stop a worker
            logger.exception("background callback for %s failed", what)


_shared_lock = threading.Lock()
_shared: WorkerPool | None = None
_shared_size = DEFAULT_WORKERS


def shared_pool() -> WorkerPool:
    """The process's pool for background work (created on first use)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = WorkerPool(_shared_size)
        return _shared


def set_background_workers(count: int) -> None:
    """Run at most `count` background jobs at once in this process (default 4, at most 64).

    Background work (``MemoryConfig(background=True)``) of every memory in the
    process shares these threads; raise it when summaries and embeddings wait
    on a remote model, lower it to keep CPU for the requests themselves::

        convmem.set_background_workers(8)
    """
    global _shared_size
    with _shared_lock:
        _shared_size = _validate_workers(count)
        if _shared is not None:
            _shared.resize(count)


def _forget_pool_in_child() -> None:
    # A forked child has none of the parent's threads; a fresh pool starts its own, and
    # no call of the parent's can end there to free its key.
    global _shared, _shared_lock, _model_calls
    _shared = None
    _shared_lock = threading.Lock()
    _model_calls = ModelCalls()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)

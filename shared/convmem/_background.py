"""Running slow derived work (summaries, facts, embeddings) off the hot path.

`BackgroundWorker` runs keyed jobs one at a time in a daemon thread. Jobs are
keyed: submitting a key that is already queued does nothing, because every
job reads the latest log when it runs. A job that runs past its timeout is
abandoned (its thread keeps going, so jobs must write with compare-and-set)
and reported as failed.

`Backoff` remembers failures per key so a failing summarizer or embedder is
retried on a later trigger (after 1 s, 2 s, 4 s ... up to 60 s), not on every
message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

__all__ = ["BackgroundWorker", "Backoff"]

logger = logging.getLogger("convmem")

MAX_BACKOFF_SECONDS = 60.0


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
Done = Callable[[str, bool], None]


class BackgroundWorker:
    """One daemon thread that runs keyed jobs in order, each with a timeout."""

    def __init__(self, *, timeout: float = 60.0, name: str = "convmem-worker") -> None:
        self._timeout = timeout
        self._name = name
        self._queue: deque[tuple[str, Job, Done | None]] = deque()
        self._queued: set[str] = set()
        self._running = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, key: str, job: Job, on_done: Done | None = None) -> bool:
        """Queue `job` under `key`; False if that key is already queued or the worker is closed.

        `on_done(key, ok)` is called after the job, with ``ok=False`` when it raised or timed out.
        """
        with self._cond:
            if self._closed or key in self._queued:
                return False
            self._queue.append((key, job, on_done))
            self._queued.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify_all()
            return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued job has run; False if `timeout` passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._queue or self._running:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
            return True

    def close(self, timeout: float | None = 5.0) -> None:
        """Finish queued work (up to `timeout`) and stop accepting jobs."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    # Idle (or closed): let the thread end; the next submit starts another.
                    if (self._closed or not self._cond.wait(timeout=30)) and not self._queue:
                        self._thread = None
                        return
                key, job, on_done = self._queue.popleft()
                self._queued.discard(key)
                self._running += 1
            ok = False
            try:
                ok = self._run(key, job)
            finally:
                if on_done is not None:
                    try:
                        on_done(key, ok)
                    except Exception:  # a callback must not stop the worker
                        logger.exception("background callback for %r failed", key)
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def _run(self, key: str, job: Job) -> bool:
        outcome: list[BaseException | None] = []

        def target() -> None:
            try:
                job()
                outcome.append(None)
            except BaseException as exc:  # reported below, never lost
                outcome.append(exc)

        runner = threading.Thread(target=target, name=f"{self._name}:{key}", daemon=True)
        runner.start()
        runner.join(self._timeout)
        if runner.is_alive():
            logger.warning("background job %r timed out after %.1fs; it will be retried", key, self._timeout)
            return False
        error = outcome[0] if outcome else None
        if error is not None:
            logger.warning("background job %r failed; it will be retried: %r", key, error, exc_info=error)
            return False
        return True

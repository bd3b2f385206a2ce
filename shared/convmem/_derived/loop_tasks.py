"""A memory's derived work run as asyncio tasks, kept per event loop.

With ``background=True`` the async methods run each kind of derived work (facts,
summary, index) as a task of the event loop that appended. One memory may serve
several loops: one after another (``asyncio.run`` or ``loop.run_until_complete``
per request) or at once (threads that each run a loop). So the tasks are kept
per loop, and only that loop's thread touches them:

- In a loop, one task per key: an append while the key's task runs has it go
  round again when it ends, so a loop's tasks never race each other for a record.
- A loop that is closed takes its tasks with it: they no longer hold their key,
  and the next append (from any loop) starts the work again. Nothing is skipped
  or done twice, because every job continues from the watermark it reads.
- Waiting is per loop too. A loop awaits its own tasks; another thread waits for
  them through a lock and a condition, and only while their loop runs: a task of
  a loop that stopped cannot end before someone runs that loop again, so nobody
  waits for it (its key is free in every other loop).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import threading
import time
from collections.abc import Awaitable, Callable

__all__ = ["LoopTasks", "running_loop", "time_left"]

# How often a thread waiting for another loop's tasks checks that the loop still runs.
_POLL_SECONDS = 0.05


@dataclasses.dataclass
class _LoopWork:
    """One loop's tasks, the keys they update, and the keys asked to go round again."""

    tasks: set[asyncio.Task[None]] = dataclasses.field(default_factory=set)
    running: set[str] = dataclasses.field(default_factory=set)
    rerun: set[str] = dataclasses.field(default_factory=set)


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, if any (sync code called under a coroutine)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def time_left(deadline: float | None) -> float | None:
    """Seconds until `deadline` (a `time.monotonic()` value, None for none), at least 0."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


def _alive(loop: asyncio.AbstractEventLoop) -> bool:
    return loop.is_running() and not loop.is_closed()


class LoopTasks:
    """The asyncio tasks of one memory's derived work, per event loop (see the module docstring)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._loops: dict[asyncio.AbstractEventLoop, _LoopWork] = {}

    def start(self, key: str, run: Callable[[], Awaitable[object]], again: Callable[[], bool]) -> None:
        """Run `run()` for `key` in a task of the running loop, or have the key's running
        task there go round once more; it goes round while asked and `again()` says so."""
        loop = asyncio.get_running_loop()
        with self._changed:
            for closed in [other for other in self._loops if other.is_closed()]:
                del self._loops[closed]
            work = self._loops.setdefault(loop, _LoopWork())
            if key in work.running:
                work.rerun.add(key)
                return
            work.running.add(key)
            task = loop.create_task(self._serially(work, key, run, again))
            work.tasks.add(task)
        task.add_done_callback(functools.partial(self._ended, loop, work))

    async def _serially(
        self, work: _LoopWork, key: str, run: Callable[[], Awaitable[object]], again: Callable[[], bool]
    ) -> None:
        try:
            while True:
                with self._changed:
                    work.rerun.discard(key)
                await run()
                with self._changed:
                    # Decided under the lock: a start() after this sees the key free.
                    if key not in work.rerun or not again():
                        work.running.discard(key)
                        return
        finally:  # cancelled with its loop
            with self._changed:
                work.running.discard(key)

    def _ended(self, loop: asyncio.AbstractEventLoop, work: _LoopWork, task: asyncio.Task[None]) -> None:
        with self._changed:
            work.tasks.discard(task)
            if not work.tasks and self._loops.get(loop) is work:
                del self._loops[loop]
            self._changed.notify_all()

    def pending_in(self, loop: asyncio.AbstractEventLoop | None) -> bool:
        """Whether `loop` has tasks of this memory that have not ended."""
        with self._changed:
            work = self._loops.get(loop) if loop is not None else None
            return work is not None and any(not task.done() for task in work.tasks)

    async def wait_here(self, timeout: float | None) -> bool:
        """Await the running loop's tasks (and those they start meanwhile); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._changed:
                work = self._loops.get(loop)
                tasks = [task for task in work.tasks if not task.done()] if work is not None else []
            if not tasks:
                return True
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            _, not_done = await asyncio.wait(tasks, timeout=remaining)
            if not_done:
                return False

    def wait_elsewhere(self, timeout: float | None, here: asyncio.AbstractEventLoop | None) -> bool:
        """Block until the tasks of every running loop but `here` have ended; False on timeout.

        Safe from any thread. Tasks of a loop that is not running are not waited for."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while any(
                _alive(loop) and any(not task.done() for task in work.tasks)
                for loop, work in self._loops.items()
                if loop is not here
            ):
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                # Woken when a task ends; the poll notices a loop that stopped meanwhile.
                self._changed.wait(_POLL_SECONDS if remaining is None else min(remaining, _POLL_SECONDS))
            return True

    def cancel(self) -> None:
        """Cancel every task that has not ended, each in its own loop's thread."""
        with self._changed:
            tasks = [(loop, task) for loop, work in self._loops.items() for task in work.tasks]
        for loop, task in tasks:
            with contextlib.suppress(RuntimeError):  # a closed loop never runs the task again
                loop.call_soon_threadsafe(task.cancel)

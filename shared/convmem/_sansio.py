"""One driver for every operation convmem writes once for sync and async callers.

An operation is a generator (a *flow*): it yields requests (run this query, call
this model, embed these texts), is sent each reply, and returns its result. It
never does I/O itself, so the same flow runs in a sync shell that performs each
request by blocking and in an async shell that awaits it; the shells differ in
the one function that performs a request. Store operations (Redis, PostgreSQL),
recall plans and LLM dialogues are all flows run by `run` and `arun`::

    def greet(name: str) -> Flow[str, str, str]:
        answer = yield f"Say hello to {name}"
        return answer.strip()

    run(greet("Ada"), model.complete)          # sync
    await arun(greet("Ada"), model.acomplete)  # async

A flow that handles failures itself (recall falls back to words when embedding
fails) asks for them with ``throw_into_flow=True``: the request's exception is
thrown in at its ``yield``. Otherwise the flow is closed and the exception
propagates to the caller.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["Blocking", "Flow", "arun", "run"]

_Request = TypeVar("_Request")
_Result = TypeVar("_Result")

Flow = Generator[_Request, Any, _Result]
"""A generator that yields requests, is sent their replies and returns a result."""


@dataclasses.dataclass(frozen=True)
class Blocking:
    """Request: blocking I/O (a store read or write, a file). The sync shell calls it;
    the async shell runs it in a worker thread so the event loop never waits on it."""

    call: Callable[[], Any]

    def perform(self) -> Any:
        return self.call()

    async def aperform(self) -> Any:
        return await asyncio.to_thread(self.call)


def run(
    flow: Flow[_Request, _Result],
    perform: Callable[[_Request], Any],
    *,
    throw_into_flow: bool = False,
) -> _Result:
    """Run `flow` to its result, performing each request with the blocking `perform`."""
    try:
        request = next(flow)
        while True:
            try:
                reply = perform(request)
            except Exception as exc:
                if not throw_into_flow:
                    raise
                request = flow.throw(exc)
            else:
                request = flow.send(reply)
    except StopIteration as done:
        result: _Result = done.value
        return result
    finally:
        flow.close()


async def arun(
    flow: Flow[_Request, _Result],
    perform: Callable[[_Request], Awaitable[Any]],
    *,
    throw_into_flow: bool = False,
) -> _Result:
    """Run `flow` to its result, awaiting `perform` for each request."""
    try:
        request = next(flow)
        while True:
            try:
                reply = await perform(request)
            except Exception as exc:
                if not throw_into_flow:
                    raise
                request = flow.throw(exc)
            else:
                request = flow.send(reply)
    except StopIteration as done:
        result: _Result = done.value
        return result
    finally:
        flow.close()

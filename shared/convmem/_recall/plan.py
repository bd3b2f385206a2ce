"""One plan, two shells: how recall writes each operation once for sync and async callers.

A plan is a generator. It yields requests (embed these texts, embed this
query, run this blocking I/O), is sent each reply, or has the request's
exception thrown in so that it handles failures itself, and returns its
result. `run_plan` performs the requests with the embedder's sync API;
`arun_plan` awaits its async API and runs blocking I/O in a worker thread.
That is the only place where the two differ, as in `_redis_store` (requests)
and `_summarizer` (the LLM `Dialogue`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Generator
from typing import Any, TypeVar

from .embedder import Embedder

__all__ = ["Blocking", "EmbedDocuments", "EmbedQuery", "Plan", "arun_plan", "run_plan"]

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class EmbedDocuments:
    """Reply: ``embedder.embed_documents(texts)``."""

    texts: list[str]


@dataclasses.dataclass(frozen=True)
class EmbedQuery:
    """Reply: ``embedder.embed_query(text)``."""

    text: str


@dataclasses.dataclass(frozen=True)
class Blocking:
    """Store or file I/O: the sync shell calls it, the async one runs it in a worker thread."""

    call: Callable[[], Any]


Request = EmbedDocuments | EmbedQuery | Blocking
Plan = Generator[Request, Any, _T]


def _no_embedder(request: EmbedDocuments | EmbedQuery) -> Exception:
    return RuntimeError(f"{type(request).__name__} was requested of a recall that has no embedder")


def run_plan(plan: Plan[_T], embedder: Embedder | None) -> _T:
    """Run `plan` with the embedder's sync API (a lexical-only plan has ``embedder=None``)."""
    try:
        request = next(plan)
        while True:
            try:
                if isinstance(request, Blocking):
                    reply: Any = request.call()
                elif embedder is None:
                    raise _no_embedder(request)
                elif isinstance(request, EmbedDocuments):
                    reply = embedder.embed_documents(request.texts)
                else:
                    reply = embedder.embed_query(request.text)
            except Exception as exc:
                request = plan.throw(exc)
            else:
                request = plan.send(reply)
    except StopIteration as done:
        result: _T = done.value
        return result


async def arun_plan(plan: Plan[_T], embedder: Embedder | None) -> _T:
    """Run `plan` with the embedder's async API; blocking I/O goes to a worker thread."""
    try:
        request = next(plan)
        while True:
            try:
                if isinstance(request, Blocking):
                    reply: Any = await asyncio.to_thread(request.call)
                elif embedder is None:
                    raise _no_embedder(request)
                elif isinstance(request, EmbedDocuments):
                    reply = await embedder.aembed_documents(request.texts)
                else:
                    reply = await embedder.aembed_query(request.text)
            except Exception as exc:
                request = plan.throw(exc)
            else:
                request = plan.send(reply)
    except StopIteration as done:
        result: _T = done.value
        return result

"""One plan, two shells: how recall writes each operation once for sync and async callers.

A plan is a generator. It yields requests (embed these texts, embed this
query, run this blocking I/O), is sent each reply, or has the request's
exception thrown in so that it handles failures itself, and returns its
result. `run_plan` performs the requests with the embedder's sync API;
`arun_plan` awaits its async API and runs blocking I/O in a worker thread.
That is the only place where the two differ; `convmem._sansio` drives the
generator, as it drives store operations and LLM dialogues.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from .._sansio import Flow, arun, run
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
Plan = Flow[Request, _T]


def _no_embedder(request: EmbedDocuments | EmbedQuery) -> Exception:
    return RuntimeError(f"{type(request).__name__} was requested of a recall that has no embedder")


def _perform(embedder: Embedder | None, request: Request) -> Any:
    if isinstance(request, Blocking):
        return request.call()
    if embedder is None:
        raise _no_embedder(request)
    if isinstance(request, EmbedDocuments):
        return embedder.embed_documents(request.texts)
    return embedder.embed_query(request.text)


async def _aperform(embedder: Embedder | None, request: Request) -> Any:
    if isinstance(request, Blocking):
        return await asyncio.to_thread(request.call)
    if embedder is None:
        raise _no_embedder(request)
    if isinstance(request, EmbedDocuments):
        return await embedder.aembed_documents(request.texts)
    return await embedder.aembed_query(request.text)


def run_plan(plan: Plan[_T], embedder: Embedder | None) -> _T:
    """Run `plan` with the embedder's sync API (a lexical-only plan has ``embedder=None``)."""
    return run(plan, functools.partial(_perform, embedder), throw_into_flow=True)


async def arun_plan(plan: Plan[_T], embedder: Embedder | None) -> _T:
    """Run `plan` with the embedder's async API; blocking I/O goes to a worker thread."""
    return await arun(plan, functools.partial(_aperform, embedder), throw_into_flow=True)

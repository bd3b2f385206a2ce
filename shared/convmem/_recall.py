"""Semantic recall of old turns: hybrid ranking over a per-session index.

`Recall` indexes every stored message (and every question-and-answer
exchange) of a session twice: as a vector in a `VectorIndex` and as terms in
a BM25 index (without an embedder, as terms only). A query is answered by
blending dense and lexical scores with speaker, episode and recency boosts,
dropping near-duplicates, small talk, what the recent window already holds
and what is below `min_score` or the relevance floor, and filling the recall
section best first up to its token cap.

This module only orchestrates; each job has its own module:

    _recall_config    RecallConfig, RecallFilters
    _recall_units     the per-session mirror of the log: units, ingest, catching up, the queue
    _recall_search    answering a query: gather candidates, rank, render
    _recall_rank      fusion, boosts, relevance floor and MMR over plain arrays
    _recall_render    filling the token cap; RecalledItem, RecallResult
    _recall_language  CJK detection, speaker labels, date lines
    _recall_plan      one plan, two shells: sync and async written once
    _intent           choose_recall_share: how much budget a query gives recall
    _vector_index     FAISS indexes and their files (manifest, CRC)

Sync and async share one plan per operation (`_recall_plan`): a generator
that yields requests (embed these texts, embed this query, do this blocking
I/O) and is sent the replies.

Everything here is derived from the log: vectors are persisted next to the
store for speed, and rebuilt from the log when missing, stale or corrupt.
Sessions are walls: each session has its own index, and nothing from one
session's index can be returned for another.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._embedder import Embedder
from ._errors import ConfigError
from ._intent import choose_recall_share
from ._models import Message
from ._recall_config import RecallConfig, RecallFilters
from ._recall_plan import Blocking, EmbedQuery, Plan, arun_plan, run_plan
from ._recall_render import RecalledItem, RecallResult
from ._recall_search import answer
from ._recall_units import SessionMirror, is_exchange_unit
from ._store import Store
from ._tokens import TokenCounter
from ._vector_index import FaissIndex, IndexFiles, VectorIndex

__all__ = [
    "Recall",
    "RecallConfig",
    "RecallFilters",
    "RecallResult",
    "RecalledItem",
    "choose_recall_share",
]

logger = logging.getLogger("convmem")


# -- the engine ---------------------------------------------------------------------


class Recall:
    """Semantic recall over a session's log: index on write, hybrid search on read.

    Args:
        embedder: any `Embedder` (`SentenceTransformerEmbedder`, `HashingEmbedder`, an adapter),
            or ``None`` for lexical recall: BM25 over the CJK-aware terms of each message and
            exchange, with the same boosts, relevance floor and rendering, and no model at all
            (what a `ConversationMemory` gets by default).
        config: ranking and rendering knobs (`RecallConfig`).
        index_dir: where vectors are persisted, one ``<session>.faiss`` file plus a
            ``.json`` manifest per session; ``None`` keeps them in memory only.
            Put it next to the store, e.g. ``Path(str(db_path) + ".vectors")``.
        index_factory: ``(session_id, dimension) -> VectorIndex`` for vectors kept in a
            shared vector store instead of files on this server.

    Without an embedder there are no vectors, so `index_dir` and `index_factory` are
    refused; everything recall needs is rebuilt from the log on first use.

    Thread-safe. `add` may run in a background thread while `search` serves
    requests: a search uses what is indexed at that moment (new messages are
    found lexically at once, and by meaning once embedded).

    Example::

        recall = Recall(SentenceTransformerEmbedder(), index_dir=Path("memory.db.vectors"))
        # or Recall() / Recall(None): by words only, no model
        stored = store.append("s1", [Message.create("user", "My dog is called Duoduo.")])
        recall.add("s1", stored)
        result = recall.search("s1", "what is my dog called?", store=store,
                               exclude_seqs=(), max_tokens=300, counter=TiktokenCounter())
        print(result.text)
    """

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        config: RecallConfig | None = None,
        index_dir: str | Path | None = None,
        index_factory: Callable[[str, int], VectorIndex] | None = None,
    ) -> None:
        if index_dir is not None and index_factory is not None:
            raise ConfigError(
                "give Recall an index_dir (FAISS files on this server) or an index_factory "
                "(a shared vector store), not both"
            )
        if embedder is None and (index_dir is not None or index_factory is not None):
            given = "index_dir" if index_dir is not None else "index_factory"
            raise ConfigError(
                f"{given} was given to a Recall without an embedder; lexical recall keeps no "
                "vectors, so pass an embedder too or leave index_dir and index_factory out"
            )
        self.embedder = embedder
        self.config = config or RecallConfig()
        self.index_dir = None if index_dir is None else Path(index_dir)
        self.index_factory = index_factory
        self._files = None if self.index_dir is None else IndexFiles(self.index_dir)
        self._sessions: dict[str, SessionMirror] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        if self.embedder is None:
            return "Recall(None)"
        return f"Recall({self.embedder!r}, index_dir={self.index_dir!r})"

    # -- files ---------------------------------------------------------------------------

    def index_path(self, session_id: str) -> Path | None:
        """The FAISS file of a session (its manifest has the same name with ``.json``)."""
        return None if self._files is None else self._files.path(session_id)

    def _identity(self, dimension: int) -> dict[str, Any]:
        """What a saved index must have been made with to be adopted."""
        return {
            "embedder": self.embedder.name if self.embedder is not None else None,
            "dimension": dimension,
            "granularity": self.config.granularity,
        }

    def _load_saved(self, state: SessionMirror) -> None:
        """Adopt a saved index when it matches this embedder and config; otherwise discard it."""
        if self._files is None or self.embedder is None:
            return
        try:
            state.index = self._files.load(
                state.session_id,
                self._identity(self.embedder.dimension),
                hnsw_threshold=self.config.hnsw_threshold,
            )
        except Exception as exc:  # anything wrong with derived files means: rebuild
            logger.warning(
                "recall index for session %r at %s is unusable (%s); rebuilding it from the log",
                state.session_id,
                self._files.path(state.session_id),
                exc,
            )
            self._files.delete(state.session_id)

    def _save(self, state: SessionMirror) -> None:
        if self._files is None:
            return
        with state.lock:
            if state.forgotten or not isinstance(state.index, FaissIndex):
                return  # nothing yet, or vectors that live in a shared store
            index = state.index
            embedded = [u for u in index.ids() if not is_exchange_unit(u)]
            try:
                self._files.save(
                    state.session_id,
                    index,
                    self._identity(index.dimension),
                    {"last_indexed_seq": max(embedded, default=0)},
                )
                state.unsaved = 0
            except OSError as exc:
                logger.warning(
                    "could not save the recall index of %r to %s: %s",
                    state.session_id,
                    self._files.path(state.session_id),
                    exc,
                )

    def save(self, session_id: str | None = None) -> None:
        """Write unsaved vectors to disk (one session, or all). Does nothing without `index_dir`."""
        with self._lock:
            states = list(self._sessions.values())
        for state in states:
            if (session_id is None or state.session_id == session_id) and state.unsaved:
                self._save(state)

    def close(self) -> None:
        """Save everything; the engine stays usable."""
        self.save()

    # -- session state -------------------------------------------------------------------

    def _new_index(self, session_id: str, dimension: int) -> VectorIndex:
        if self.index_factory is not None:
            return self.index_factory(session_id, dimension)
        return FaissIndex(dimension, hnsw_threshold=self.config.hnsw_threshold)

    def _state(self, session_id: str) -> SessionMirror:
        with self._lock:
            state = self._sessions.get(session_id)
            created = state is None
            if state is None:
                state = self._sessions[session_id] = SessionMirror(
                    session_id, embeds=self.embedder is not None
                )
        if created:
            with state.lock:
                if self.index_factory is not None and self.embedder is not None:
                    # A shared store may already hold units other servers embedded.
                    state.index = self.index_factory(session_id, self.embedder.dimension)
                else:
                    self._load_saved(state)
        return state

    def _embed_queued(self, state: SessionMirror) -> Plan[None]:
        new_index = functools.partial(self._new_index, state.session_id)
        if (yield from state.embed_queued(self.config, new_index)):
            yield Blocking(functools.partial(self._save, state))

    # -- writing -------------------------------------------------------------------------

    def add(self, session_id: str, messages: Sequence[Message]) -> None:
        """Index newly stored messages (``seq`` set). Safe from a background thread.

        Lexical indexing happens at once; embedding happens here too, and if the
        embedder fails the units stay queued (logged) and are retried on the next add.
        """
        run_plan(self._add(session_id, messages), self.embedder)

    async def aadd(self, session_id: str, messages: Sequence[Message]) -> None:
        """Async `add`: embedding awaits the embedder's async API."""
        await arun_plan(self._add(session_id, messages), self.embedder)

    def _add(self, session_id: str, messages: Sequence[Message]) -> Plan[None]:
        state: SessionMirror = yield Blocking(functools.partial(self._state, session_id))
        with state.lock:
            state.drop_units(state.ingest(messages, self.config))
        yield from self._embed_queued(state)

    def catch_up(self, session_id: str, store: Store) -> None:
        """Catch up with the log and embed whatever is not embedded yet.

        Cheap when nothing changed (one ``store.stats`` call). The first time a
        session is seen (or after a gap, or when the log shrank) the whole log
        is read once: vectors it no longer calls for are dropped and missing
        ones embedded. Call it after every append (the memory facade does), or
        let `search` do the reading and `add` the embedding.
        """
        run_plan(self._catch_up(session_id, store), self.embedder)

    async def acatch_up(self, session_id: str, store: Store) -> None:
        """Async `catch_up`: the log is read in a worker thread, embedding awaits the embedder."""
        await arun_plan(self._catch_up(session_id, store), self.embedder)

    def _catch_up(self, session_id: str, store: Store) -> Plan[None]:
        state: SessionMirror = yield Blocking(functools.partial(self._state, session_id))
        yield Blocking(functools.partial(state.read_log, store, self.config))
        yield from self._embed_queued(state)
        if state.unsaved:
            yield Blocking(functools.partial(self._save, state))

    def rebuild(self, session_id: str, store: Store) -> None:
        """Forget the session's vectors and index its whole log again (e.g. after changing models)."""
        self.forget(session_id)
        self.catch_up(session_id, store)

    def forget(self, session_id: str) -> None:
        """Remove a session's vectors and lexical index: in memory, on disk, or in the shared store."""
        with self._lock:
            state = self._sessions.pop(session_id, None)
        index = None
        if state is not None:
            with state.lock:
                state.forgotten = True
                index, state.index = state.index, None
                state.reset_log_view()
        if self.index_factory is not None and self.embedder is not None:
            # Vectors in a shared store outlive this process's view of them.
            if index is None:
                index = self.index_factory(session_id, self.embedder.dimension)
            clear = getattr(index, "clear", None)
            if clear is None:
                index.remove(index.ids())
            else:
                clear()
        if self._files is not None:
            self._files.delete(session_id)

    def stats(self, session_id: str) -> dict[str, Any]:
        """Counts for a session: messages, vectors, queued units, index kind and bytes per vector."""
        state = self._state(session_id)
        with state.lock:
            index = state.index
            return {
                "messages": len(state.order),
                "vectors": len(index) if index is not None else 0,
                "pending": len(state.pending),
                "kind": index.kind if index is not None else None,
                "bytes_per_vector": index.bytes_per_vector() if index is not None else None,
            }

    # -- reading -------------------------------------------------------------------------

    def search(
        self,
        session_id: str,
        query: str,
        *,
        store: Store,
        exclude_seqs: Collection[int] = (),
        max_tokens: int,
        counter: TokenCounter,
        filters: RecallFilters | None = None,
    ) -> RecallResult:
        """Recall what is relevant to `query`, rendered into at most `max_tokens` tokens.

        `exclude_seqs` (what the recent window holds) is never recalled. Never
        raises because of the embedder or the index: it degrades to keyword
        matching (or nothing) and says so in ``result.degraded``.
        """
        plan = self._search(session_id, query, store, exclude_seqs, max_tokens, counter, filters)
        return run_plan(plan, self.embedder)

    async def asearch(
        self,
        session_id: str,
        query: str,
        *,
        store: Store,
        exclude_seqs: Collection[int] = (),
        max_tokens: int,
        counter: TokenCounter,
        filters: RecallFilters | None = None,
    ) -> RecallResult:
        """Async `search`: the log is read in a worker thread, the query embedded with the async API."""
        plan = self._search(session_id, query, store, exclude_seqs, max_tokens, counter, filters)
        return await arun_plan(plan, self.embedder)

    def _search(
        self,
        session_id: str,
        query: str,
        store: Store,
        exclude_seqs: Collection[int],
        max_tokens: int,
        counter: TokenCounter,
        filters: RecallFilters | None,
    ) -> Plan[RecallResult]:
        state = yield from self._ready(session_id, store)
        vector: np.ndarray | None = None
        problem = None
        try:
            if self.embedder is not None:
                vector = yield EmbedQuery(query)
        except Exception as exc:
            logger.warning(
                "the recall embedder failed on the query (%s: %s); recalling by keywords only",
                type(exc).__name__,
                exc,
            )
            vector, problem = None, f"embedder failed ({type(exc).__name__}: {exc}); keywords only"
        return answer(
            state,
            query,
            vector,
            problem,
            excluded=set(exclude_seqs),
            max_tokens=max_tokens,
            counter=counter,
            filters=filters,
            config=self.config,
        )

    def _ready(self, session_id: str, store: Store) -> Plan[SessionMirror]:
        state: SessionMirror = yield Blocking(functools.partial(self._state, session_id))
        try:
            if not state.needs_full_read:
                # Lexical at once; embedding is left to add() and catch_up().
                yield Blocking(functools.partial(state.read_newer, store, self.config))
            if state.needs_full_read:
                # First sight of the session: read and embed its log once.
                yield from self._catch_up(session_id, store)
        except Exception as exc:  # recall degrades, the build goes on
            logger.warning("recall could not read the log of session %r: %s", session_id, exc)
        return state

"""Semantic recall of old turns: `Recall`, the engine a memory holds.

`Recall` mirrors each session's log (`units.SessionMirror`: messages, their
passages and exchanges, lexical indexes, vectors) and answers a query over
one session or all of a user's sessions as one ranking (`search`). Each job
has its own module:

    config       RecallConfig, RecallFilters
    mirrors      which sessions this process mirrors (LRU), and their users' histories
    units        the mirror of one session's log (columns: unit ids and per-message arrays)
    lexical      BM25 (terms: the tokenizer), collection statistics, the store seam
    passages     long messages searched and shown by passage
    search       one query over a user's history: candidates, ranking, rendering (joined:
                 several sessions' candidates under one key space)
    rank         fusion, boosts, relevance floors and MMR over plain arrays
    gate         whether the history holds evidence for the query at all
    render       filling the token cap; RecalledItem, RecallResult
    intent       what a query asks: recall's share, several things, about the user
    plan         one plan, two shells: sync and async written once
    saved        vector files next to the store; lexical indexes a store keeps
    index_scope  the tenant and session a shared vector index serves

Everything here is derived from the log: vectors are persisted next to the
store for speed and rebuilt from the log when missing, stale or corrupt.
Sessions are walls: a search reads only the sessions it is given.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._models import Message
from .._stores.base import SessionStats, Store
from .._stores.capabilities import LogRead
from .._tokens import TokenCounter
from .append_batching import rows_can_wait
from .config import RecallConfig, RecallFilters, check_recall_arguments
from .embed_queue import embed_queued
from .embedder import Embedder
from .index_scope import (
    IndexScope,
    NamespacedStore,
    check_index_factory,
    check_namespace,
    scope_of,
    skip_stored,
)
from .intent import choose_recall_share
from .kept_route import KeptRoute
from .mirrors import MirrorTable, query_to_embed, read_logs
from .plan import Blocking, EmbedQuery, Plan, arun_plan, run_plan
from .render import RecalledItem, RecallResult
from .saved import SavedVectors, known_generation
from .search import answer_sessions, check_search_arguments
from .units import UNKNOWN, SessionMirror
from .vector_index import FaissIndex, VectorIndex

__all__ = [
    "Recall",
    "RecallConfig",
    "RecallFilters",
    "RecallResult",
    "RecalledItem",
    "choose_recall_share",
]

logger = logging.getLogger("convmem")

# Sessions a Recall mirrors in one process before the least recently used is dropped.
DEFAULT_MAX_SESSIONS = 1024


# -- the engine ---------------------------------------------------------------------


class Recall:
    """Semantic recall over a session's log: index on write, hybrid search on read.

    Args:
        embedder: any `Embedder` (`SentenceTransformerEmbedder`, `HashingEmbedder`, an adapter),
            or ``None`` for lexical recall: BM25 over the CJK-aware terms of each message and
            exchange, with the same boosts, relevance floor and rendering, and no model at all
            (what a `ConversationMemory` gets by default).
        config: ranking and rendering knobs (`RecallConfig`).
        index_dir: where vectors are persisted, one ``<session>.<generation>.faiss`` file
            plus a ``.json`` manifest per session log; ``None`` keeps them in memory only.
            Put it next to the store, e.g. ``Path(str(db_path) + ".vectors")``.
        index_factory: ``(scope: IndexScope) -> VectorIndex`` for vectors kept in a
            shared vector store instead of files on this server, e.g.
            ``LlamaIndexVectorIndex.factory(shared)``. The scope names the tenant
            (`namespace`), the session, its owner and its log's generation: an index
            keeps one tenant's vectors of one conversation, so tenants sharing the
            vector store never see or delete each other's, and a session forgotten by
            any path (TTL and ``expire_idle`` included) never lends its vectors to the
            next session of that id.
        namespace: the tenant in `index_factory`'s scopes: a string when this engine
            serves one store, or a function of the store; by default the store's own
            ``namespace`` (where its data lives: the SQLite file, the Redis server and
            prefix, the PostgreSQL database and schema).
        max_sessions: how many sessions' mirrors (texts, lexical indexes, vectors) stay in
            this process (default 1024). Beyond that the least recently used one is saved
            and dropped, and read again from its file and the log when next used.

    Without an embedder there are no vectors, so `index_dir` and `index_factory` are
    refused. A store that keeps recall's keyword index of each user's history
    (`HostsHistoryIndex`: `SQLiteStore` in its file, `PostgresStore` in its schema,
    unless opened with ``lexical_index="process"``) is searched there, so a new
    process reads no log to answer; any other store's logs are mirrored in this
    process on first use (bounded by `max_sessions`).

    Thread-safe. `add` may run in a background thread while `search` serves
    requests: a search uses what is indexed at that moment (new messages are
    found lexically at once, and by meaning once embedded).

    One `Recall` may serve the memories of many stores (tenants): what it keeps is
    per store and session, so two stores with the same session id never see each
    other's turns, in memory or in files. Every read and catch-up checks the
    log's generation (`Store.stats`, read anyway): a session that another process
    forgot, cleared or edited is dropped and mirrored afresh from the log, so
    deleted text is never recalled and its vectors are never written back.

    Example::

        recall = Recall(SentenceTransformerEmbedder(), index_dir=Path("memory.db.vectors"))
        # or Recall() / Recall(None): by words only, no model
        stored = store.append("s1", [Message.create("user", "My dog is called Duoduo.")])
        recall.add("s1", stored, store=store)
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
        index_factory: Callable[[IndexScope], VectorIndex] | None = None,
        namespace: str | Callable[[Store], str] | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        check_recall_arguments(embedder, config, index_dir, index_factory, max_sessions)
        check_index_factory(index_factory)
        if namespace is not None and not callable(namespace):
            check_namespace(namespace)
        self.embedder = embedder
        self.namespace = namespace
        self.config = config or RecallConfig()
        self.index_dir = None if index_dir is None else Path(index_dir)
        self.index_factory = index_factory
        self._saved = (
            None
            if self.index_dir is None or embedder is None
            else SavedVectors(self.index_dir, embedder, lambda: self.config)
        )
        self.max_sessions = max_sessions
        self._mirrors = MirrorTable(max_sessions, embeds=embedder is not None)
        # Stores that keep the keyword index of their users' histories are searched there.
        self._kept = KeptRoute(
            lambda: self.config, words_only=embedder is None, store_key=self._mirrors.locked_store_key
        )

    def __repr__(self) -> str:
        if self.embedder is None:
            return "Recall(None)"
        return f"Recall({self.embedder!r}, index_dir={self.index_dir!r})"

    # -- files ---------------------------------------------------------------------------

    def index_path(self, session_id: str, *, store: Store | None = None) -> Path | None:
        """The FAISS file of a session's log (its manifest has the same name with ``.json``).

        The name depends on the log's generation: read from `store` when given, else
        from what this engine mirrors of the session.
        """
        if self._saved is None:
            return None
        if store is not None:
            generation = store.stats(session_id).generation
        else:
            state = self._mirrors.find(session_id)
            generation = None if state is None else known_generation(state.generation)
        return self._saved.files.path(session_id, generation)

    def _save(self, state: SessionMirror) -> None:
        if self._saved is not None:
            self._saved.save(state)

    def save(self, session_id: str | None = None) -> None:
        """Write unsaved vectors to disk (one session, or all). Does nothing without `index_dir`."""
        for state in self._mirrors.all():
            if (session_id is None or state.session_id == session_id) and state.unsaved:
                self._save(state)

    def close(self) -> None:
        """Save everything; the engine stays usable."""
        self.save()

    # -- session state -------------------------------------------------------------------

    def _new_index(self, session_id: str, dimension: int) -> VectorIndex:
        return FaissIndex(dimension, hnsw_threshold=self.config.hnsw_threshold)

    def _scope(self, session_id: str, store: Store | None, stats: SessionStats | None = None) -> IndexScope:
        assert self.embedder is not None
        return scope_of(self.namespace, session_id, store, stats, self.embedder.dimension)

    def _state(self, session_id: str, store: Store | None = None) -> SessionMirror:
        """The mirror of a session of `store` (see `MirrorTable.get`); the mirrors it pushed
        out of the table save their unsaved vectors."""
        state, evicted = self._mirrors.get(session_id, store)
        for old in evicted:
            if old.unsaved:
                self._save(old)
        return state

    def _follow_log(
        self,
        state: SessionMirror,
        store: Store,
        known_stats: SessionStats | None = None,
        appended: Sequence[Message] = (),
        read: LogRead | None = None,
    ) -> bool:
        """Bring the mirror in step with the log; True when the whole log was read.

        One ``store.stats`` call when nothing changed (none with `known_stats`). A new
        mirror, a gap, or a log of another generation (forgotten, cleared, edited, or
        never checked) is read whole, from `read` when given (the log read with others,
        see `MirrorTable.unread`); `appended` (see `catch_up`) is not read back.
        """
        if not state.needs_full_read:
            state.read_newer(store, self.config, known_stats, appended)
            if not state.needs_full_read:
                return False
        with state.read_lock:
            if not state.needs_full_read:  # another thread read the log while this one waited
                state.read_newer(store, self.config)
                if not state.needs_full_read:
                    return False
            return self._read_log(state, store, read)

    def _read_log(self, state: SessionMirror, store: Store, read: LogRead | None = None) -> bool:
        """Read the whole log into the mirror (``state.read_lock`` held), or take it from
        `read`; True."""
        # The stats before the log: see adopt_log.
        stats = store.stats(state.session_id) if read is None else read.stats
        generation = stats.generation
        changed, retired, first_sight = False, state.generation, False
        self._mirrors.attach(state, stats.user_id)
        with state.lock:
            if state.index is None and state.generation is UNKNOWN:
                # First sight: vectors saved for this very log, or held in a shared store.
                if self.index_factory is not None and self.embedder is not None:
                    state.index = self.index_factory(self._scope(state.session_id, store, stats))
                elif self._saved is not None:
                    self._saved.load(state, generation)
                state.generation, first_sight = generation, True
            elif state.generation != generation:
                changed, retired = True, state.generation
        log = store.messages(state.session_id) if read is None else read.messages

        def stats_after() -> SessionStats:
            return store.stats(state.session_id) if read is None else read.stats_after

        # Vectors loaded at first sight are trusted to match the log only if no edit came
        # between the two reads (generations never repeat); otherwise all are embedded again.
        trusted = not first_sight or state.index is None or stats_after().generation == generation
        state.adopt_log(log, generation, self.config, trust_index=trusted)
        follow = getattr(state.index, "follow_generation", None)
        if follow is not None:
            # A shared index that keeps vectors per log generation: what the mirror kept
            # across an edit is valid for the new log, and can be stored under it.
            try:
                follow(generation)
            except Exception as exc:  # the vectors still serve here; other servers embed them
                logger.warning(
                    "could not store the kept vectors of session %r under its new log: %s",
                    state.session_id,
                    exc,
                )
        # What add() ingested while the log was read is newer than the log read: read it again.
        state.read_newer(store, self.config, None if read is None else read.stats_after)
        if changed and self._saved is not None:
            # Vectors of a log that is gone: the kept ones are saved under the new generation.
            if retired is not UNKNOWN:
                self._saved.files.delete(state.session_id, known_generation(retired))
            with state.lock:
                state.unsaved += 1
        return True

    def _embed_queued(self, state: SessionMirror) -> Plan[None]:
        if self.index_factory is not None:
            if state.index is None:
                # A shared store takes vectors only under the tenant and log they belong to,
                # known once the log is read: until then the units stay queued.
                return
            yield Blocking(functools.partial(skip_stored, state))
        new_index = functools.partial(self._new_index, state.session_id)
        if (yield from embed_queued(state, self.config, new_index)):
            yield Blocking(functools.partial(self._save, state))

    # -- writing -------------------------------------------------------------------------

    def add(self, session_id: str, messages: Sequence[Message], *, store: Store | None = None) -> None:
        """Index newly stored messages (``seq`` set). Safe from a background thread.

        Pass the `store` they were appended to: the log's generation is checked first
        (one small read), so a session forgotten or edited meanwhile is mirrored afresh.
        Without it the messages join the mirror of the one store this engine serves
        the session for (checked against the log at the next search or catch-up).

        Lexical indexing happens at once; embedding happens here too, and if the
        embedder fails the units stay queued (logged) and are retried on the next add.
        """
        run_plan(self._add(session_id, messages, store), self.embedder)

    async def aadd(self, session_id: str, messages: Sequence[Message], *, store: Store | None = None) -> None:
        """Async `add`: embedding awaits the embedder's async API."""
        await arun_plan(self._add(session_id, messages, store), self.embedder)

    def _add(self, session_id: str, messages: Sequence[Message], store: Store | None) -> Plan[None]:
        if (yield from self._kept.plan_catch_up(store, session_id)):
            return  # the store keeps the index: the messages are in its log, read from there
        state: SessionMirror = yield Blocking(functools.partial(self._state, session_id, store))
        if store is not None:
            yield Blocking(functools.partial(self._follow_log, state, store))
        with state.lock:
            state.drop_units(state.ingest(messages, self.config))
        yield from self._embed_queued(state)

    def catch_up(
        self, session_id: str, store: Store, *, batched: bool = False, appended: Sequence[Message] = ()
    ) -> None:
        """Catch up with the log and embed whatever is not embedded yet.

        Cheap when nothing changed (one ``store.stats`` call). The first time a session is
        seen (or after a gap, or when the log shrank) the whole log is read once: vectors it
        no longer calls for are dropped and missing ones embedded. Call it after every append
        (the memory facade does, passing the messages `store.append` returned as `appended`:
        not read back), or let `search` do the reading and `add` the embedding. With
        ``batched=True`` an index the store keeps (`HostsHistoryIndex`) is written once 32
        messages are due; a search, ``flush`` or ``close`` writes the rest.
        """
        run_plan(self._catch_up(session_id, store, batched, appended), self.embedder)

    async def acatch_up(
        self, session_id: str, store: Store, *, batched: bool = False, appended: Sequence[Message] = ()
    ) -> None:
        """Async `catch_up`: the log is read in a worker thread, embedding awaits the embedder."""
        await arun_plan(self._catch_up(session_id, store, batched, appended), self.embedder)

    def _catch_up(
        self, session_id: str, store: Store, batched: bool, appended: Sequence[Message]
    ) -> Plan[None]:
        if batched and appended and rows_can_wait(self._kept, store, session_id, appended[-1].seq or 0):
            return
        if (yield from self._kept.plan_catch_up(store, session_id, batched=batched)):
            return
        state: SessionMirror = yield Blocking(functools.partial(self._state, session_id, store))
        yield Blocking(functools.partial(self._follow_log, state, store, appended=appended))
        yield from self._embed_queued(state)
        if state.unsaved:
            yield Blocking(functools.partial(self._save, state))

    def rebuild(self, session_id: str, store: Store) -> None:
        """Forget the session's vectors and index its whole log again (e.g. after changing models)."""
        self.forget(session_id, store=store)
        self._kept.reset(store, session_id)
        self.catch_up(session_id, store)

    def forget(self, session_id: str, *, store: Store | None = None) -> None:
        """Remove a session's vectors and lexical index: in memory, on disk, or in the shared store.

        With `store`, that store's session (`forget_session` and the memory pass it),
        also as mirrored for another object on the same data (an async store's sync
        twin: the same ``namespace``); without, every store's copy of the session id
        this engine mirrors. The files of every generation go either way. With an
        `index_factory`, the vectors of the session's tenant go from the shared store,
        every generation of them, and no other tenant's: without `store` the tenant must
        be clear (one store mirrored or served, or a `namespace` string), else `ConfigError`.
        """
        shared = self.index_factory is not None and self.embedder is not None
        states = self._mirrors.take(session_id, store, self._tenant, one_store=shared)
        indexes: list[VectorIndex] = []
        for state in states:
            with state.lock:
                state.forgotten = True
                if state.index is not None and all(state.index is not seen for seen in indexes):
                    indexes.append(state.index)
                state.index = None
                state.reset_log_view()
        if shared:
            # Vectors in a shared store outlive this process's view of them.
            if not indexes:
                assert self.index_factory is not None
                indexes.append(
                    self.index_factory(self._scope(session_id, store or self._mirrors.only_store()))
                )
            for index in indexes:
                clear = getattr(index, "clear", None)
                if clear is None:
                    index.remove(index.ids())
                else:
                    clear()
        if self._saved is not None:
            self._saved.files.delete_all(session_id)

    def _tenant(self, store: Store) -> str | None:
        """The namespace `store` declares or this engine gives it; None when it has none."""
        if isinstance(self.namespace, str):
            return self.namespace
        if self.namespace is not None:
            return self.namespace(store)
        return store.namespace if isinstance(store, NamespacedStore) else None

    def stats(self, session_id: str, *, store: Store | None = None) -> dict[str, Any]:
        """Counts for a session: messages, vectors, queued units, index kind and bytes per vector.

        What this engine holds now (nothing for a session it does not mirror); name the
        `store` when it serves the session id for several stores.
        """
        return SessionMirror.counts(self._mirrors.find(session_id, store))

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
        other_sessions: Sequence[str | SessionStats] = (),
        session_stats: SessionStats | None = None,
    ) -> RecallResult:
        """Recall what is relevant to `query`, rendered into at most `max_tokens` tokens.

        `exclude_seqs` (what the recent window holds) is never recalled. Never
        raises because of the embedder or the index: it degrades to keyword
        matching (or nothing) and says so in ``result.degraded``.

        `other_sessions` (sessions of the same user in the same store, by id or
        by the `SessionStats` just read for them, which saves a read each) are
        searched too and ranked with this one; their items carry their
        ``session_id`` and come with their date (see `answer_sessions`). The
        caller decides which sessions may be read: recall never looks beyond
        the ids it is given. `session_stats`, the `SessionStats` of `session_id`
        just read from `store` (as a build reads them), saves reading them again.
        """
        plan = self._search(
            session_id,
            query,
            store,
            exclude_seqs,
            max_tokens,
            counter,
            filters,
            other_sessions,
            session_stats,
        )
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
        other_sessions: Sequence[str | SessionStats] = (),
        session_stats: SessionStats | None = None,
    ) -> RecallResult:
        """Async `search`: the log is read in a worker thread, the query embedded with the async API."""
        plan = self._search(
            session_id,
            query,
            store,
            exclude_seqs,
            max_tokens,
            counter,
            filters,
            other_sessions,
            session_stats,
        )
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
        other_sessions: Sequence[str | SessionStats] = (),
        session_stats: SessionStats | None = None,
    ) -> Plan[RecallResult]:
        check_search_arguments(session_id, max_tokens, other_sessions, session_stats)
        kept = yield from self._kept.plan_search(
            store,
            session_id,
            query,
            other_sessions=other_sessions,
            session_stats=session_stats,
            excluded=exclude_seqs,
            max_tokens=max_tokens,
            counter=counter,
            filters=filters,
        )
        if kept is not None:
            return kept
        known = {session_id: session_stats}
        for other in other_sessions:
            other_id, stats = (other, None) if isinstance(other, str) else (other.session_id, other)
            known.setdefault(other_id, stats)
        unread = self._mirrors.unread(store, list(known))
        reads = (yield Blocking(functools.partial(read_logs, store, unread))) if unread else {}
        mirrors = []
        for each, stats in known.items():
            mirrors.append((yield from self._ready(each, store, stats, reads.get(each))))
        vector: np.ndarray | None = None
        problem = None
        try:
            if self.embedder is not None:
                dense_query = yield from query_to_embed(query, mirrors, self.config)
                vector = yield EmbedQuery(dense_query)
        except Exception as exc:
            logger.warning(
                "the recall embedder failed on the query (%s: %s); recalling by keywords only",
                type(exc).__name__,
                exc,
            )
            vector, problem = None, f"embedder failed ({type(exc).__name__}: {exc}); keywords only"
        return answer_sessions(
            mirrors,
            query,
            vector,
            problem,
            excluded=set(exclude_seqs),
            max_tokens=max_tokens,
            counter=counter,
            filters=filters,
            config=self.config,
        )

    def _ready(
        self,
        session_id: str,
        store: Store,
        known_stats: SessionStats | None = None,
        read: LogRead | None = None,
    ) -> Plan[SessionMirror]:
        state: SessionMirror = yield Blocking(functools.partial(self._state, session_id, store))
        try:
            # Newer messages are found lexically at once; embedding is left to add() and
            # catch_up(), except when the whole log was read (first sight, another generation).
            follow = functools.partial(self._follow_log, state, store, known_stats, read=read)
            if (yield Blocking(follow)):
                yield from self._embed_queued(state)
                if state.unsaved:
                    yield Blocking(functools.partial(self._save, state))
            else:
                # The session may have been given to a user since it was first read.
                self._mirrors.attach(state, state.user_id)
        except Exception as exc:  # recall degrades, the build goes on
            logger.warning("recall could not read the log of session %r: %s", session_id, exc)
        return state

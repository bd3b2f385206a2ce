"""Keeping a session's derived state (summary, facts, vectors) in step with its log.

Each kind of derived state is updated in three steps: *plan* (read the state
record and the messages it has not covered yet), *compute* (the summarizer,
extractor or embedder: the only slow step, sync or async) and *commit* (write
the new state with compare-and-set on the version that was read). A watermark
(`covers_through_seq`) is stored in the same record, so no message is folded
in twice or skipped, whatever the number of writers, restarts or failures:
a commit that lost the race is discarded and the next trigger starts again
from the stored watermark.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from .._config import MemoryConfig
from .._context.recent import window_start
from .._errors import ModelTimeoutError, StoreError
from .._models import Message, Role
from .._stores.base import StateRecord, Store
from .._tokens import TokenCounter
from .background import Backoff, Identity, model_calls, shared_pool
from .facts import Fact, FactBook, FactExtractor
from .records import FACTS_KEY, INDEX_KEY, SUMMARY_KEY, FactsRecord, Summary, forget_fact_of
from .rule_extractor import RuleFactExtractor
from .summarizer import ExtractiveSummarizer, Summarizer

if TYPE_CHECKING:  # recall loads numpy; the derived state only calls the engine it is given
    from .._recall.engine import Recall

__all__ = ["DerivedState"]

logger = logging.getLogger("convmem")

# Room kept free of the summary's share for the system prompt, the section
# header and separators, so a summary written for the default budget fits.
_SUMMARY_SLACK_TOKENS = 24

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class _FactEdit:
    """Facts with those of deleted or replaced messages dropped, and replacements to read."""

    book: FactBook
    covers_through_seq: int
    version: int
    replaced: tuple[Message, ...]


@dataclasses.dataclass(frozen=True)
class _SummaryJob:
    previous: Summary
    version: int
    messages: tuple[Message, ...]
    through_seq: int
    max_tokens: int


class DerivedState:
    """Summary, facts and vector index of one session, updated after each append.

    The summary covers what left the recent window (the last
    ``config.keep_recent_turns`` turns of the log, or without a cap the newest
    turns that fit ``config.eviction_window_tokens``); facts are kept only with a
    `fact_extractor` and vectors only with a `recall` engine.
    """

    def __init__(
        self,
        *,
        session_id: str,
        store: Store,
        config: MemoryConfig,
        counter: TokenCounter,
        summarizer: Summarizer,
        fact_extractor: FactExtractor | None,
        recall: Recall | None,
    ) -> None:
        self.session_id = session_id
        self.store = store
        self.config = config
        self.counter = counter
        self.summarizer = summarizer
        self.fact_extractor = fact_extractor
        self.recall = recall
        self.backoff = Backoff()
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: set[str] = set()
        self._rerun: set[str] = set()
        # The stored facts record, its book's JSON and the book parsed from it.
        self._facts_cache: tuple[str, str, FactBook] | None = None

    # -- triggering ---------------------------------------------------------------

    def _jobs(self) -> list[tuple[str, Callable[[], object], Callable[[], Awaitable[object]]]]:
        """What an append sets off: (key, sync job, async job) for each kind that is on."""
        jobs: list[tuple[str, Callable[[], object], Callable[[], Awaitable[object]]]] = []
        if self.fact_extractor is not None:
            jobs.append((FACTS_KEY, self.update_facts, self.aupdate_facts))
        if self.config.summary_trigger != "never":
            jobs.append((SUMMARY_KEY, self.update_summary, self.aupdate_summary))
        if self.recall is not None:
            jobs.append((INDEX_KEY, self.update_index, self.aupdate_index))
        return jobs

    def after_append(self) -> None:
        """Bring derived state up to date: inline, or queued when ``config.background``."""
        for key, job, _ in self._jobs():
            if not self.backoff.ready(key):
                continue
            if self.config.background:
                self._submit(key, job)
            else:
                self._run_inline(key, job)

    def _submit(self, kind: str, job: Callable[[], object]) -> None:
        """Queue `job` on the process's worker pool, keyed by what it updates."""
        if self._closed:
            return
        accepted = shared_pool().submit(
            (Identity(self.store), self.session_id, kind),
            job,
            owner=self,
            timeout=self.config.background_timeout,
            on_done=functools.partial(self.backoff.record, kind),
            name=f"{kind} of session {self.session_id!r}",
        )
        if not accepted:
            logger.warning(
                "the %s of session %r is not updated now: its last update timed out and is still "
                "running (or every background thread is stuck); it will be retried",
                kind,
                self.session_id,
            )
            self.backoff.record(kind, False)

    def _run_inline(self, key: str, job: Callable[[], object]) -> None:
        try:
            job()
        except Exception as exc:  # derived state must never cost a stored turn
            logger.warning(
                "updating the %s of session %r failed; it will be retried: %r", key, self.session_id, exc
            )
            self.backoff.record(key, False)
        else:
            self.backoff.record(key, True)

    async def aafter_append(self) -> None:
        """Async `after_append`: model calls are awaited, in tasks when ``config.background``."""
        for key, _, job in self._jobs():
            if not self.backoff.ready(key):
                continue
            if not self.config.background:
                await self._arun(key, job)
            elif key in self._running:
                # One task per key: the running one goes round again when it ends,
                # so concurrent tasks never race each other for the same record.
                self._rerun.add(key)
            else:
                self._running.add(key)
                task = asyncio.create_task(self._arun_serially(key, job))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _arun_serially(self, key: str, job: Callable[[], Awaitable[object]]) -> None:
        try:
            while True:
                self._rerun.discard(key)
                await self._arun(key, job)
                if key not in self._rerun or not self.backoff.ready(key):
                    return
        finally:
            self._running.discard(key)

    async def _arun(self, key: str, job: Callable[[], Awaitable[object]]) -> None:
        try:
            await asyncio.wait_for(job(), timeout=self.config.background_timeout)
        except Exception as exc:  # includes the timeout
            logger.warning(
                "updating the %s of session %r failed; it will be retried: %r", key, self.session_id, exc
            )
            self.backoff.record(key, False)
        else:
            self.backoff.record(key, True)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for this session's queued background work; False if `timeout` passed first.

        A job that timed out no longer counts: it was reported failed and is retried later.
        The keyword index rows the appends left for later are written too.
        """
        done = shared_pool().flush(self, timeout)
        self.write_index()
        return done

    async def aflush(self, timeout: float | None = None) -> bool:
        while self._tasks:
            _, not_done = await asyncio.wait(list(self._tasks), timeout=timeout)
            if not_done:
                return False
        done = await asyncio.to_thread(shared_pool().flush, self, timeout)
        await self.awrite_index()
        return done

    def close(self, timeout: float = 5.0) -> None:
        """Finish queued background work (up to `timeout`), then take no more.

        Jobs still queued after that are cancelled: the log keeps every turn, and
        the next memory opened on the session brings its derived state up to date.
        """
        self._closed = True
        pool = shared_pool()
        if not pool.flush(self, timeout):
            pool.cancel(self)
        self.write_index()

    # -- model calls --------------------------------------------------------------

    def _offline(self, kind: str) -> bool:
        """Whether `kind` is computed by convmem's own offline code, which calls no model
        (exactly those classes: a subclass may call one)."""
        if kind == SUMMARY_KEY:
            return type(self.summarizer) is ExtractiveSummarizer
        return type(self.fact_extractor) is RuleFactExtractor

    def _model(self, kind: str, run: Callable[[], _T]) -> _T:
        """`run()` (a summarizer's or extractor's call) with ``config.model_timeout``."""
        if self._offline(kind):
            return run()
        return model_calls().call(
            (Identity(self.store), self.session_id, kind),
            run,
            timeout=self._model_timeout(),
            what=f"the {kind} model call of session {self.session_id!r:.80}",
        )

    async def _amodel(self, kind: str, run: Callable[[], Awaitable[_T]]) -> _T:
        """Async `_model`."""
        if self._offline(kind):
            return await run()
        return await model_calls().acall(
            (Identity(self.store), self.session_id, kind),
            run,
            timeout=self._model_timeout(),
            what=f"the {kind} model call of session {self.session_id!r:.80}",
        )

    def _model_timeout(self) -> float:
        # A job is given up at background_timeout anyway: waiting longer on its model would
        # keep a worker thread as well as the model's.
        if self.config.background:
            return min(self.config.model_timeout, self.config.background_timeout)
        return self.config.model_timeout

    # -- summary ------------------------------------------------------------------

    def summary(self) -> Summary:
        return Summary.from_record(self.store.get_state(self.session_id, SUMMARY_KEY), self.session_id)

    def summary_max_tokens(self) -> int:
        """The size a stored summary aims for: its share of the default budget."""
        prompt = self.counter.count_text(self.config.system_prompt or "")
        room = int(self.config.summary_share * (self.config.budget - prompt)) - _SUMMARY_SLACK_TOKENS
        return max(16, room)

    def _due(self, messages: Sequence[Message]) -> bool:
        if self.config.summary_trigger == "turns":
            return sum(m.role is Role.USER for m in messages) >= self.config.summary_every_turns
        if self.config.summary_trigger == "tokens":
            threshold = self.config.summary_threshold * self.config.summary_share * self.config.budget
            return sum(m.token_count or 0 for m in messages) > threshold
        return False

    def _plan_summary(self, force: bool) -> _SummaryJob | None:
        record = self.store.get_state(self.session_id, SUMMARY_KEY)
        previous = Summary.from_record(record, self.session_id)
        start = window_start(
            self.store,
            self.session_id,
            self.config.keep_recent_turns,
            window_tokens=self.config.eviction_window_tokens,
        )
        if start is None or start - 1 <= previous.covers_through_seq:
            return None
        evicted = self.store.messages(
            self.session_id, after_seq=previous.covers_through_seq, through_seq=start - 1
        )
        if not evicted or not (force or self._due(evicted)):
            return None
        return _SummaryJob(
            previous=previous,
            version=record.version if record else 0,
            messages=tuple(evicted),
            through_seq=start - 1,
            max_tokens=self.summary_max_tokens(),
        )

    def _commit_summary(self, job: _SummaryJob, text: str) -> bool:
        summary = Summary(text.strip(), job.through_seq, time.time())
        # requires_seq: a session forgotten while this job ran stays forgotten.
        written = self.store.put_state(
            self.session_id,
            SUMMARY_KEY,
            summary.to_json(),
            expected_version=job.version,
            requires_seq=job.through_seq,
        )
        if written is None:
            logger.debug("summary of %r was updated by another writer; result discarded", self.session_id)
        return written is not None

    def update_summary(self, *, force: bool = False) -> bool:
        """Fold evicted, unsummarized turns into the summary when the trigger says so.

        A commit that lost the race to another writer is planned again from the
        summary that writer stored (up to three times).
        """
        for _ in range(3):
            job = self._plan_summary(force)
            if job is None:
                return False
            text = self._model(
                SUMMARY_KEY,
                functools.partial(
                    self.summarizer.summarize,
                    job.previous.text or None,
                    job.messages,
                    max_tokens=job.max_tokens,
                ),
            )
            if self._commit_summary(job, text):
                return True
        return False

    async def aupdate_summary(self, *, force: bool = False) -> bool:
        for _ in range(3):
            job = await asyncio.to_thread(self._plan_summary, force)
            if job is None:
                return False
            text = await self._amodel(
                SUMMARY_KEY,
                functools.partial(
                    self.summarizer.asummarize,
                    job.previous.text or None,
                    job.messages,
                    max_tokens=job.max_tokens,
                ),
            )
            if await asyncio.to_thread(self._commit_summary, job, text):
                return True
        return False

    # -- facts --------------------------------------------------------------------

    def facts_book(self) -> FactBook:
        """The stored facts; parsed once per stored version (treat the result as read-only)."""
        return self.facts_book_of(self.store.get_state(self.session_id, FACTS_KEY))

    def facts_book_of(self, record: StateRecord | None) -> FactBook:
        """The fact book in this session's facts `record`, just read (see `facts_book`)."""
        if record is None:
            return FactBook()
        cached = self._facts_cache
        if cached is not None and cached[0] == record.value:
            return cached[2]
        # Every write moves the record's covers_through_seq, but the facts themselves
        # seldom change: parse the book again only when its own JSON did.
        book_json, _ = FactsRecord.fields(record, self.session_id)
        if cached is not None and cached[1] == book_json:
            book = cached[2]
        else:
            book = FactsRecord.parse_book(book_json, self.session_id)
        self._facts_cache = (record.value, book_json, book)
        return book

    def _plan_facts(self) -> tuple[FactsRecord, int, list[Message]] | None:
        record = self.store.get_state(self.session_id, FACTS_KEY)
        state = FactsRecord.from_record(record, self.session_id)
        new = self.store.messages(self.session_id, after_seq=state.covers_through_seq)
        if not new:
            return None
        return state, record.version if record else 0, new

    def _commit_facts(self, state: FactsRecord, version: int, new: list[Message], facts: list[Fact]) -> bool:
        book = FactBook.from_json(state.book.to_json())
        book.apply(facts)
        updated = FactsRecord(book, new[-1].seq or state.covers_through_seq)
        written = self.store.put_state(
            self.session_id,
            FACTS_KEY,
            updated.to_json(),
            expected_version=version,
            requires_seq=updated.covers_through_seq,
        )
        return written is not None

    def update_facts(self) -> bool:
        """Extract facts from messages not seen yet; a lost race is retried with fresh state."""
        if self.fact_extractor is None:
            return False
        for _ in range(3):
            plan = self._plan_facts()
            if plan is None:
                return False
            state, version, new = plan
            facts = self._model(FACTS_KEY, functools.partial(self.fact_extractor.extract, new))
            if self._commit_facts(state, version, new, facts):
                return True
        return False

    async def aupdate_facts(self) -> bool:
        if self.fact_extractor is None:
            return False
        for _ in range(3):
            plan = await asyncio.to_thread(self._plan_facts)
            if plan is None:
                return False
            state, version, new = plan
            facts = await self._amodel(FACTS_KEY, functools.partial(self.fact_extractor.aextract, new))
            if await asyncio.to_thread(self._commit_facts, state, version, new, facts):
                return True
        return False

    def forget_fact(self, key: str) -> bool:
        """Remove the fact `key` (and its history); False if there was no such fact."""
        return forget_fact_of(self.store, self.session_id, key)

    # -- deleted and rewritten messages -------------------------------------------

    def after_edit(self, seqs: Sequence[int], replaced: Sequence[Message] = ()) -> None:
        """Stop serving text of messages that were deleted or replaced (`seqs`), then catch up.

        The summary is reset when it covered one of them (it is rebuilt from the log as
        turns are evicted); facts stated by them are dropped, and facts of a replacement
        that the fact watermark already passed are extracted from it. Recall notices the
        log's new generation by itself. Each write is a compare-and-set, so a summary or
        facts job that read the old log loses its commit instead of writing it back.
        """
        self._reset_summary(seqs)
        if self.fact_extractor is not None:
            extractor = self.fact_extractor
            for _ in range(5):
                plan = self._plan_fact_edit(seqs, replaced)
                if plan is None:
                    break
                try:
                    facts = (
                        self._model(FACTS_KEY, functools.partial(extractor.extract, plan.replaced))
                        if plan.replaced
                        else []
                    )
                except ModelTimeoutError as exc:
                    plan, facts = self._reread_later(plan, exc), []
                if self._commit_fact_edit(plan, facts):
                    break
            else:
                raise self._too_many_writers("facts")
        self.after_append()

    async def aafter_edit(self, seqs: Sequence[int], replaced: Sequence[Message] = ()) -> None:
        """Async `after_edit`: the extractor is awaited."""
        await asyncio.to_thread(self._reset_summary, seqs)
        if self.fact_extractor is not None:
            for _ in range(5):
                plan = await asyncio.to_thread(self._plan_fact_edit, seqs, replaced)
                if plan is None:
                    break
                extract = functools.partial(self.fact_extractor.aextract, plan.replaced)
                try:
                    facts = await self._amodel(FACTS_KEY, extract) if plan.replaced else []
                except ModelTimeoutError as exc:
                    plan, facts = self._reread_later(plan, exc), []
                if await asyncio.to_thread(self._commit_fact_edit, plan, facts):
                    break
            else:
                raise self._too_many_writers("facts")
        await self.aafter_append()

    def _reread_later(self, plan: _FactEdit, exc: ModelTimeoutError) -> _FactEdit:
        """The edit's commit when the replacements' facts could not be read now: the facts of
        the edited messages still go, and the watermark moves back before the first
        replacement, so the next fact update reads it (and what follows) again."""
        logger.warning("%s; the facts of session %r are read again from the edit on", exc, self.session_id)
        first = min(m.seq or 0 for m in plan.replaced)
        covers = min(plan.covers_through_seq, max(0, first - 1))
        return dataclasses.replace(plan, covers_through_seq=covers, replaced=())

    def _too_many_writers(self, what: str) -> StoreError:
        return StoreError(
            f"could not update the {what} of session {self.session_id!r} after an edit: too many "
            "concurrent writers; retry the edit"
        )

    def _reset_summary(self, seqs: Sequence[int]) -> None:
        for _ in range(5):
            record = self.store.get_state(self.session_id, SUMMARY_KEY)
            summary = Summary.from_record(record, self.session_id)
            if record is None or not seqs or min(seqs) > summary.covers_through_seq:
                return
            # An empty summary covering nothing: rebuilt from the log, which no longer holds the text.
            # requires_seq=0: a session deleted meanwhile gets no state record back.
            if self.store.put_state(
                self.session_id,
                SUMMARY_KEY,
                Summary().to_json(),
                expected_version=record.version,
                requires_seq=0,
            ):
                return
        raise self._too_many_writers("summary")

    def _plan_fact_edit(self, seqs: Sequence[int], replaced: Sequence[Message]) -> _FactEdit | None:
        record = self.store.get_state(self.session_id, FACTS_KEY)
        if record is None:
            return None
        state = FactsRecord.from_record(record, self.session_id)
        book = FactBook.from_json(state.book.to_json())
        dropped = book.drop_seqs(seqs)
        # A replacement the watermark passed is never read again by update_facts: read it here.
        again = tuple(m for m in replaced if (m.seq or 0) <= state.covers_through_seq)
        if not dropped and not again:
            return None
        return _FactEdit(book, state.covers_through_seq, record.version, again)

    def _commit_fact_edit(self, plan: _FactEdit, facts: list[Fact]) -> bool:
        plan.book.apply(facts)
        written = self.store.put_state(
            self.session_id,
            FACTS_KEY,
            FactsRecord(plan.book, plan.covers_through_seq).to_json(),
            expected_version=plan.version,
            requires_seq=0,
        )
        return written is not None

    # -- vectors ------------------------------------------------------------------

    def update_index(self) -> None:
        """Index whatever the recall index has not seen yet (it tracks its own watermark)."""
        if self.recall is not None:
            self.recall.catch_up(self.session_id, self.store, batched=True)

    async def aupdate_index(self) -> None:
        if self.recall is not None:
            await self.recall.acatch_up(self.session_id, self.store, batched=True)

    def write_index(self) -> None:
        """Write what `update_index` left for later (an index the store keeps is written
        in batches); a failure is logged: the next search indexes from the log."""
        if self.recall is None:
            return
        try:
            self.recall.catch_up(self.session_id, self.store)
        except Exception as exc:
            logger.warning("indexing session %r for recall failed; a search will: %r", self.session_id, exc)

    async def awrite_index(self) -> None:
        if self.recall is None:
            return
        try:
            await self.recall.acatch_up(self.session_id, self.store)
        except Exception as exc:
            logger.warning("indexing session %r for recall failed; a search will: %r", self.session_id, exc)

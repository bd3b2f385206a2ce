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
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar, cast

from .._config import MemoryConfig
from .._context.recent import window_start
from .._models import Message, Role
from .._options import check_timeout
from .._stores.base import Store
from .._tokens import TokenCounter
from .background import Backoff, Identity, model_calls, shared_pool
from .fact_state import KnownFacts, SessionFacts, edit_tries
from .facts import FactBook, FactExtractor
from .loop_tasks import LoopTasks, running_loop, time_left
from .newest import NewestMessages
from .progress import ProgressReporter
from .records import FACTS_KEY, INDEX_KEY, SUMMARY_KEY, Summary
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
class _SummaryJob:
    previous: Summary
    version: int
    messages: tuple[Message, ...]
    through_seq: int
    max_tokens: int
    newest: NewestMessages


# Appended messages kept for a job that has not run yet; past this the job reads the log.
_MAX_FRESH = 4096


@dataclasses.dataclass(frozen=True)
class _KnownSummary:
    """The summary record as this process last read or wrote it, and the newest messages."""

    version: int
    summary: Summary
    newest: NewestMessages


class DerivedState(SessionFacts):
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
        # Held while a job is handed to the pool or a loop, and while closing: once closed,
        # no job is handed over, so close() finishes or cancels every one that was.
        self._handing_over = threading.Lock()
        self._tasks = LoopTasks()
        # The stored facts record, its book's JSON and the book parsed from it.
        self._facts_cache: tuple[str, str, FactBook] | None = None
        # What this process appended and a job of each kind has not seen yet: the job
        # continues from what it knows instead of reading back what was just written.
        self._fresh: dict[str, list[Message]] = {}
        self._fresh_lock = threading.Lock()
        self._known_facts: KnownFacts | None = None
        self._known_summary: _KnownSummary | None = None

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

    def _note_fresh(self, appended: Sequence[Message]) -> None:
        """Keep `appended` (just stored by this process) for the next job of each kind."""
        with self._fresh_lock:
            for key, _, _ in self._jobs():
                # Recall follows the log by its own watermark: these only spare it reading
                # them back.
                fresh = self._fresh.setdefault(key, [])
                if not appended or len(fresh) + len(appended) > _MAX_FRESH:
                    # An edit, or too much queued: the job reads the log instead.
                    self._fresh[key] = []
                    self._forget_known(key)
                else:
                    fresh.extend(appended)

    def _take_fresh(self, key: str) -> list[Message]:
        with self._fresh_lock:
            return self._fresh.pop(key, [])

    def _forget_known(self, key: str) -> None:
        """Drop what this process knows of `key`'s record: its next job reads the store."""
        if key == FACTS_KEY:
            self._known_facts = None
        elif key == SUMMARY_KEY:
            self._known_summary = None

    def after_append(
        self, appended: Sequence[Message] = (), progress: ProgressReporter | None = None
    ) -> None:
        """Bring derived state up to date: inline, or queued when ``config.background``.

        `appended` are the messages the append stored; without them (after an edit) each
        job reads the store. `progress` hears of each job run inline as it ends. After
        `close` every job runs inline (see `close`)."""
        self._note_fresh(appended)
        for key, job, _ in self._jobs():
            if not self.backoff.ready(key):
                continue
            if not (self.config.background and self._submit(key, job)):
                self._run_inline(key, job)
                if progress is not None:
                    progress.stage(key)

    def _submit(self, kind: str, job: Callable[[], object]) -> bool:
        """Queue `job` on the process's worker pool, keyed by what it updates; False
        (nothing queued) once this memory is closed."""
        with self._handing_over:
            if self._closed:
                return False
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
        return True

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

    async def aafter_append(
        self, appended: Sequence[Message] = (), progress: ProgressReporter | None = None
    ) -> None:
        """Async `after_append`: model calls are awaited, in tasks of the running loop when
        ``config.background`` (see `LoopTasks`)."""
        self._note_fresh(appended)
        for key, _, job in self._jobs():
            if not self.backoff.ready(key):
                continue
            if not (self.config.background and self._start_task(key, job)):
                await self._arun(key, job)
                if progress is not None:
                    progress.stage(key)

    def _start_task(self, key: str, job: Callable[[], Awaitable[object]]) -> bool:
        """Run `job` in a task of the running loop; False (nothing started) once closed."""
        with self._handing_over:
            if self._closed:
                return False
            self._tasks.start(
                key, functools.partial(self._arun, key, job), functools.partial(self.backoff.ready, key)
            )
        return True

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

        That is the worker pool's jobs and the asyncio tasks of every running event loop.
        Called in a loop's own thread (sync code under a coroutine), it cannot wait for
        that loop's tasks without stopping them: it returns False while there are some.
        A job that timed out no longer counts: it was reported failed and is retried later.
        The keyword index rows the appends left for later are written too.
        """
        check_timeout(timeout)
        here = running_loop()
        done = self._wait(timeout, here) and not self._tasks.pending_in(here)
        self.save_facts_watermark()
        self.write_index()
        return done

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async `flush`: the running loop's tasks are awaited, the rest waited for in a thread."""
        check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        if not await self._tasks.wait_here(timeout):
            return False
        here = asyncio.get_running_loop()
        done = await asyncio.to_thread(self._wait, time_left(deadline), here)
        await asyncio.to_thread(self.save_facts_watermark)
        await self.awrite_index()
        return done

    def _wait(self, timeout: float | None, here: asyncio.AbstractEventLoop | None) -> bool:
        """Block until the pool's jobs and other loops' tasks have ended; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._tasks.wait_elsewhere(timeout, here) and shared_pool().flush(self, time_left(deadline))

    def close(self, timeout: float = 5.0) -> None:
        """Finish queued background work (up to `timeout`), then hand none over any more.

        Jobs and asyncio tasks not done by then are cancelled: the log keeps every turn.
        A closed memory still works, and keeps its derived state up to date: from then
        on each job runs inline, sync or async, as with ``background=False``. So a
        memory that one thread still uses while another closes it (a `SessionRegistry`
        evicting the least recently used) loses no update, only its background.
        """
        with self._handing_over:
            self._closed = True
        if not self._wait(timeout, running_loop()):
            shared_pool().cancel(self)
        self._tasks.cancel()
        self.save_facts_watermark()
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
        if self.config.background and not self._closed:
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

    def _threshold_tokens(self) -> float:
        return self.config.summary_threshold * self.config.summary_share * self.config.budget

    def _due(self, messages: Sequence[Message]) -> bool:
        if self.config.summary_trigger == "turns":
            return sum(m.role is Role.USER for m in messages) >= self.config.summary_every_turns
        if self.config.summary_trigger == "tokens":
            return sum(m.token_count or 0 for m in messages) > self._threshold_tokens()
        return False

    def _known_log(self, fresh: Sequence[Message]) -> _KnownSummary | None:
        """The summary and newest messages as this process knows them, with `fresh` added;
        None when they must be read (nothing known, or another writer appended meanwhile)."""
        known, self._known_summary = self._known_summary, None
        if known is None or not known.newest.extend(fresh):
            return None
        return known

    def _plan_summary(self, force: bool, known: _KnownSummary | None = None) -> _SummaryJob | None:
        """The summary job due now, if any. From `known` nothing is read back that this
        process read or appended: the same reads are answered from what it holds, so
        the job is the one a plan from the store would make."""
        held = known is not None
        if known is None:
            record = self.store.get_state(self.session_id, SUMMARY_KEY)
            known = _KnownSummary(
                record.version if record else 0,
                Summary.from_record(record, self.session_id),
                NewestMessages(self.store, self.session_id),
            )
        previous, newest = known.summary, known.newest
        covered = previous.covers_through_seq
        unsummarized = newest.after(covered)
        if (
            not force
            and unsummarized is not None
            and self.config.summary_trigger == "tokens"
            and sum(m.token_count or 0 for m in unsummarized) <= self._threshold_tokens()
        ):
            # Too few tokens past the watermark for the summary to be due, whatever the window.
            self._known_summary = known
            return None
        start = window_start(
            cast(Store, newest),
            self.session_id,
            self.config.keep_recent_turns,
            window_tokens=self.config.eviction_window_tokens,
        )
        if start is None or start - 1 <= covered:
            self._known_summary = known
            return None
        evicted = newest.after(covered)
        if evicted is None:
            evicted = self.store.messages(self.session_id, after_seq=covered)
            newest.hold_after(covered, evicted)
        evicted = [m for m in evicted if (m.seq or 0) < start]
        self._known_summary = known
        if not evicted or not (force or self._due(evicted)):
            return None
        if held and self.store.messages(self.session_id, after_seq=covered, through_seq=start - 1) != evicted:
            # Another memory deleted or replaced a message since this process read it: what
            # is summarised is read from the log, never from a copy that outlived an edit.
            self._known_summary = None
            return self._plan_summary(force)
        return _SummaryJob(
            previous=previous,
            version=known.version,
            messages=tuple(evicted),
            through_seq=start - 1,
            max_tokens=self.summary_max_tokens(),
            newest=newest,
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
            self._known_summary = None
        else:
            job.newest.trim(job.through_seq)
            self._known_summary = _KnownSummary(written.version, summary, job.newest)
        return written is not None

    def update_summary(self, *, force: bool = False) -> bool:
        """Fold evicted, unsummarized turns into the summary when the trigger says so.

        A commit that lost the race to another writer is planned again from the
        summary that writer stored (up to three times). While the messages this process
        appended since it last read the log continue what it read, the plan reads nothing
        back (see `_plan_summary`).
        """
        known = self._known_log(self._take_fresh(SUMMARY_KEY))
        try:
            for _ in range(3):
                job = self._plan_summary(force, known)
                known = None
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
        except BaseException:
            self._known_summary = None
            raise

    async def aupdate_summary(self, *, force: bool = False) -> bool:
        known = self._known_log(self._take_fresh(SUMMARY_KEY))
        try:
            for _ in range(3):
                job = await asyncio.to_thread(self._plan_summary, force, known)
                known = None
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
        except BaseException:
            self._known_summary = None
            raise

    # -- deleted and rewritten messages -------------------------------------------

    def before_edit(self, seqs: Sequence[int]) -> None:
        """Stop serving text of messages about to be deleted or replaced (`seqs`, all in the
        log): the summary that covers one is reset and the facts they stated are dropped
        before the log changes, so that a failure between the log's edit and `after_edit`
        (a lost connection) cannot leave their text in the summary or the facts for good."""
        self._scrub(seqs, (), bump=False)

    async def abefore_edit(self, seqs: Sequence[int]) -> None:
        """Async `before_edit`."""
        await self._ascrub(seqs, (), bump=False)

    def after_edit(self, seqs: Sequence[int], replaced: Sequence[Message] = ()) -> None:
        """Stop serving text of messages that were deleted or replaced (`seqs`), then catch up.

        The summary is reset when it covered one of them (it is rebuilt from the log as
        turns are evicted); facts stated by them are dropped, and facts of a replacement
        that the fact watermark already passed are extracted from it. Recall notices the
        log's new generation by itself. Each write is a compare-and-set, so a summary or
        facts job that read the old log loses its commit instead of writing it back.
        """
        self._scrub(seqs, replaced, bump=True)
        self.after_append()

    async def aafter_edit(self, seqs: Sequence[int], replaced: Sequence[Message] = ()) -> None:
        """Async `after_edit`: the extractor is awaited."""
        await self._ascrub(seqs, replaced, bump=True)
        await self.aafter_append()

    def _scrub(self, seqs: Sequence[int], replaced: Sequence[Message], *, bump: bool) -> None:
        """The summary and facts without the text of `seqs`, and facts read from `replaced`;
        with `bump`, both records written even when unchanged (see `_reset_summary`)."""
        self._forget_known(FACTS_KEY)
        self._forget_known(SUMMARY_KEY)
        self._reset_summary(seqs, bump=bump)
        self._edit_facts(seqs, replaced, bump=bump)

    async def _ascrub(self, seqs: Sequence[int], replaced: Sequence[Message], *, bump: bool) -> None:
        """Async `_scrub`: the extractor is awaited."""
        self._forget_known(FACTS_KEY)
        self._forget_known(SUMMARY_KEY)
        await asyncio.to_thread(functools.partial(self._reset_summary, seqs, bump=bump))
        await self._aedit_facts(seqs, replaced, bump=bump)

    def _reset_summary(self, seqs: Sequence[int], *, bump: bool = False) -> None:
        """Reset the summary when it covers one of `seqs`. With `bump` the record is written
        even when it does not (made when there is none): a summary job that read the log
        before the edit then loses its compare-and-set instead of writing that text back."""
        absent = False
        for _ in range(edit_tries(bump)):
            record = self.store.get_state(self.session_id, SUMMARY_KEY)
            summary = Summary.from_record(record, self.session_id)
            covered = record is not None and bool(seqs) and min(seqs) <= summary.covers_through_seq
            if not (covered or bump) or (record is None and absent):
                return  # nothing to reset, or the session is gone: nothing to write back
            # An empty summary covering nothing: rebuilt from the log, which no longer holds the text.
            # requires_seq=0: a session deleted meanwhile gets no state record back.
            if self.store.put_state(
                self.session_id,
                SUMMARY_KEY,
                record.value if record is not None and not covered else Summary().to_json(),
                expected_version=0 if record is None else record.version,
                requires_seq=0,
            ):
                return
            absent = record is None
        raise self._too_many_writers("summary")

    # -- vectors ------------------------------------------------------------------

    def update_index(self) -> None:
        """Index whatever the recall index has not seen yet (it tracks its own watermark)."""
        if self.recall is not None:
            appended = self._take_fresh(INDEX_KEY)
            self.recall.catch_up(self.session_id, self.store, batched=True, appended=appended)

    async def aupdate_index(self) -> None:
        if self.recall is not None:
            appended = self._take_fresh(INDEX_KEY)
            await self.recall.acatch_up(self.session_id, self.store, batched=True, appended=appended)

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

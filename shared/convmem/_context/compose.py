"""A build over one session: the steps of `build_context` in one place.

Given the session's stats, summary and facts record (read together, after which the
facade checked the owner), a build

1. reads the window candidates (the newest turns that hold just over the budget,
   reused while the log is unchanged), the facts it shows and the user's other
   sessions;
2. asks the builder for a plan, with the summary condensed when it is over its
   share of this budget and recall given the share the query calls for;
3. searches recall outside the planned window, within the room the plan left,
   and drops recalled statements a newer message replaced;
4. gives the summary its full share back when what recall found fits beside it;
5. has the builder assemble the context.

It is a flow (`convmem._sansio`): reads are `Blocking` requests and the search a
`RecallSearch`, so the same steps serve `build_context` and `abuild_context`.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, cast

from .._config import MemoryConfig
from .._derived.facts import Fact, FactBook
from .._derived.records import FACTS_KEY, SUMMARY_KEY, Summary
from .._derived.state import DerivedState
from .._derived.summarizer import ExtractiveSummarizer, Summarizer
from .._derived.user_scope import UserFacts, other_session_stats, owned_others
from .._language import detect_language
from .._models import Turn
from .._recall.intent import choose_recall_share, points_to_past
from .._recall.reading import asks_for_advice, refers_to_history, speaks_for_us, without_material
from .._recall.terms import query_terms, tokenize
from .._salience import is_filler
from .._sansio import Blocking, Flow
from .._stores.base import SessionSnapshot, SessionStats, Store
from .._stores.capabilities import ListsUserSessions, ReadsUserScope, offers, read_session
from .._tokens import TokenCounter
from .builder import ContextBuilder
from .recent import recent_turns
from .report import BuiltContext
from .request import ContextRequest

if TYPE_CHECKING:  # recall loads numpy: imported when a memory is made, not with convmem
    from .._recall.engine import Recall
    from .._recall.render import RecalledItem, RecallResult

__all__ = ["BUILD_STATE_KEYS", "ContextComposer", "RecallSearch", "build_language"]

BUILD_STATE_KEYS = (SUMMARY_KEY, FACTS_KEY)
"""The state records a build reads with the session's stats."""
_SUMMARY_ONLY = (SUMMARY_KEY,)

_CONDENSED_KEPT = 8
"""Condensed summaries a session keeps: one per room a query's recall share leaves."""
_CONDENSE_STEP = 32
"""Tokens by which a condensed summary's room is rounded down (see `_fit_summary`)."""


@dataclasses.dataclass(frozen=True)
class RecallSearch:
    """Request: `Recall.search` (sync) or `Recall.asearch` (async) with these arguments."""

    recall: Recall
    session_id: str
    query: str
    store: Store
    exclude_seqs: Collection[int]
    max_tokens: int
    counter: TokenCounter
    other_sessions: Sequence[SessionStats]
    session_stats: SessionStats

    def arguments(self) -> dict[str, Any]:
        """The keyword arguments of the search."""
        return {
            "store": self.store,
            "exclude_seqs": self.exclude_seqs,
            "max_tokens": self.max_tokens,
            "counter": self.counter,
            "other_sessions": self.other_sessions,
            "session_stats": self.session_stats,
        }


def _first_log_seq(stats: SessionStats, turns: Sequence[Turn]) -> int | None:
    """The seq of the oldest message the log holds, as far as a build can tell.

    When the window candidates hold every message of the log, it is their first: seqs
    deleted before it are gone, not history left out. Otherwise older messages exist,
    and seq 1 stands for them (the builder only asks whether anything is older).
    """
    if not stats.message_count or not stats.last_seq:
        return None
    read = sum(len(turn.messages) for turn in turns)
    if turns and read >= stats.message_count:
        return turns[0].first_seq
    return 1


def _facts_for(query: str | None, lines: Sequence[str]) -> tuple[Sequence[str], str]:
    """The fact lines a build with `query` shows, and why some were left out.

    Facts are about the user: a query about the user or their history (first person,
    what was said before, a time gone by, a plan of "we"), a request for advice or
    ideas ("dinner ideas?"), a greeting, or no query at all, gets them all; any other request
    ("Translate 'good morning' into French.") gets only the facts that share a word
    with it, so a request that needs no memory gets none. The text such a request works
    on (what it quotes, or translates after a colon) is not what it is about: a fact that
    shares a word with "good morning" stays out.
    """
    if not lines or query is None or not query.strip():
        return lines, ""
    # A greeting is answered by name: the user's facts are what makes it theirs.
    if refers_to_history(query) or speaks_for_us(query) or asks_for_advice(query) or is_filler(query):
        return lines, ""
    terms = set(query_terms(without_material(query)))
    kept = [line for line in lines if terms & set(tokenize(line))]
    if len(kept) == len(lines):
        return lines, ""
    left = len(lines) - len(kept)
    return kept, f"{left} fact{'s' if left != 1 else ''} left out: the query is not about the user"


def build_language(config: MemoryConfig, turns: Sequence[Turn], query: str | None) -> str:
    """The language of a build's headers and fact lines: the configured one, or the one
    the query and the newest turns are written in."""
    if config.language != "auto":
        return config.language
    sample = " ".join([query or ""] + [m.text for t in turns[-4:] for m in t.messages])
    return detect_language(sample)


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """What a build reads after the session's snapshot."""

    turns: list[Turn]
    book: FactBook | None
    others: list[SessionStats] | None = None
    """The stats of the user's other sessions, when they were read for the facts."""


class ContextComposer:
    """Builds the contexts of one session (see the module docstring for the steps).

    Keeps what builds of a session share while the log is unchanged: the window
    candidates last read and the summary condensed for a given room.
    """

    def __init__(
        self,
        *,
        session_id: str,
        user_id: str | None,
        store: Store,
        config: MemoryConfig,
        counter: TokenCounter,
        summarizer: Summarizer,
        recall: Recall | None,
        derived: DerivedState,
        user_facts: UserFacts | None,
        keeps_facts: bool,
    ) -> None:
        self.session_id = session_id
        self.user_id = user_id
        self.store = store
        self.config = config
        self.counter = counter
        self.summarizer = summarizer
        self.recall = recall
        self.derived = derived
        self.user_facts = user_facts
        self.keeps_facts = keeps_facts
        self.builder = ContextBuilder(config, counter)
        self._condensed: OrderedDict[tuple[str, int], str] = OrderedDict()
        """Condensed summaries by (summary text, room), the most recently used last."""
        self._condensed_lock = threading.Lock()
        self._last_window: tuple[tuple[object, ...], list[Turn]] | None = None
        """The turns the last build read, keyed by what the store said of the log then."""

    @property
    def state_keys(self) -> tuple[str, ...]:
        """The state records to read with the stats: the summary, and this session's
        facts when they are the ones shown."""
        return BUILD_STATE_KEYS if self.keeps_facts and self.user_facts is None else _SUMMARY_ONLY

    def read_snapshot(self) -> Blocking:
        """Request: the session's stats and `state_keys` records, in one round trip where
        the store can (the facade checks the owner on them before anything else).

        A session whose facts are its user's reads, where the store `ReadsUserScope`,
        the stats of the user's sessions and their facts with it (each build reads both),
        which would otherwise take a round trip each."""
        if self.keeps_facts and self.user_facts is not None and offers(self.store, ReadsUserScope):
            assert self.user_id is not None
            return Blocking(
                functools.partial(
                    cast(ReadsUserScope, self.store).read_user_scope,
                    self.session_id,
                    self.state_keys,
                    self.user_id,
                    FACTS_KEY,
                )
            )
        return Blocking(functools.partial(read_session, self.store, self.session_id, self.state_keys))

    def build(
        self, snapshot: SessionSnapshot, query: str | None, budget: int, include_query: bool
    ) -> Flow[object, BuiltContext]:
        """The context for `query` within `budget`, from a `snapshot` of this session."""
        stats = snapshot.stats
        inputs: _Inputs = yield Blocking(functools.partial(self._read_inputs, snapshot, budget))
        summary = Summary.from_record(snapshot.states.get(SUMMARY_KEY), self.session_id)
        asked = self._request(query, budget, include_query, inputs, stats, summary)
        request = self._fit_summary(asked)
        plan = self.builder.plan(request)
        recalled: tuple[RecalledItem, ...] = ()
        if self.recall is not None and request.query is not None and plan.recall_room > 0:
            others: list[SessionStats] = []
            if self.user_id is not None and self.config.share_recall:
                if inputs.others is not None:
                    others = inputs.others
                else:
                    others = yield Blocking(
                        functools.partial(other_session_stats, self.store, self.user_id, self.session_id)
                    )
            result: RecallResult = yield RecallSearch(
                recall=self.recall,
                session_id=self.session_id,
                query=request.query,
                store=self.store,
                exclude_seqs=plan.window_seqs,
                max_tokens=plan.recall_room,
                counter=self.counter,
                other_sessions=others,
                session_stats=stats,
            )
            recalled = self._without_stale_statements(result.items, plan.window_seqs, inputs.book)
            reason = result.reason
            if result.items and not recalled:
                reason = "nothing recalled: what matched states facts the user has replaced since"
            if reason:
                # explain() says why the history gave this query what it gave, or nothing.
                asked = dataclasses.replace(asked, recall_reason=f"{asked.recall_reason}; {reason}")
                plan = dataclasses.replace(
                    plan, request=dataclasses.replace(plan.request, recall_reason=asked.recall_reason)
                )
        if asked.summary_share is not None and self.builder.recall_cost(recalled, plan) < plan.caps["recall"]:
            # The summary yields to recall only the room recall takes: when what recall
            # found fits beside the summary at its full share, the summary keeps it.
            full = self._fit_summary(dataclasses.replace(asked, summary_share=None, summary_reason=""))
            full_plan = self.builder.plan(full)
            if self.builder.recall_cost(recalled, full_plan) <= full_plan.caps["recall"]:
                plan = full_plan
        return self.builder.assemble(plan, recalled)

    # -- reading ------------------------------------------------------------------

    def _read_inputs(self, snapshot: SessionSnapshot, budget: int) -> _Inputs:
        stats = snapshot.stats
        # The window never holds more than the budget: read the turns that hold just
        # over it (with a turn cap, at most that many turns), whatever the log's length.
        cap = self.config.keep_recent_turns
        turns = self._window_turns(stats, cap, budget if cap is None else 4 * budget)
        book: FactBook | None = None
        others: list[SessionStats] | None = None
        if self.keeps_facts and self.user_facts is not None and snapshot.user_sessions is not None:
            # Read with the snapshot (`read_snapshot`): only what the user owns, but this session.
            assert self.user_id is not None
            others = owned_others(snapshot.user_sessions, self.user_id, self.session_id)
            sessions = {self.session_id, *(found.session_id for found in others)}
            records = snapshot.user_states or {}
            book = self.user_facts.book_of(
                {session: record for session, record in records.items() if session in sessions}
            )
        elif self.keeps_facts:
            if self.user_facts is not None and offers(self.store, ListsUserSessions):
                # One read lists the user's sessions for the facts and gives recall their
                # stats, instead of a listing here and a read of the stats for recall.
                assert self.user_id is not None
                others = other_session_stats(self.store, self.user_id, self.session_id)
                book = self.user_facts.book([self.session_id, *(stats.session_id for stats in others)])
            elif self.user_facts is not None:
                book = self.user_facts.book()
            else:
                book = self.derived.facts_book_of(snapshot.states.get(FACTS_KEY))
        return _Inputs(turns, book, others)

    def _window_turns(self, stats: SessionStats, cap: int | None, max_tokens: int) -> list[Turn]:
        """`recent_turns` for a build, read again only when the log changed since the last.

        Every write a turn can show (an append, a status change, a deletion or
        replacement, a session started again) changes the log's last seq, its
        activity time or its generation, all read with `stats` before the turns:
        a write racing the read makes the next build read again, never serves an
        older log. A store that reports no activity time is read every time.
        """
        if not stats.last_seq:
            return []  # nothing was ever appended (a new chat): no read
        key = (stats.generation, stats.last_seq, stats.message_count, stats.updated_at, cap, max_tokens)
        cached = self._last_window
        if cached is not None and cached[0] == key and stats.updated_at is not None:
            return cached[1]
        turns = recent_turns(self.store, self.session_id, cap, max_tokens=max_tokens)
        self._last_window = (key, turns)
        return turns

    # -- planning -----------------------------------------------------------------

    def _request(
        self,
        query: str | None,
        budget: int,
        include_query: bool,
        inputs: _Inputs,
        stats: SessionStats,
        summary: Summary,
    ) -> ContextRequest:
        """What the builder needs from the log and the derived state, in one language."""
        language = build_language(self.config, inputs.turns, query)
        facts, facts_reason = _facts_for(
            query, inputs.book.render_lines(language) if inputs.book is not None else ()
        )
        recall_share, recall_reason = self._recall_share(query)
        summary_share, summary_reason = None, ""
        past = recall_share is not None and query is not None and points_to_past(query)
        if past and self.config.past_summary_share < self.config.summary_share:
            summary_share = self.config.past_summary_share
            summary_reason = (
                f"share {summary_share:.2f}: the query points to the past, recall brings the turns"
            )
        return ContextRequest(
            budget=budget,
            turns=inputs.turns,
            language=language,
            query=query,
            include_query=include_query,
            facts=facts,
            facts_reason=facts_reason,
            summary=summary,
            first_log_seq=_first_log_seq(stats, inputs.turns),
            log_tokens=stats.total_tokens,
            recall_share=recall_share,
            recall_reason=recall_reason,
            recall_takes_unused=past,
            summary_share=summary_share,
            summary_reason=summary_reason,
        )

    def _recall_share(self, query: str | None) -> tuple[float | None, str]:
        """Recall's share of the budget for `query` (None: nothing to recall), and why."""
        if self.recall is None:
            return None, "no recall"
        if not query or not query.strip():
            return None, "no query"
        return choose_recall_share(query, base_share=self.config.recall_share, config=self.recall.config)

    def _fit_summary(self, request: ContextRequest) -> ContextRequest:
        """The request with its summary shortened by the summarizer when it is over its
        share of this budget (the stored summary is written for the default budget)."""
        room = self.builder.summary_room(request)
        if room is None:
            return request
        # The room shrinks with each query's length: condense to a room rounded down
        # to a step, so the questions of a session share a few condensed versions.
        if room >= 2 * _CONDENSE_STEP:
            room -= room % _CONDENSE_STEP
        summary = request.summary.text.strip()
        key = (summary, room)
        with self._condensed_lock:
            text = self._condensed.get(key)
            if text is not None:
                self._condensed.move_to_end(key)
        if text is None:
            # Once per summary version and room, never per build: condensing
            # re-tokenizes every sentence of the summary.
            condense = getattr(self.summarizer, "condense", None)
            if condense is None:  # a summarizer without condense: shorten extractively
                condense = ExtractiveSummarizer(self.counter).condense
            text = str(condense(summary, room))
            with self._condensed_lock:
                self._condensed[key] = text
                while len(self._condensed) > _CONDENSED_KEPT:
                    self._condensed.popitem(last=False)
        return dataclasses.replace(request, summary=dataclasses.replace(request.summary, text=text))

    # -- recall -------------------------------------------------------------------

    def _without_stale_statements(
        self, items: tuple[RecalledItem, ...], window_seqs: frozenset[int], book: FactBook | None
    ) -> tuple[RecalledItem, ...]:
        """The items less those stating a fact a newer message replaced ("I live in
        Hangzhou" after "I moved to Beijing", in this session or, sharing the user's
        facts, in another) when neither the window nor another item holds the newer
        statement: recalled alone, the old one reads as still true."""
        replaced_by = self._replaced_statements(book) if items and book is not None else {}
        if not replaced_by:
            return items
        present: set[tuple[str | None, int]] = {(None, seq) for seq in window_seqs}
        present.update((item.session_id, seq) for item in items for seq in item.seqs)
        return tuple(
            item
            for item in items
            if all(
                replaced_by[(item.session_id, seq)] & present
                for seq in item.seqs
                if (item.session_id, seq) in replaced_by
            )
        )

    def _replaced_statements(
        self, book: FactBook
    ) -> dict[tuple[str | None, int], set[tuple[str | None, int]]]:
        """(session, seq) of each message whose fact in `book` a newer value replaced -> the
        (session, seq) stating the current values; ``None`` is this session."""

        def said(fact: Fact) -> tuple[str | None, int] | None:
            if fact.seq is None:
                return None
            return (None if fact.session_id in (None, self.session_id) else fact.session_id, fact.seq)

        replaced_by: dict[tuple[str | None, int], set[tuple[str | None, int]]] = {}
        for current in book.current():
            newer = said(current)
            if newer is None:
                continue
            history = book.history(current.key, current.speaker)
            for older in history[:-1]:  # a key's history is in the order it was said
                where = said(older)
                if where is not None and where != newer and older.value != current.value:
                    replaced_by.setdefault(where, set()).add(newer)
        return replaced_by

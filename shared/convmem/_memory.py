"""`ConversationMemory`: the facade a user holds, one per session."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._config import MemoryConfig, TranscriptTemplate
from ._context.builder import BuiltContext, ContextBuilder, ContextPlan, ContextRequest
from ._context.recent import recent_turns
from ._context.transcript import render_transcript
from ._derived.facts import Fact, FactBook, FactExtractor
from ._derived.rule_extractor import RuleFactExtractor
from ._derived.state import FACTS_KEY, SUMMARY_KEY, DerivedState, Summary
from ._derived.summarizer import ExtractiveSummarizer, Summarizer
from ._derived.user_scope import UserFacts, other_session_stats
from ._errors import BudgetError, ConfigError, InvalidMessageError
from ._language import detect_language
from ._models import Message, Role, Turn, TurnStatus, group_turns, validate_message
from ._recall.intent import choose_recall_share, points_to_past
from ._stores.base import (
    SessionSnapshot,
    SessionStats,
    Store,
    check_owner,
    check_seq,
    read_session,
    validate_id,
    validate_seqs,
)
from ._stores.memory import InMemoryStore
from ._stores.sqlite.store import SQLiteStore
from ._tokens import REPLY_PRIMING_TOKENS, TokenCounter, default_counter
from ._tool_sequence import check_tool_results, unanswered_calls

if TYPE_CHECKING:  # recall loads numpy: imported when a memory is made, not with convmem
    from ._recall.embedder import Embedder
    from ._recall.engine import Recall, RecalledItem

__all__ = ["ConversationMemory", "OverflowStatus", "open_store"]

_CONDENSED_KEPT = 8
"""Condensed summaries a memory keeps: one per room a query's recall share leaves."""
_CONDENSE_STEP = 32
"""Tokens by which a condensed summary's room is rounded down (see `_fit_summary`)."""


# The state records a build reads with the session's stats.
_BUILD_STATE_KEYS = (SUMMARY_KEY, FACTS_KEY)
_SUMMARY_ONLY = (SUMMARY_KEY,)

DEFAULT_DB_ENV = "CONVMEM_DB"
DEFAULT_DB_PATH = "convmem.db"
_MESSAGE_FIELDS = {
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "metadata",
    "timestamp",
    "status",
    "reply_to_seq",
}

_stores_lock = threading.Lock()
_stores: weakref.WeakValueDictionary[Path, SQLiteStore] = weakref.WeakValueDictionary()


def open_store(path: str | os.PathLike[str] | None = None) -> SQLiteStore:
    """The `SQLiteStore` for `path`, shared by every memory opened on the same file.

    Without a path: ``$CONVMEM_DB``, else ``convmem.db`` in the working directory.
    """
    resolved = Path(path if path is not None else os.environ.get(DEFAULT_DB_ENV, DEFAULT_DB_PATH)).resolve()
    with _stores_lock:
        store = _stores.get(resolved)
        if store is None or store.closed:
            store = SQLiteStore(resolved)
            _stores[resolved] = store
        return store


@dataclasses.dataclass(frozen=True)
class OverflowStatus:
    """Whether a session's raw history would fit a budget as it is (see `check`)."""

    ok: bool
    total_tokens: int
    budget: int
    over_by: int
    message_count: int

    def __str__(self) -> str:
        if self.ok:
            return f"ok: {self.total_tokens} of {self.budget} tokens ({self.message_count} messages)"
        return f"overflow: {self.total_tokens} tokens, {self.over_by} over the budget of {self.budget}"


class ConversationMemory:
    """A conversation that fits a token budget.

    Messages are appended to a store (the log is the source of truth and is
    never trimmed); `build_context` assembles what a model should see now::

        memory = ConversationMemory("session-1")                   # in memory
        memory = ConversationMemory.open("session-1", path="chat.db")  # SQLite
        memory.add("user", "My dog is called Duoduo.")
        memory.add("assistant", "What a lovely name!")
        context = memory.build_context(query="What is my dog called?", budget=1024)
        context.messages    # [{"role": ..., "content": ...}, ...] within 1024 tokens
        print(context.explain())

    Turns that leave the recent window are folded into a rolling summary and
    facts about the user are extracted as they are said; both are offline by
    default (`ExtractiveSummarizer`, `RuleFactExtractor`) and any LLM can do
    either (`LLMSummarizer`, `LLMFactExtractor`). With ``config.background``
    that work runs in a worker thread (or asyncio tasks for the async
    methods), so `add` returns at once; `flush` waits for it.

    Components: a `summarizer`, `fact_extractor` or `counter` left None is
    the offline default. Recall is on by default: with neither ``recall=`` nor
    ``embedder=`` earlier turns are found by their words (``Recall()``: BM25
    over CJK-aware terms, no model; on a `SQLiteStore` the terms are kept in
    its file with FTS5); ``embedder=`` adds meaning (recall with
    default settings, vectors next to a SQLite store), and ``recall=`` takes a
    configured `Recall`, which may serve many sessions; not both. Each part
    has one switch: facts are turned off by
    ``MemoryConfig(extract_facts=False)`` (then ``fact_extractor=`` is
    refused), automatic summarizing by ``summary_trigger="never"``, recall by
    ``MemoryConfig(recall_earlier_turns=False)`` (then ``recall=`` and
    ``embedder=`` are refused).

    Every method has an async twin (``aadd``, ``abuild_context``, ...).
    """

    def __init__(
        self,
        session_id: str,
        store: Store | None = None,
        config: MemoryConfig | None = None,
        *,
        user_id: str | None = None,
        counter: TokenCounter | None = None,
        summarizer: Summarizer | None = None,
        fact_extractor: FactExtractor | None = None,
        recall: Recall | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.session_id = validate_id(session_id, "session_id")
        self.user_id = None if user_id is None else validate_id(user_id, "user_id")
        if config is not None and not isinstance(config, MemoryConfig):
            raise TypeError(f"config must be a MemoryConfig, got {type(config).__name__}")
        self.config = config or MemoryConfig()
        if fact_extractor is not None and not self.config.extract_facts:
            raise ConfigError(
                "fact_extractor was given but config.extract_facts is False; extract_facts=False "
                "switches facts off, so pass one or the other"
            )
        if recall is not None and embedder is not None:
            raise ConfigError("pass embedder= (recall with default settings) or recall=, not both")
        if not self.config.recall_earlier_turns and (recall is not None or embedder is not None):
            given = "recall" if recall is not None else "embedder"
            raise ConfigError(
                f"{given}= was given but config.recall_earlier_turns is False; "
                "recall_earlier_turns=False switches recall off, so pass one or the other"
            )
        self.store: Store = store if store is not None else InMemoryStore()
        # True once the store showed this memory's user as the session's owner: an owner
        # only changes when the session is deleted, so reads stop checking from then on.
        self._owner_seen = False
        self._check_owner()  # before anything is started for a session this user may not open
        self.counter = counter or default_counter()
        self._builder = ContextBuilder(self.config, self.counter)
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer(self.counter)
        self.fact_extractor: FactExtractor | None = (
            fact_extractor or RuleFactExtractor() if self.config.extract_facts else None
        )
        if embedder is not None or (recall is None and self.config.recall_earlier_turns):
            from ._recall.engine import Recall

            if embedder is not None:
                index_dir = (
                    Path(f"{self.store.path}.vectors") if isinstance(self.store, SQLiteStore) else None
                )
                recall = Recall(embedder, index_dir=index_dir)
            else:
                recall = Recall()  # by words: no model; on SQLite the terms go in the store's file
        self.recall: Recall | None = recall
        self._condensed: OrderedDict[tuple[str, int], str] = OrderedDict()
        """Condensed summaries by (summary text, room), the most recently used last."""
        self._condensed_lock = threading.Lock()
        self._last_window: tuple[tuple[object, ...], list[Turn]] | None = None
        """The turns the last build read, keyed by what the store said of the log then."""
        self._derived = DerivedState(
            session_id=self.session_id,
            store=self.store,
            config=self.config,
            counter=self.counter,
            summarizer=self.summarizer,
            fact_extractor=self.fact_extractor,
            recall=recall,
        )

        self._user_facts = (
            UserFacts(self.store, self.user_id, self.session_id)
            if self.user_id is not None and self.config.share_facts and self.fact_extractor is not None
            else None
        )

    def _facts_book(self, snapshot: SessionSnapshot | None = None) -> FactBook:
        """The facts this memory shows: the user's (one more read, of each of their
        sessions) or this session's, from `snapshot` when the session was just read."""
        if self._user_facts is not None:
            return self._user_facts.book()
        if snapshot is None:
            return self._derived.facts_book()
        return self._derived.facts_book_of(snapshot.states.get(FACTS_KEY))

    def _check_owner(self, stats: SessionStats | None = None) -> None:
        """Refuse (`SessionOwnerError`) to serve a session that another user owns.

        A memory with a ``user_id`` opens, reads and writes only a session that
        user owns or nobody owns yet; a memory without one is unscoped and
        reaches any session, as the store itself does.
        """
        if self.user_id is None or self._owner_seen:
            return
        stats = stats or self.store.stats(self.session_id)
        check_owner(self.session_id, stats.user_id, self.user_id)
        self._owner_seen = stats.user_id == self.user_id

    @classmethod
    def open(
        cls,
        session_id: str,
        path: str | os.PathLike[str] | None = None,
        *,
        config: MemoryConfig | None = None,
        **kwargs: Any,
    ) -> ConversationMemory:
        """A memory persisted in the SQLite file `path` (see `open_store` for the default)."""
        return cls(session_id, open_store(path), config, **kwargs)

    def __repr__(self) -> str:
        return f"ConversationMemory({self.session_id!r}, store={self.store!r})"

    # -- writing ----------------------------------------------------------------

    def _prepare(self, item: Message | Mapping[str, Any]) -> Message:
        if isinstance(item, Message):
            message = item
        elif isinstance(item, Mapping):
            unknown = sorted(set(item) - _MESSAGE_FIELDS)
            if unknown:
                raise InvalidMessageError(
                    f"unknown message fields {unknown}; allowed: {sorted(_MESSAGE_FIELDS)}"
                )
            if "role" not in item or "content" not in item:
                raise InvalidMessageError(
                    f"a message dict needs 'role' and 'content', got keys {sorted(item)}"
                )
            message = Message.create(**item)
        else:
            raise InvalidMessageError(
                f"expected a Message or a dict with 'role' and 'content', got {type(item).__name__}"
            )
        # Before counting, which is the slow part for a huge message.
        validate_message(
            message, max_chars=self.config.max_message_chars, max_bytes=self.config.max_message_bytes
        )
        return dataclasses.replace(message, seq=None, token_count=self.counter.count_message(message))

    def add_messages(self, messages: Iterable[Message | Mapping[str, Any]]) -> list[Message]:
        """Append messages atomically: either all are stored or, on an error, none.

        Accepts `Message` objects or dicts with ``role`` and ``content`` (and the
        other `Message.create` fields). Returns the stored messages with ``seq``
        and ``token_count`` set.
        """
        stored = self._append(messages)
        if stored:
            self._derived.after_append()
        return stored

    def _append(self, messages: Iterable[Message | Mapping[str, Any]]) -> list[Message]:
        if isinstance(messages, (str, bytes, Mapping, Message)):
            raise InvalidMessageError("add_messages takes a list of messages; use add() for one")
        prepared = [self._prepare(m) for m in messages]
        if not prepared:
            return []
        self._check_replies(prepared)
        self._check_tool_results(prepared)
        stored = self.store.append(self.session_id, prepared, user_id=self.user_id)
        # The store refuses another user's session, so this user owns it now.
        self._owner_seen = self.user_id is not None
        return stored

    def _check_tool_results(self, messages: Sequence[Message]) -> None:
        """Refuse a tool result that answers no call waiting for one: none earlier in
        `messages`, nor one of the newest turns' calls still unanswered in the log."""
        if not check_tool_results(messages, set()):
            return
        waiting = unanswered_calls(m for turn in self.recent_turns(2) for m in turn.messages)
        orphans = check_tool_results(messages, waiting)
        if orphans:
            call_id = messages[orphans[0]].tool_call_id
            raise InvalidMessageError(
                f"message {orphans[0]} is a tool result for call {call_id!r:.60}, but no tool call with "
                f"that id is waiting for a result in session {self.session_id!r:.80} (never made, or "
                "answered already); add the assistant message with the call first (nothing was stored)"
            )

    def _check_replies(self, messages: Sequence[Message]) -> None:
        """Refuse an answer whose ``reply_to_seq`` names no stored question of this session."""
        wanted = sorted({m.reply_to_seq for m in messages if m.reply_to_seq is not None})
        if not wanted:
            return
        questions = {m.seq for m in self.store.get(self.session_id, wanted) if m.role is Role.USER}
        missing = [seq for seq in wanted if seq not in questions]
        if missing:
            raise InvalidMessageError(
                f"reply_to_seq={missing[0]} names no user message of session {self.session_id!r:.80}; "
                "pass the seq of the stored question the answer belongs to (nothing was stored)"
            )

    def add(
        self,
        role: Role | str,
        content: Any,
        *,
        name: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        tool_call_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: float | datetime | None = None,
        status: TurnStatus | str = TurnStatus.COMPLETED,
        reply_to_seq: int | None = None,
    ) -> Message:
        """Append one message; returns it as stored. See `Message.create` for the rules.

        ``reply_to_seq`` pairs an answer with the question stored earlier under that
        seq, when other turns may have been stored in between (see `Message`)."""
        message = Message.create(
            role,
            content,
            name=name,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            metadata=metadata,
            timestamp=timestamp,
            status=status,
            reply_to_seq=reply_to_seq,
        )
        return self.add_messages([message])[0]

    def add_turn(
        self,
        user: Any,
        assistant: Any = None,
        *,
        status: TurnStatus | str = TurnStatus.COMPLETED,
        user_name: str | None = None,
        assistant_name: str | None = None,
        timestamp: float | datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Turn:
        """Append a question and its answer as one turn with `status`.

        Without an answer (``assistant=None``) the turn holds only the question,
        e.g. a RUNNING turn whose answer is being generated.
        """
        messages = _turn_messages(user, assistant, status, user_name, assistant_name, timestamp, metadata)
        return Turn(tuple(self.add_messages(messages)))

    def set_status(self, seq: int, status: TurnStatus | str) -> Message:
        """Change the status of a stored message (e.g. a RUNNING question that failed)."""
        self._check_owner()
        return self.store.set_status(self.session_id, seq, TurnStatus.parse(status))

    def delete_messages(self, seqs: Iterable[int]) -> list[Message]:
        """Delete stored messages of this session by seq, all or none; return them, oldest first.

        Nothing derived keeps serving their text: a summary that covered one of them
        is reset (rebuilt from the log), facts they stated are dropped, and recall
        (in this process or any other) drops their vectors when it sees the log's new
        generation. A seq the log does not hold raises `InvalidMessageError` and
        deletes nothing. Seqs are never reused::

            [question] = memory.delete_messages([12])
        """
        wanted = validate_seqs(list(seqs) if not isinstance(seqs, (str, bytes)) else seqs)
        self._check_owner()
        self._derived.flush()
        deleted = self.store.delete_messages(self.session_id, wanted)
        if deleted:
            self._derived.after_edit(wanted)
        return deleted

    def replace_message(self, seq: int, message: Message | Mapping[str, Any]) -> Message:
        """Put `message` in place of the stored message `seq` (e.g. to redact it); return it as stored.

        `message` is a `Message` or a dict, checked and counted as `add_messages` does.
        What was derived from the old text goes as with `delete_messages`, and facts the
        new text states are extracted::

            memory.replace_message(3, {"role": "user", "content": "My card is [removed]."})
        """
        check_seq(seq)
        prepared = self._prepare(message)
        self._check_owner()
        self._derived.flush()
        stored = self.store.replace_message(self.session_id, seq, prepared)
        self._derived.after_edit([seq], [stored])
        return stored

    def clear(self) -> None:
        """Delete this session: its log and everything derived from it."""
        self._derived.flush()
        self._check_owner()
        self.store.clear(self.session_id)
        self._owner_seen = False
        if self.recall is not None:
            self.recall.forget(self.session_id)

    # -- reading ----------------------------------------------------------------

    def messages(self) -> list[Message]:
        """Every stored message of the session, oldest first (the raw log)."""
        self._check_owner()
        return self.store.messages(self.session_id)

    def turns(self) -> list[Turn]:
        """The raw log grouped into turns."""
        return group_turns(self.messages())

    def recent_turns(self, max_turns: int | None, *, max_tokens: int | None = None) -> list[Turn]:
        """The newest `max_turns` complete turns, oldest first, read in O(window).

        Reading stops early once the turns read hold more than `max_tokens`. With
        ``max_turns=None`` (``config.keep_recent_turns`` is None by default) the
        turns are bounded by tokens only: `max_tokens`, else four times ``config.budget``.
        """
        if max_turns is None and max_tokens is None:
            max_tokens = 4 * self.config.budget
        self._check_owner()
        return recent_turns(self.store, self.session_id, max_turns, max_tokens=max_tokens)

    def tail(self, n: int) -> list[Message]:
        """The newest `n` stored messages of the session, oldest first, read in O(n)
        (``memory.tail(2)``: usually the last question and its answer)."""
        if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
            raise InvalidMessageError(f"n must be a positive int, got {n!r}")
        self._check_owner()
        return self.store.tail(self.session_id, n)

    def stats(self) -> SessionStats:
        """What the store knows about the session without reading its log, in O(1):
        ``message_count``, ``last_seq``, ``total_tokens``, ``user_id``, ``created_at``
        and ``updated_at`` (zero messages for a session never written)."""
        stats = self.store.stats(self.session_id)
        self._check_owner(stats)
        return stats

    def _language(self, turns: Sequence[Turn], query: str | None) -> str:
        if self.config.language != "auto":
            return self.config.language
        sample = " ".join([query or ""] + [m.text for t in turns[-4:] for m in t.messages])
        return detect_language(sample)

    def build_context(
        self, query: str | None = None, budget: int | None = None, *, include_query: bool = True
    ) -> BuiltContext:
        """The context to send a model now, within `budget` tokens (default: config.budget).

        Raises `BudgetError` when the budget is not a positive int or cannot hold
        the system prompt and the query.
        """
        budget = self.config.budget if budget is None else budget
        if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
            raise BudgetError(f"budget must be a positive int, got {budget!r}")
        if query is not None and not isinstance(query, str):
            raise InvalidMessageError(f"query must be a str or None, got {type(query).__name__}")
        # The session's stats, summary and its own facts: one read per build (one round
        # trip where the store can), and nothing read is used before the owner is checked.
        own_facts = self.fact_extractor is not None and self._user_facts is None
        snapshot = read_session(
            self.store, self.session_id, _BUILD_STATE_KEYS if own_facts else _SUMMARY_ONLY
        )
        stats = snapshot.stats
        self._check_owner(stats)
        book = self._facts_book(snapshot) if self.fact_extractor is not None else None
        summary = Summary.from_record(snapshot.states.get(SUMMARY_KEY), self.session_id)
        asked = self._request(query, budget, include_query, book, stats, summary)
        request = self._fit_summary(asked)
        plan = self._builder.plan(request)
        recalled = self._recalled(request, plan, book, stats)
        if (
            asked.summary_share is not None
            and self._builder.recall_cost(recalled, plan) < plan.caps["recall"]
        ):
            # The summary yields to recall only the room recall takes: when what recall
            # found fits beside the summary at its full share, the summary keeps it.
            full = self._fit_summary(dataclasses.replace(asked, summary_share=None, summary_reason=""))
            full_plan = self._builder.plan(full)
            if self._builder.recall_cost(recalled, full_plan) <= full_plan.caps["recall"]:
                plan = full_plan
        return self._builder.assemble(plan, recalled)

    def _request(
        self,
        query: str | None,
        budget: int,
        include_query: bool,
        book: FactBook | None,
        stats: SessionStats,
        summary: Summary,
    ) -> ContextRequest:
        """What the builder needs from the log (of which `stats` were just read) and the
        derived state (`book` and `summary`, read with them), in one language."""
        # The window never holds more than the budget: read the turns that hold just
        # over it (with a turn cap, at most that many turns), whatever the log's length.
        cap = self.config.keep_recent_turns
        turns = self._window_turns(stats, cap, budget if cap is None else 4 * budget)
        language = self._language(turns, query)
        facts = book.render_lines(language) if book is not None else ()
        recall_share, recall_reason = self._recall_share(query)
        summary_share, summary_reason = None, ""
        if (
            recall_share is not None
            and query is not None
            and self.config.past_summary_share < self.config.summary_share
            and points_to_past(query)
        ):
            summary_share = self.config.past_summary_share
            summary_reason = (
                f"share {summary_share:.2f}: the query points to the past, recall brings the turns"
            )
        return ContextRequest(
            budget=budget,
            turns=turns,
            language=language,
            query=query,
            include_query=include_query,
            facts=facts,
            summary=summary,
            first_log_seq=1 if stats.last_seq else None,
            log_tokens=stats.total_tokens,
            recall_share=recall_share,
            recall_reason=recall_reason,
            summary_share=summary_share,
            summary_reason=summary_reason,
        )

    def _window_turns(self, stats: SessionStats, cap: int | None, max_tokens: int) -> list[Turn]:
        """`recent_turns` for a build, read again only when the log changed since the last.

        Every write a turn can show (an append, a status change, a deletion or
        replacement, a session started again) changes the log's last seq, its
        activity time or its generation, all read with `stats` before the turns:
        a write racing the read makes the next build read again, never serves an
        older log. A store that reports no activity time is read every time.
        """
        key = (stats.generation, stats.last_seq, stats.message_count, stats.updated_at, cap, max_tokens)
        cached = self._last_window
        if cached is not None and cached[0] == key and stats.updated_at is not None:
            return cached[1]
        turns = recent_turns(self.store, self.session_id, cap, max_tokens=max_tokens)
        self._last_window = (key, turns)
        return turns

    def _fit_summary(self, request: ContextRequest) -> ContextRequest:
        """The request with its summary shortened by the summarizer when it is over its
        share of this budget (the stored summary is written for the default budget)."""
        room = self._builder.summary_room(request)
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

    def _recall_share(self, query: str | None) -> tuple[float | None, str]:
        """Recall's share of the budget for `query` (None: nothing to recall), and why."""
        if self.recall is None:
            return None, "no recall"
        if not query or not query.strip():
            return None, "no query"
        return choose_recall_share(query, base_share=self.config.recall_share, config=self.recall.config)

    def _recalled(
        self, request: ContextRequest, plan: ContextPlan, book: FactBook | None, stats: SessionStats
    ) -> tuple[RecalledItem, ...]:
        """Earlier turns relevant to the query, outside the planned window, within recall's room."""
        if self.recall is None or request.query is None or plan.recall_room <= 0:
            return ()
        result = self.recall.search(
            self.session_id,
            request.query,
            store=self.store,
            exclude_seqs=plan.window_seqs,
            max_tokens=plan.recall_room,
            counter=self.counter,
            other_sessions=self._other_sessions(),
            session_stats=stats,
        )
        return self._without_stale_statements(result.items, plan.window_seqs, book)

    def _other_sessions(self) -> list[SessionStats]:
        """The user's other sessions recall also searches (none without a user or sharing)."""
        if self.user_id is None or not self.config.share_recall:
            return []
        return other_session_stats(self.store, self.user_id, self.session_id)

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

    def render_transcript(self, view: str = "orchestration", *, max_turns: int | None = None) -> str:
        """The recent conversation as text for another prompt.

        ``view="orchestration"``: questions and COMPLETED answers (for query
        rewriting and routing); ``view="answer"``: questions only (for answer
        generation). RUNNING turns are skipped; each message is clipped to
        ``config.transcript_message_chars`` and the whole view to
        ``config.transcript_max_chars``.
        """
        turns = self.recent_turns(max_turns or self.config.transcript_turns)
        template = self.config.transcript_template or TranscriptTemplate.for_language(
            self._language(turns, None)
        )
        return render_transcript(
            turns,
            view=view,
            template=template,
            max_message_chars=self.config.transcript_message_chars,
            max_chars=self.config.transcript_max_chars,
        )

    def check(self, budget: int | None = None) -> OverflowStatus:
        """Would the raw history, sent as it is, fit `budget`? O(1): reads stored totals."""
        budget = self.config.budget if budget is None else budget
        if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
            raise BudgetError(f"budget must be a positive int, got {budget!r}")
        stats = self.stats()
        total = stats.total_tokens + (REPLY_PRIMING_TOKENS if stats.message_count else 0)
        return OverflowStatus(total <= budget, total, budget, max(0, total - budget), stats.message_count)

    # -- summary and facts ---------------------------------------------------------

    def summary(self) -> Summary:
        """The rolling summary and the seq it covers through (empty until turns are evicted)."""
        self._check_owner()
        return self._derived.summary()

    def summarize_now(self) -> bool:
        """Fold every evicted, unsummarized turn into the summary now, whatever the trigger.

        Returns True if the summary changed. Errors of the summarizer propagate here.
        """
        self._derived.flush()
        return self._derived.update_summary(force=True)

    def facts(self) -> list[Fact]:
        """Current core facts about the user, newest first.

        With a ``user_id`` (and ``config.share_facts``, the default) these are the
        facts of all the user's sessions, each with the ``session_id`` it was said in.
        """
        self._check_owner()
        return self._facts_book().current()

    def forget_fact(self, key: str) -> bool:
        """Remove the fact `key` and its history; False if there was none.

        With a ``user_id`` (and ``config.share_facts``) the fact is forgotten in every
        session of the user, so no session brings it back.
        """
        self._check_owner()
        self._derived.flush()
        if self._user_facts is not None:
            return self._user_facts.forget(key)
        return self._derived.forget_fact(key)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until background summarizing, fact extraction and indexing are done.

        Returns False if `timeout` seconds passed first.
        """
        return self._derived.flush(timeout)

    def close(self) -> None:
        """Finish background work for this memory (the store stays open for others)."""
        self._derived.close()

    # -- async twins --------------------------------------------------------------

    async def aadd_messages(self, messages: Iterable[Message | Mapping[str, Any]]) -> list[Message]:
        """Async `add_messages`; summarizer and extractor calls are awaited (in tasks with
        ``config.background``)."""
        materialized = (
            list(messages) if not isinstance(messages, (str, bytes, Mapping, Message)) else messages
        )
        stored = await asyncio.to_thread(self._append, materialized)
        if stored:
            await self._derived.aafter_append()
        return stored

    async def aadd(
        self,
        role: Role | str,
        content: Any,
        *,
        name: str | None = None,
        tool_calls: Sequence[Mapping[str, Any]] | None = None,
        tool_call_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: float | datetime | None = None,
        status: TurnStatus | str = TurnStatus.COMPLETED,
        reply_to_seq: int | None = None,
    ) -> Message:
        message = Message.create(
            role,
            content,
            name=name,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            metadata=metadata,
            timestamp=timestamp,
            status=status,
            reply_to_seq=reply_to_seq,
        )
        return (await self.aadd_messages([message]))[0]

    async def aadd_turn(
        self,
        user: Any,
        assistant: Any = None,
        *,
        status: TurnStatus | str = TurnStatus.COMPLETED,
        user_name: str | None = None,
        assistant_name: str | None = None,
        timestamp: float | datetime | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Turn:
        messages = _turn_messages(user, assistant, status, user_name, assistant_name, timestamp, metadata)
        return Turn(tuple(await self.aadd_messages(messages)))

    async def aflush(self, timeout: float | None = None) -> bool:
        return await self._derived.aflush(timeout)

    async def asummarize_now(self) -> bool:
        await self._derived.aflush()
        return await self._derived.aupdate_summary(force=True)

    async def asummary(self) -> Summary:
        return await asyncio.to_thread(self.summary)

    async def afacts(self) -> list[Fact]:
        return await asyncio.to_thread(self.facts)

    async def aforget_fact(self, key: str) -> bool:
        return await asyncio.to_thread(self.forget_fact, key)

    async def amessages(self) -> list[Message]:
        return await asyncio.to_thread(self.messages)

    async def atail(self, n: int) -> list[Message]:
        """Async `tail`."""
        return await asyncio.to_thread(self.tail, n)

    async def astats(self) -> SessionStats:
        """Async `stats`."""
        return await asyncio.to_thread(self.stats)

    async def abuild_context(
        self, query: str | None = None, budget: int | None = None, *, include_query: bool = True
    ) -> BuiltContext:
        return await asyncio.to_thread(lambda: self.build_context(query, budget, include_query=include_query))

    async def arender_transcript(self, view: str = "orchestration", *, max_turns: int | None = None) -> str:
        return await asyncio.to_thread(lambda: self.render_transcript(view, max_turns=max_turns))

    async def acheck(self, budget: int | None = None) -> OverflowStatus:
        return await asyncio.to_thread(self.check, budget)

    async def aclear(self) -> None:
        await asyncio.to_thread(self.clear)

    async def adelete_messages(self, seqs: Iterable[int]) -> list[Message]:
        """Async `delete_messages`; the extractor and summarizer are awaited."""
        wanted = validate_seqs(list(seqs) if not isinstance(seqs, (str, bytes)) else seqs)
        await self._derived.aflush()
        deleted = await asyncio.to_thread(self.store.delete_messages, self.session_id, wanted)
        if deleted:
            await self._derived.aafter_edit(wanted)
        return deleted

    async def areplace_message(self, seq: int, message: Message | Mapping[str, Any]) -> Message:
        """Async `replace_message`."""
        check_seq(seq)
        prepared = self._prepare(message)
        await self._derived.aflush()
        stored = await asyncio.to_thread(self.store.replace_message, self.session_id, seq, prepared)
        await self._derived.aafter_edit([seq], [stored])
        return stored


def _turn_messages(
    user: Any,
    assistant: Any,
    status: TurnStatus | str,
    user_name: str | None,
    assistant_name: str | None,
    timestamp: float | datetime | None,
    metadata: Mapping[str, Any] | None,
) -> list[Message]:
    parsed = TurnStatus.parse(status)
    messages = [
        Message.create("user", user, name=user_name, timestamp=timestamp, metadata=metadata, status=parsed)
    ]
    if assistant is not None or parsed is not TurnStatus.RUNNING:
        messages.append(
            Message.create(
                "assistant",
                assistant if assistant is not None else "",
                name=assistant_name,
                timestamp=timestamp,
                metadata=metadata,
                status=parsed,
            )
        )
    return messages

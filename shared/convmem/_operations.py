"""Each operation on a session written once, for `ConversationMemory`'s sync and async
methods alike: check the owner, call the store, bring derived state up to date.

An operation is a flow (`convmem._sansio`) that yields three kinds of request:

- `Blocking`: store or file I/O (sync: called; async: run in a worker thread);
- `DerivedStep`: a step of the session's `DerivedState`, which has a sync method and
  an async twin (summaries and facts may call a model: the async twin awaits it);
- `RecallSearch`: a recall search (sync: `Recall.search`; async: `Recall.asearch`).

`run_operation` and `arun_operation` are the two shells. Because both run the same
flow, a check made by one is made by the other: the owner check cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ._config import MemoryConfig, TranscriptTemplate
from ._context.compose import ContextComposer, RecallSearch, build_language
from ._context.recent import recent_turns
from ._context.report import BuiltContext
from ._context.transcript import render_transcript
from ._derived.facts import Fact, FactBook
from ._derived.progress import ProgressCallback, ProgressReporter, progress_reporter
from ._derived.records import Summary
from ._derived.state import DerivedState
from ._derived.user_scope import UserFacts
from ._errors import BudgetError, InvalidMessageError
from ._language import chat_api_message
from ._message_json import MessageJSON, checked_messages
from ._models import Message, Role, Turn, TurnStatus, check_message, is_token_count, normalized_message
from ._options import MAX_INT_OPTION, check_bool
from ._sansio import Blocking, Flow, arun, run
from ._stores.base import (
    SessionStats,
    Store,
    check_owner,
    check_seq,
    missing_seqs_error,
    validate_seqs,
)
from ._tokens import REPLY_PRIMING_TOKENS, TokenCounter
from ._tool_sequence import check_tool_results, unanswered_calls

if TYPE_CHECKING:
    from ._recall.engine import Recall

__all__ = [
    "MESSAGE_FIELDS",
    "DerivedStep",
    "OverflowStatus",
    "SessionOperations",
    "arun_operation",
    "run_operation",
]

_T = TypeVar("_T")

MESSAGE_FIELDS = frozenset(
    {
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
)
"""The keys a message given as a dict may have (the fields of `Message.create`)."""


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


@dataclasses.dataclass(frozen=True)
class DerivedStep:
    """Request: ``DerivedState.<name>(*args, **kwargs)``, or its async twin ``a<name>``."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def _perform(derived: DerivedState, request: object) -> Any:
    if isinstance(request, Blocking):
        return request.perform()
    if isinstance(request, DerivedStep):
        return getattr(derived, request.name)(*request.args, **request.kwargs)
    if isinstance(request, RecallSearch):
        return request.recall.search(request.session_id, request.query, **request.arguments())
    raise TypeError(f"an operation yielded {request!r}, which no shell performs")


async def _aperform(derived: DerivedState, request: object) -> Any:
    if isinstance(request, Blocking):
        return await request.aperform()
    if isinstance(request, DerivedStep):
        return await getattr(derived, "a" + request.name)(*request.args, **request.kwargs)
    if isinstance(request, RecallSearch):
        return await request.recall.asearch(request.session_id, request.query, **request.arguments())
    raise TypeError(f"an operation yielded {request!r}, which no shell performs")


def run_operation(operation: Flow[object, _T], derived: DerivedState) -> _T:
    """Run `operation` blocking: the sync shell."""
    return run(operation, functools.partial(_perform, derived))


async def arun_operation(operation: Flow[object, _T], derived: DerivedState) -> _T:
    """Run `operation` from async code: the async shell."""
    return await arun(operation, functools.partial(_aperform, derived))


def check_budget(budget: object) -> int:
    """`budget` if it is a positive int, else `BudgetError`."""
    if not isinstance(budget, int) or isinstance(budget, bool) or not 0 < budget <= MAX_INT_OPTION:
        raise BudgetError(f"budget must be a positive int (1 to {MAX_INT_OPTION}), got {budget!r:.60}")
    return budget


def _check_count(name: str, value: object, *, or_none: bool = False) -> None:
    """Refuse a count of messages, turns or tokens read that is not an int from 1 to
    `MAX_INT_OPTION` (or None, with `or_none`): `InvalidMessageError`, as for the other
    arguments of the reads."""
    if or_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_INT_OPTION:
        allowed = "None or a positive int" if or_none else "a positive int"
        raise InvalidMessageError(f"{name} must be {allowed} (1 to {MAX_INT_OPTION}), got {value!r:.60}")


class SessionOperations:
    """The operations of one session (see the module docstring); the facade's state."""

    def __init__(
        self,
        *,
        session_id: str,
        user_id: str | None,
        store: Store,
        config: MemoryConfig,
        counter: TokenCounter,
        derived: DerivedState,
        recall: Recall | None,
        user_facts: UserFacts | None,
        composer: ContextComposer,
    ) -> None:
        self.session_id = session_id
        self.user_id = user_id
        self.store = store
        self.config = config
        self.counter = counter
        self.derived = derived
        self.recall = recall
        self.user_facts = user_facts
        self.composer = composer

    # -- the owner --------------------------------------------------------------

    def note_owner(self, stats: SessionStats) -> None:
        """Refuse (`SessionOwnerError`) a session another user owns, as `stats` show it.

        A memory with a ``user_id`` opens, reads and writes only a session that user
        owns or nobody owns yet; a memory without one reaches any session, as the
        store itself does.
        """
        if self.user_id is not None:
            check_owner(self.session_id, stats.user_id, self.user_id)

    def check_owner_now(self) -> None:
        """`note_owner` on stats read now. Read on every call, not remembered: the session
        may be deleted (`forget_user`, expiry, another process) and started again by
        another user between two calls of a memory a server keeps."""
        if self.user_id is not None:
            self.note_owner(self.store.stats(self.session_id))

    def check_owner(self) -> Flow[object, None]:
        """The owner check as a step of an operation (a read, for a memory with a user)."""
        if self.user_id is not None:
            yield Blocking(self.check_owner_now)

    # -- writing ----------------------------------------------------------------

    def prepare(self, item: Message | Mapping[str, Any]) -> Message:
        """`item` as a `Message` to store: checked, and counted once."""
        return self.prepare_checked(item)[0]

    def prepare_checked(self, item: Message | Mapping[str, Any]) -> tuple[Message, MessageJSON | None]:
        """`prepare`, with the JSON the check encoded the message into (None when the
        count is not one a store would accept, so that the store refuses it)."""
        if isinstance(item, Message):
            message = item
        elif isinstance(item, Mapping):
            unknown = sorted(set(item) - MESSAGE_FIELDS)
            if unknown:
                raise InvalidMessageError(
                    f"unknown message fields {unknown}; allowed: {sorted(MESSAGE_FIELDS)}"
                )
            if "role" not in item or "content" not in item:
                raise InvalidMessageError(
                    f"a message dict needs 'role' and 'content', got keys {sorted(item)}"
                )
            # Built as `Message.create` builds it, and checked once, just below, with the limits.
            message = normalized_message(**item)
        else:
            raise InvalidMessageError(
                f"expected a Message or a dict with 'role' and 'content', got {type(item).__name__}"
            )
        # Before counting, which is the slow part for a huge message.
        checked = check_message(
            message, max_chars=self.config.max_message_chars, max_bytes=self.config.max_message_bytes
        )
        # Counted as a chat API receives it (see `chat_api_message`), so a context costs what it says.
        tokens = self.counter.count_message(chat_api_message(message))
        prepared = dataclasses.replace(message, seq=None, token_count=tokens)
        return prepared, checked if is_token_count(tokens) else None

    def add_messages(
        self, messages: Iterable[Message | Mapping[str, Any]], progress: bool | ProgressCallback | None = None
    ) -> Flow[object, list[Message]]:
        """Append messages atomically, then bring derived state up to date (once for the batch)."""
        if isinstance(messages, (str, bytes, Mapping, Message)):
            raise InvalidMessageError("add_messages takes a list of messages; use add() for one")
        if not isinstance(messages, Iterable):
            raise InvalidMessageError(
                f"add_messages takes a list of messages, got {type(messages).__name__}: {messages!r:.60}"
            )
        items = list(messages)
        reporter = progress_reporter(progress, self.session_id, len(items))
        # Checking and counting a huge message is slow: it is done with the write.
        stored: list[Message] = yield Blocking(functools.partial(self._append, items, reporter))
        if stored:
            yield DerivedStep("after_append", (stored,), {"progress": reporter})
        if reporter is not None:
            reporter.stage("done")
        return stored

    def _append(
        self, messages: list[Message | Mapping[str, Any]], reporter: ProgressReporter | None = None
    ) -> list[Message]:
        prepared = []
        checked = []
        for message in messages:
            message, json_fields = self.prepare_checked(message)
            prepared.append(message)
            if json_fields is not None:
                checked.append((message, json_fields))
            if reporter is not None:
                reporter.step("counting", len(prepared))
        if not prepared:
            return []
        self._check_replies(prepared)
        self._check_tool_results(prepared)
        # Checked and encoded above: the store neither checks nor encodes them again.
        with checked_messages(checked):
            stored = self.store.append(self.session_id, prepared, user_id=self.user_id)
        if reporter is not None:
            reporter.stage("storing")
        return stored

    def _check_tool_results(self, messages: Sequence[Message]) -> None:
        """Refuse a tool result that answers no call waiting for one: none earlier in
        `messages`, nor one of the newest turns' calls still unanswered in the log."""
        if not check_tool_results(messages, set()):
            return
        self.check_owner_now()
        newest = recent_turns(self.store, self.session_id, 2)
        waiting = unanswered_calls(m for turn in newest for m in turn.messages)
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

    def set_status(self, seq: int, status: TurnStatus | str) -> Flow[object, Message]:
        parsed = TurnStatus.parse(status)
        yield from self.check_owner()
        stored: Message = yield Blocking(
            functools.partial(self.store.set_status, self.session_id, seq, parsed)
        )
        return stored

    def delete_messages(self, seqs: Iterable[int]) -> Flow[object, list[Message]]:
        wanted = validate_seqs(
            list(seqs) if isinstance(seqs, Iterable) and not isinstance(seqs, (str, bytes, Mapping)) else seqs
        )
        yield from self.check_owner()
        yield DerivedStep("flush")
        yield Blocking(functools.partial(self._require_seqs, wanted))
        yield DerivedStep("before_edit", (wanted,))
        deleted: list[Message] = yield Blocking(
            functools.partial(self.store.delete_messages, self.session_id, wanted)
        )
        if deleted:
            yield DerivedStep("after_edit", (wanted,))
        return deleted

    def replace_message(self, seq: int, message: Message | Mapping[str, Any]) -> Flow[object, Message]:
        check_seq(seq)
        prepared = self.prepare(message)
        yield from self.check_owner()
        yield Blocking(functools.partial(self._check_replacement, seq, prepared))
        yield DerivedStep("flush")
        yield DerivedStep("before_edit", ([seq],))
        stored: Message = yield Blocking(
            functools.partial(self.store.replace_message, self.session_id, seq, prepared)
        )
        yield DerivedStep("after_edit", ([seq], [stored]))
        return stored

    def _require_seqs(self, seqs: Sequence[int]) -> None:
        """Refuse seqs the log does not hold before anything derived from it changes."""
        held = {m.seq for m in self.store.get(self.session_id, seqs)}
        missing = [seq for seq in seqs if seq not in held]
        if missing:
            raise missing_seqs_error(self.session_id, missing)

    def _check_replacement(self, seq: int, message: Message) -> None:
        """Refuse a replacement `add` would refuse in its place: an answer to no earlier
        question of the session, a tool result that answers no call waiting for it, or the
        loss of a tool call that a later result answers. A log an import left with such a
        result already is not held against the edit: only a result it newly strands is."""
        reply = message.reply_to_seq
        if reply is not None:
            if reply >= seq:
                raise InvalidMessageError(
                    f"reply_to_seq={reply} must name a user message before seq {seq}, the message "
                    "replaced (nothing was changed)"
                )
            self._check_replies([message])
        stored = self.store.get(self.session_id, [seq])
        if not stored:
            raise missing_seqs_error(self.session_id, [seq])
        if not (message.role is Role.TOOL or any(m.tool_calls for m in stored)):
            return
        log = self.store.messages(self.session_id)
        edited = [dataclasses.replace(message, seq=seq) if m.seq == seq else m for m in log]
        stranded_before = {log[i].seq for i in check_tool_results(log, set())}
        stranded = [
            edited[i] for i in check_tool_results(edited, set()) if edited[i].seq not in stranded_before
        ]
        if stranded and stranded[0].seq == seq:
            raise InvalidMessageError(
                f"the replacement of seq {seq} is a tool result for call {message.tool_call_id!r:.60}, "
                "but no earlier tool call with that id is waiting for a result (never made, or "
                "answered by another message); nothing was changed"
            )
        if stranded:
            result = stranded[0]
            raise InvalidMessageError(
                f"replacing seq {seq} drops the tool call {result.tool_call_id!r:.60} that the result at "
                f"seq {result.seq} answers; keep the call in tool_calls, or delete the result too "
                "(nothing was changed)"
            )

    def clear(self) -> Flow[object, None]:
        yield DerivedStep("flush")
        yield from self.check_owner()
        yield Blocking(functools.partial(self.store.clear, self.session_id))
        if self.recall is not None:
            yield Blocking(functools.partial(self.recall.forget, self.session_id, store=self.store))

    # -- reading ----------------------------------------------------------------

    def messages(self) -> Flow[object, list[Message]]:
        yield from self.check_owner()
        stored: list[Message] = yield Blocking(functools.partial(self.store.messages, self.session_id))
        return stored

    def recent_turns(self, max_turns: int | None, max_tokens: int | None) -> Flow[object, list[Turn]]:
        _check_count("max_turns", max_turns, or_none=True)
        _check_count("max_tokens", max_tokens, or_none=True)
        if max_turns is None and max_tokens is None:
            max_tokens = 4 * self.config.budget
        yield from self.check_owner()
        turns: list[Turn] = yield Blocking(
            functools.partial(recent_turns, self.store, self.session_id, max_turns, max_tokens=max_tokens)
        )
        return turns

    def tail(self, n: int) -> Flow[object, list[Message]]:
        _check_count("n", n)
        yield from self.check_owner()
        stored: list[Message] = yield Blocking(functools.partial(self.store.tail, self.session_id, n))
        return stored

    def stats(self) -> Flow[object, SessionStats]:
        stats: SessionStats = yield Blocking(functools.partial(self.store.stats, self.session_id))
        self.note_owner(stats)
        return stats

    def build_context(
        self, query: str | None, budget: int | None, include_query: bool
    ) -> Flow[object, BuiltContext]:
        budget = check_budget(self.config.budget if budget is None else budget)
        if query is not None and not isinstance(query, str):
            raise InvalidMessageError(f"query must be a str or None, got {type(query).__name__}")
        check_bool("include_query", include_query)
        # The session's stats, summary and its own facts: one read per build (one round
        # trip where the store can), and nothing read is used before the owner is checked.
        snapshot = yield self.composer.read_snapshot()
        self.note_owner(snapshot.stats)
        context: BuiltContext = yield from self.composer.build(snapshot, query, budget, include_query)
        return context

    def render_transcript(self, view: str, max_turns: int | None) -> Flow[object, str]:
        _check_count("max_turns", max_turns, or_none=True)
        turns = yield from self.recent_turns(max_turns or self.config.transcript_turns, None)
        template = self.config.transcript_template or TranscriptTemplate.for_language(
            build_language(self.config, turns, None)
        )
        return render_transcript(
            turns,
            view=view,
            template=template,
            max_message_chars=self.config.transcript_message_chars,
            max_chars=self.config.transcript_max_chars,
        )

    def check(self, budget: int | None) -> Flow[object, OverflowStatus]:
        budget = check_budget(self.config.budget if budget is None else budget)
        stats = yield from self.stats()
        total = stats.total_tokens + (REPLY_PRIMING_TOKENS if stats.message_count else 0)
        return OverflowStatus(total <= budget, total, budget, max(0, total - budget), stats.message_count)

    # -- summary and facts ------------------------------------------------------

    def summary(self) -> Flow[object, Summary]:
        yield from self.check_owner()
        summary: Summary = yield Blocking(self.derived.summary)
        return summary

    def summarize_now(self) -> Flow[object, bool]:
        yield from self.check_owner()
        yield DerivedStep("flush")
        changed: bool = yield DerivedStep("update_summary", kwargs={"force": True})
        return changed

    def facts_book(self) -> FactBook:
        """The facts this memory shows: the user's, or this session's (blocking reads)."""
        if self.user_facts is not None:
            return self.user_facts.book()
        return self.derived.facts_book()

    def facts(self) -> Flow[object, list[Fact]]:
        yield from self.check_owner()
        book: FactBook = yield Blocking(self.facts_book)
        return book.current()

    def forget_fact(self, key: str) -> Flow[object, bool]:
        if not isinstance(key, str):
            raise InvalidMessageError(
                f"key must be a fact's key (a str), got {type(key).__name__}: {key!r:.60}"
            )
        yield from self.check_owner()
        yield DerivedStep("flush")
        forget = self.user_facts.forget if self.user_facts is not None else self.derived.forget_fact
        forgotten: bool = yield Blocking(functools.partial(forget, key))
        return forgotten

"""`ConversationMemory`: the facade a user holds, one per session."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import weakref
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from ._builder import BuiltContext, ContextBuilder, ContextRequest, RecallFn, RecallItem
from ._config import MemoryConfig, TranscriptTemplate
from ._derived import DerivedState, Summary
from ._embedder import Embedder
from ._errors import BudgetError, InvalidMessageError
from ._facts import Fact, FactExtractor, RuleFactExtractor
from ._inmemory_store import InMemoryStore
from ._language import detect_language
from ._models import Message, Role, Turn, TurnStatus, group_turns
from ._recall import Recall, choose_recall_share
from ._sqlite_store import SQLiteStore
from ._store import Store, validate_id
from ._summarizer import ExtractiveSummarizer, Summarizer
from ._tokens import REPLY_PRIMING_TOKENS, TokenCounter, default_counter
from ._transcript import render_transcript

__all__ = ["ConversationMemory", "OverflowStatus", "open_store"]

DEFAULT_DB_ENV = "CONVMEM_DB"
DEFAULT_DB_PATH = "convmem.db"
_MESSAGE_FIELDS = {"role", "content", "name", "tool_calls", "tool_call_id", "metadata", "timestamp", "status"}

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
        self.store: Store = store if store is not None else InMemoryStore()
        self.counter = counter or default_counter()
        self._builder = ContextBuilder(self.counter)
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer(self.counter)
        self.fact_extractor: FactExtractor | None = (
            fact_extractor or RuleFactExtractor() if self.config.extract_facts else None
        )
        if recall is None and embedder is not None:
            index_dir = Path(f"{self.store.path}.vectors") if isinstance(self.store, SQLiteStore) else None
            recall = Recall(embedder, index_dir=index_dir)
        self.recall = recall
        self._derived = DerivedState(
            session_id=self.session_id,
            store=self.store,
            config=self.config,
            counter=self.counter,
            summarizer=self.summarizer,
            fact_extractor=self.fact_extractor,
            recall=recall,
            window_start=self._window_start,
        )

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
        size = len(message.content) if isinstance(message.content, str) else len(message.text)
        if size > self.config.max_message_chars:
            raise InvalidMessageError(
                f"message is {size} characters long; the limit is max_message_chars="
                f"{self.config.max_message_chars} (raise it in MemoryConfig, or store large "
                "documents elsewhere and keep a reference)"
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
        return self.store.append(self.session_id, prepared, user_id=self.user_id)

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
    ) -> Message:
        """Append one message; returns it as stored. See `Message.create` for the rules."""
        message = Message.create(
            role,
            content,
            name=name,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            metadata=metadata,
            timestamp=timestamp,
            status=status,
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
        return self.store.set_status(self.session_id, seq, TurnStatus.parse(status))

    def clear(self) -> None:
        """Delete this session: its log and everything derived from it."""
        self._derived.flush()
        self.store.clear(self.session_id)
        if self.recall is not None:
            self.recall.forget(self.session_id)

    # -- reading ----------------------------------------------------------------

    def messages(self) -> list[Message]:
        """Every stored message of the session, oldest first (the raw log)."""
        return self.store.messages(self.session_id)

    def turns(self) -> list[Turn]:
        """The raw log grouped into turns."""
        return group_turns(self.messages())

    def recent_turns(self, max_turns: int, *, max_tokens: int | None = None) -> list[Turn]:
        """The newest `max_turns` complete turns, oldest first, read in O(window).

        Reading stops early once the turns read hold more than `max_tokens`.
        """
        if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns <= 0:
            raise InvalidMessageError(f"max_turns must be a positive int, got {max_turns!r}")
        chunk = 2 * max_turns + 2  # a turn is usually a question and an answer
        messages = self.store.tail(self.session_id, chunk)
        reached_start = len(messages) < chunk
        while messages:
            users = [i for i, m in enumerate(messages) if m.role is Role.USER]
            enough_tokens = max_tokens is not None and sum(m.token_count or 0 for m in messages) > max_tokens
            if users and (len(users) >= max_turns or enough_tokens):
                return group_turns(messages[users[-min(max_turns, len(users))] :])
            if reached_start:
                break
            chunk *= 2
            older = self.store.tail(self.session_id, chunk, before_seq=messages[0].seq)
            reached_start = len(older) < chunk
            messages = older + messages
        return group_turns(messages)[-max_turns:]

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
        turns = self.recent_turns(self.config.keep_recent_turns, max_tokens=4 * budget)
        stats = self.store.stats(self.session_id)
        language = self._language(turns, query)
        request = ContextRequest(
            budget=budget,
            turns=turns,
            keep_recent_turns=self.config.keep_recent_turns,
            language=language,
            system_prompt=self.config.system_prompt,
            query=query,
            include_query=include_query,
            first_log_seq=1 if stats.last_seq else None,
            log_tokens=stats.total_tokens,
            facts_share=self.config.facts_share,
            summary_share=self.config.summary_share,
            prune_low_information=self.config.prune_low_information,
            **self._derived_sections(query, language),
        )
        return self._builder.build(request)

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
        stats = self.store.stats(self.session_id)
        total = stats.total_tokens + (REPLY_PRIMING_TOKENS if stats.message_count else 0)
        return OverflowStatus(total <= budget, total, budget, max(0, total - budget), stats.message_count)

    # -- summary and facts ---------------------------------------------------------

    def _window_start(self) -> int | None:
        """First seq of the last `keep_recent_turns` turns: what lies before it is evicted."""
        turns = self.recent_turns(self.config.keep_recent_turns)
        return turns[0].first_seq if turns else None

    def summary(self) -> Summary:
        """The rolling summary and the seq it covers through (empty until turns are evicted)."""
        return self._derived.summary()

    def summarize_now(self) -> bool:
        """Fold every evicted, unsummarized turn into the summary now, whatever the trigger.

        Returns True if the summary changed. Errors of the summarizer propagate here.
        """
        self._derived.flush()
        return self._derived.update_summary(force=True)

    def facts(self) -> list[Fact]:
        """Current core facts about the user, newest first."""
        return self._derived.facts_book().current()

    def forget_fact(self, key: str) -> bool:
        """Remove the fact `key` and its history; False if there was none."""
        self._derived.flush()
        return self._derived.forget_fact(key)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until background summarizing, fact extraction and indexing are done.

        Returns False if `timeout` seconds passed first.
        """
        return self._derived.flush(timeout)

    def _derived_sections(self, query: str | None, language: str) -> dict[str, Any]:
        summary = self._derived.summary()
        facts = self._derived.facts_book().render_lines(language) if self.fact_extractor is not None else []
        recall, share, reason = self._recall_source(query)
        return {
            "facts": facts,
            "summary": summary.text or None,
            "summary_covers_through_seq": summary.covers_through_seq,
            "condense": self._condense,
            "recall": recall,
            "recall_share": share,
            "recall_share_reason": reason,
        }

    def _recall_source(self, query: str | None) -> tuple[RecallFn | None, float, str]:
        """The recall section's source for `query`, and the share of the budget it gets."""
        recall = self.recall
        if recall is None or not query or not query.strip():
            return None, self.config.recall_share, "no query" if recall is not None else "no recall"
        share, reason = choose_recall_share(query, base_share=self.config.recall_share, config=recall.config)

        def search(window_seqs: frozenset[int], max_tokens: int) -> list[RecallItem]:
            result = recall.search(
                self.session_id,
                query,
                store=self.store,
                exclude_seqs=window_seqs,
                max_tokens=max_tokens,
                counter=self.counter,
            )
            return [RecallItem(item.seqs, item.text, item.score, item.token_count) for item in result.items]

        return search, share, reason

    def _condense(self, text: str, max_tokens: int) -> str:
        condense = getattr(self.summarizer, "condense", None)
        if condense is None:
            condense = ExtractiveSummarizer(self.counter).condense
        return str(condense(text, max_tokens))

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

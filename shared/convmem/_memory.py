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

from ._builder import BuiltContext, ContextBuilder, ContextRequest, RecallFn
from ._config import MemoryConfig, TranscriptTemplate
from ._errors import BudgetError, InvalidMessageError
from ._inmemory_store import InMemoryStore
from ._language import detect_language
from ._models import Message, Role, Turn, TurnStatus, group_turns
from ._sqlite_store import SQLiteStore
from ._store import Store, validate_id
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
        if store is None or store._closed:
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
    ) -> None:
        self.session_id = validate_id(session_id, "session_id")
        self.user_id = None if user_id is None else validate_id(user_id, "user_id")
        if config is not None and not isinstance(config, MemoryConfig):
            raise TypeError(f"config must be a MemoryConfig, got {type(config).__name__}")
        self.config = config or MemoryConfig()
        self.store: Store = store if store is not None else InMemoryStore()
        self.counter = counter or default_counter()
        self._builder = ContextBuilder(self.counter)

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
        if isinstance(messages, (str, bytes, Mapping, Message)):
            raise InvalidMessageError("add_messages takes a list of messages; use add() for one")
        prepared = [self._prepare(m) for m in messages]
        if not prepared:
            return []
        stored = self.store.append(self.session_id, prepared, user_id=self.user_id)
        self._after_append(stored)
        return stored

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
        parsed = TurnStatus.parse(status)
        messages = [
            Message.create(
                "user", user, name=user_name, timestamp=timestamp, metadata=metadata, status=parsed
            )
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
        return Turn(tuple(self.add_messages(messages)))

    def set_status(self, seq: int, status: TurnStatus | str) -> Message:
        """Change the status of a stored message (e.g. a RUNNING question that failed)."""
        return self.store.set_status(self.session_id, seq, TurnStatus.parse(status))

    def clear(self) -> None:
        """Delete this session: its log and everything derived from it."""
        self.store.clear(self.session_id)

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
        request = ContextRequest(
            budget=budget,
            turns=turns,
            keep_recent_turns=self.config.keep_recent_turns,
            language=self._language(turns, query),
            system_prompt=self.config.system_prompt,
            query=query,
            include_query=include_query,
            first_log_seq=1 if stats.last_seq else None,
            log_tokens=stats.total_tokens,
            facts_share=self.config.facts_share,
            summary_share=self.config.summary_share,
            recall_share=self.config.recall_share,
            prune_low_information=self.config.prune_low_information,
            **self._derived_sections(query),
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

    # -- derived state hooks ------------------------------------------------------

    def _after_append(self, stored: Sequence[Message]) -> None:
        """Feed newly stored messages to the summarizer, fact extractor and index."""

    def _derived_sections(self, query: str | None) -> dict[str, Any]:
        recall: RecallFn | None = None
        return {"facts": (), "summary": None, "summary_covers_through_seq": 0, "recall": recall}

    def close(self) -> None:
        """Release resources held for this memory (the store stays open for others)."""

    # -- async twins --------------------------------------------------------------

    async def aadd(self, role: Role | str, content: Any, **fields: Any) -> Message:
        return await asyncio.to_thread(lambda: self.add(role, content, **fields))

    async def aadd_messages(self, messages: Iterable[Message | Mapping[str, Any]]) -> list[Message]:
        materialized = (
            list(messages) if not isinstance(messages, (str, bytes, Mapping, Message)) else messages
        )
        return await asyncio.to_thread(self.add_messages, materialized)

    async def aadd_turn(self, user: Any, assistant: Any = None, **fields: Any) -> Turn:
        return await asyncio.to_thread(lambda: self.add_turn(user, assistant, **fields))

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

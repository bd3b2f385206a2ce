"""`ConversationMemory`: the facade a user holds, one per session.

Each method is a thin shell over an operation written once in `_operations` (owner
check, store call, derived update) and run by the sync or the async driver, so a
method and its ``a``-twin always check and do the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ._config import MemoryConfig
from ._context.compose import ContextComposer
from ._context.report import BuiltContext
from ._derived.facts import Fact, FactExtractor
from ._derived.progress import ProgressCallback
from ._derived.records import Summary
from ._derived.rule_extractor import RuleFactExtractor
from ._derived.state import DerivedState
from ._derived.summarizer import ExtractiveSummarizer, Summarizer
from ._derived.user_scope import UserFacts
from ._errors import ConfigError
from ._models import Message, Role, Turn, TurnStatus, group_turns, normalized_message
from ._operations import OverflowStatus, SessionOperations, arun_operation, run_operation
from ._options import check_component
from ._sansio import Flow
from ._stores.base import SessionStats, Store, check_owner, require_sync_store, validate_id
from ._stores.capabilities import HasFileLocation, offers
from ._stores.files import open_store
from ._stores.memory import InMemoryStore
from ._tokens import TokenCounter, default_counter

if TYPE_CHECKING:  # recall loads numpy: imported when a memory is made, not with convmem
    from ._recall.embedder import Embedder
    from ._recall.engine import Recall

__all__ = ["ConversationMemory", "OverflowStatus", "open_store"]

_T = TypeVar("_T")


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
    over CJK-aware terms, no model; one per store in the process, shared by the
    store's memories, so a user's new chat searches what is already read);
    ``embedder=`` adds meaning (recall with
    default settings, vectors next to a SQLite store), and ``recall=`` takes a
    configured `Recall`, which may serve many sessions; not both. Each part
    has one switch: facts are turned off by
    ``MemoryConfig(extract_facts=False)`` (then ``fact_extractor=`` is
    refused), automatic summarizing by ``summary_trigger="never"``, recall by
    ``MemoryConfig(recall_earlier_turns=False)`` (then ``recall=`` and
    ``embedder=`` are refused). A component that is not one (a model's name, a
    plain function) is a `ConfigError` when it is given.

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
        for name, component in (
            ("counter", counter),
            ("summarizer", summarizer),
            ("fact_extractor", fact_extractor),
            ("embedder", embedder),
        ):
            if component is not None:
                check_component(name, component)
        if recall is not None:
            _check_recall(recall)
        if recall is not None and embedder is not None:
            raise ConfigError("pass embedder= (recall with default settings) or recall=, not both")
        if not self.config.recall_earlier_turns and (recall is not None or embedder is not None):
            given = "recall" if recall is not None else "embedder"
            raise ConfigError(
                f"{given}= was given but config.recall_earlier_turns is False; "
                "recall_earlier_turns=False switches recall off, so pass one or the other"
            )
        require_sync_store(store, "ConversationMemory")
        self.store: Store = store if store is not None else InMemoryStore()
        # Before anything is started for a session this user may not open.
        owner = None if self.user_id is None else self.store.stats(self.session_id).user_id
        check_owner(self.session_id, owner, self.user_id)
        self.counter = counter or default_counter()
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer(self.counter)
        self.fact_extractor: FactExtractor | None = (
            fact_extractor or RuleFactExtractor() if self.config.extract_facts else None
        )
        if embedder is not None or (recall is None and self.config.recall_earlier_turns):
            from ._recall.engine import Recall
            from ._recall.shared import shared_lexical_recall

            if embedder is not None:
                index_dir = (
                    cast(HasFileLocation, self.store).vector_index_dir()
                    if offers(self.store, HasFileLocation)
                    else None
                )
                recall = Recall(embedder, index_dir=index_dir)
            else:
                # By words, no model: one Recall per store in the process, so a user's new chat
                # finds the sessions other memories of the store already mirror, and mirrors
                # stay within one bound (max_sessions) however many memories are made.
                recall = shared_lexical_recall(self.store)
        self.recall: Recall | None = recall
        self._derived = DerivedState(
            session_id=self.session_id,
            store=self.store,
            config=self.config,
            counter=self.counter,
            summarizer=self.summarizer,
            fact_extractor=self.fact_extractor,
            recall=recall,
        )
        user_facts = (
            UserFacts(self.store, self.user_id, self.session_id)
            if self.user_id is not None and self.config.share_facts and self.fact_extractor is not None
            else None
        )
        self._operations = SessionOperations(
            session_id=self.session_id,
            user_id=self.user_id,
            store=self.store,
            config=self.config,
            counter=self.counter,
            derived=self._derived,
            recall=recall,
            user_facts=user_facts,
            composer=ContextComposer(
                session_id=self.session_id,
                user_id=self.user_id,
                store=self.store,
                config=self.config,
                counter=self.counter,
                summarizer=self.summarizer,
                recall=recall,
                derived=self._derived,
                user_facts=user_facts,
                keeps_facts=self.fact_extractor is not None,
            ),
        )

    def _run(self, operation: Flow[object, _T]) -> _T:
        return run_operation(operation, self._derived)

    async def _arun(self, operation: Flow[object, _T]) -> _T:
        return await arun_operation(operation, self._derived)

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

    def add_messages(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        progress: bool | ProgressCallback | None = None,
    ) -> list[Message]:
        """Append messages atomically: either all are stored or, on an error, none.

        Accepts `Message` objects or dicts with ``role`` and ``content`` (and the
        other `Message.create` fields). Returns the stored messages with ``seq``
        and ``token_count`` set. The summary, facts and recall's index are brought up
        to date once for the whole batch, so importing a history session by session
        costs far less than one `add` per message.

        ``progress=True`` keeps a line on stderr up to date while a large import runs;
        a callable is called with an `ImportProgress` at the same points (from the
        thread doing the work). Nothing is reported by default.

        Example::

            memory.add_messages(
                [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
                progress=lambda p: print(p.stage, p.done, p.total),
            )
        """
        return self._run(self._operations.add_messages(messages, progress))

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
        # Checked once, with the memory's limits, where the message is stored.
        message = normalized_message(
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
        return self._run(self._operations.set_status(seq, status))

    def delete_messages(self, seqs: Iterable[int]) -> list[Message]:
        """Delete stored messages of this session by seq, all or none; return them, oldest first.

        Nothing derived keeps serving their text: a summary that covered one of them
        is reset (rebuilt from the log), facts they stated are dropped, and recall
        (in this process or any other) drops their vectors when it sees the log's new
        generation. A seq the log does not hold raises `InvalidMessageError` and
        deletes nothing. Seqs are never reused::

            [question] = memory.delete_messages([12])
        """
        return self._run(self._operations.delete_messages(seqs))

    def replace_message(self, seq: int, message: Message | Mapping[str, Any]) -> Message:
        """Put `message` in place of the stored message `seq` (e.g. to redact it); return it as stored.

        `message` is a `Message` or a dict, checked and counted as `add_messages` does.
        What was derived from the old text goes as with `delete_messages`, and facts the
        new text states are extracted::

            memory.replace_message(3, {"role": "user", "content": "My card is [removed]."})
        """
        return self._run(self._operations.replace_message(seq, message))

    def clear(self) -> None:
        """Delete this session: its log and everything derived from it."""
        self._run(self._operations.clear())

    # -- reading ----------------------------------------------------------------

    def messages(self) -> list[Message]:
        """Every stored message of the session, oldest first (the raw log)."""
        return self._run(self._operations.messages())

    def turns(self) -> list[Turn]:
        """The raw log grouped into turns."""
        return group_turns(self.messages())

    def recent_turns(self, max_turns: int | None, *, max_tokens: int | None = None) -> list[Turn]:
        """The newest `max_turns` complete turns, oldest first, read in O(window).

        Reading stops early once the turns read hold more than `max_tokens`. With
        ``max_turns=None`` (``config.keep_recent_turns`` is None by default) the
        turns are bounded by tokens only: `max_tokens`, else four times ``config.budget``.
        """
        return self._run(self._operations.recent_turns(max_turns, max_tokens))

    def tail(self, n: int) -> list[Message]:
        """The newest `n` stored messages of the session, oldest first, read in O(n)
        (``memory.tail(2)``: usually the last question and its answer)."""
        return self._run(self._operations.tail(n))

    def stats(self) -> SessionStats:
        """What the store knows about the session without reading its log, in O(1):
        ``message_count``, ``last_seq``, ``total_tokens``, ``user_id``, ``created_at``
        and ``updated_at`` (zero messages for a session never written)."""
        return self._run(self._operations.stats())

    def build_context(
        self, query: str | None = None, budget: int | None = None, *, include_query: bool = True
    ) -> BuiltContext:
        """The context to send a model now, within `budget` tokens (default: config.budget).

        Raises `BudgetError` when the budget is not a positive int or cannot hold
        the system prompt and the query.
        """
        return self._run(self._operations.build_context(query, budget, include_query))

    def render_transcript(self, view: str = "orchestration", *, max_turns: int | None = None) -> str:
        """The recent conversation as text for another prompt.

        ``view="orchestration"``: questions and COMPLETED answers (for query
        rewriting and routing); ``view="answer"``: questions only (for answer
        generation). RUNNING turns are skipped; each message is clipped to
        ``config.transcript_message_chars`` and the whole view to
        ``config.transcript_max_chars``.
        """
        return self._run(self._operations.render_transcript(view, max_turns))

    def check(self, budget: int | None = None) -> OverflowStatus:
        """Would the raw history, sent as it is, fit `budget`? O(1): reads stored totals."""
        return self._run(self._operations.check(budget))

    # -- summary and facts ---------------------------------------------------------

    def summary(self) -> Summary:
        """The rolling summary and the seq it covers through (empty until turns are evicted)."""
        return self._run(self._operations.summary())

    def summarize_now(self) -> bool:
        """Fold every evicted, unsummarized turn into the summary now, whatever the trigger.

        Returns True if the summary changed. Errors of the summarizer propagate here.
        """
        return self._run(self._operations.summarize_now())

    def facts(self) -> list[Fact]:
        """Current core facts about the user, newest first.

        With a ``user_id`` (and ``config.share_facts``, the default) these are the
        facts of all the user's sessions, each with the ``session_id`` it was said in.
        """
        return self._run(self._operations.facts())

    def forget_fact(self, key: str) -> bool:
        """Remove the fact `key` and its history; False if there was none.

        With a ``user_id`` (and ``config.share_facts``) the fact is forgotten in every
        session of the user, so no session brings it back.
        """
        return self._run(self._operations.forget_fact(key))

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until background summarizing, fact extraction and indexing are done.

        Returns False if `timeout` seconds passed first.
        """
        return self._derived.flush(timeout)

    def close(self) -> None:
        """Finish background work for this memory (the store stays open for others).

        Work not done within a few seconds is cancelled; the log keeps every turn. The
        memory still works after it: summary, facts and index are then updated inline,
        as with ``background=False``, sync and async alike.
        """
        self._derived.close()

    # -- async twins: the same operations, awaited ----------------------------------

    async def aadd_messages(
        self,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        progress: bool | ProgressCallback | None = None,
    ) -> list[Message]:
        """Async `add_messages`; summarizer and extractor calls are awaited (in tasks with
        ``config.background``)."""
        return await self._arun(self._operations.add_messages(messages, progress))

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
        """Async `add`."""
        # Checked once, with the memory's limits, where the message is stored.
        message = normalized_message(
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
        """Async `add_turn`."""
        messages = _turn_messages(user, assistant, status, user_name, assistant_name, timestamp, metadata)
        return Turn(tuple(await self.aadd_messages(messages)))

    async def aset_status(self, seq: int, status: TurnStatus | str) -> Message:
        """Async `set_status`."""
        return await self._arun(self._operations.set_status(seq, status))

    async def adelete_messages(self, seqs: Iterable[int]) -> list[Message]:
        """Async `delete_messages`; the extractor and summarizer are awaited."""
        return await self._arun(self._operations.delete_messages(seqs))

    async def areplace_message(self, seq: int, message: Message | Mapping[str, Any]) -> Message:
        """Async `replace_message`."""
        return await self._arun(self._operations.replace_message(seq, message))

    async def aclear(self) -> None:
        """Async `clear`."""
        await self._arun(self._operations.clear())

    async def amessages(self) -> list[Message]:
        """Async `messages`."""
        return await self._arun(self._operations.messages())

    async def aturns(self) -> list[Turn]:
        """Async `turns`."""
        return group_turns(await self.amessages())

    async def arecent_turns(self, max_turns: int | None, *, max_tokens: int | None = None) -> list[Turn]:
        """Async `recent_turns`."""
        return await self._arun(self._operations.recent_turns(max_turns, max_tokens))

    async def atail(self, n: int) -> list[Message]:
        """Async `tail`."""
        return await self._arun(self._operations.tail(n))

    async def astats(self) -> SessionStats:
        """Async `stats`."""
        return await self._arun(self._operations.stats())

    async def abuild_context(
        self, query: str | None = None, budget: int | None = None, *, include_query: bool = True
    ) -> BuiltContext:
        """Async `build_context`: reads in a worker thread, recall's embedder awaited."""
        return await self._arun(self._operations.build_context(query, budget, include_query))

    async def arender_transcript(self, view: str = "orchestration", *, max_turns: int | None = None) -> str:
        """Async `render_transcript`."""
        return await self._arun(self._operations.render_transcript(view, max_turns))

    async def acheck(self, budget: int | None = None) -> OverflowStatus:
        """Async `check`."""
        return await self._arun(self._operations.check(budget))

    async def asummary(self) -> Summary:
        """Async `summary`."""
        return await self._arun(self._operations.summary())

    async def asummarize_now(self) -> bool:
        """Async `summarize_now`; the summarizer is awaited."""
        return await self._arun(self._operations.summarize_now())

    async def afacts(self) -> list[Fact]:
        """Async `facts`."""
        return await self._arun(self._operations.facts())

    async def aforget_fact(self, key: str) -> bool:
        """Async `forget_fact`."""
        return await self._arun(self._operations.forget_fact(key))

    async def aflush(self, timeout: float | None = None) -> bool:
        """Async `flush`."""
        return await self._derived.aflush(timeout)


def _turn_messages(
    user: Any,
    assistant: Any,
    status: TurnStatus | str,
    user_name: str | None,
    assistant_name: str | None,
    timestamp: float | datetime | None,
    metadata: Mapping[str, Any] | None,
) -> list[Message]:
    # Checked once, with the memory's limits, where they are stored.
    parsed = TurnStatus.parse(status)
    messages = [
        normalized_message(
            "user", user, name=user_name, timestamp=timestamp, metadata=metadata, status=parsed
        )
    ]
    if assistant is not None or parsed is not TurnStatus.RUNNING:
        messages.append(
            normalized_message(
                "assistant",
                assistant if assistant is not None else "",
                name=assistant_name,
                timestamp=timestamp,
                metadata=metadata,
                status=parsed,
            )
        )
    return messages


def _check_recall(recall: object) -> None:
    from ._recall.engine import Recall  # a caller that made one has imported it already

    if not isinstance(recall, Recall):
        raise ConfigError(
            "recall must be a Recall, e.g. Recall(embedder) or Recall(config=RecallConfig(...)); "
            f"got {type(recall).__name__} {recall!r:.60}"
        )

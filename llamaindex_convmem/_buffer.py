"""`ConvMemChatMemoryBuffer`: a `ChatMemoryBuffer` whose history is a convmem session."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator
from llama_index.core.llms.llm import LLM
from llama_index.core.memory.chat_memory_buffer import (
    DEFAULT_TOKEN_LIMIT,
    DEFAULT_TOKEN_LIMIT_RATIO,
    ChatMemoryBuffer,
)
from llama_index.core.memory.types import DEFAULT_CHAT_STORE_KEY
from llama_index.core.schema import QueryBundle
from llama_index.core.storage.chat_store import BaseChatStore
from pydantic import ValidationError

from convmem import (
    ApproximateCounter,
    BudgetError,
    BuiltContext,
    ConfigError,
    ConversationMemory,
    ConvMemError,
    MemoryConfig,
    SessionRegistry,
    Store,
    TiktokenCounter,
    TokenCounter,
)
from convmem.integration import REPLY_PRIMING_TOKENS, chat_api_message

from ._chat_store import ConvMemChatStore, simple_chat_store_dict
from ._messages import from_chat_message, from_chat_messages, to_chat_message, to_chat_messages
from ._sessions import (
    STORE_CUSTOM,
    coerce_memory_config,
    counter_from_name,
    llamaindex_counter,
    open_sessions,
    resolve_counter,
    session_id_for_key,
    store_kind,
)
from ._tokenizer import TokenizerFnCounter

__all__ = ["ConvMemChatMemoryBuffer"]

# The second key of `to_dict`. A workflow Context saved with workflows'
# PickleSerializer stores this buffer as JSON, yet loads every value by trying
# pickle.loads(base64.b64decode(text)) first. Lenient base64 drops the JSON
# punctuation and decodes our fixed leading text into a pickle stream whose
# opcode at byte 201 asks for a memo of 1.5 billion entries: tens of GB before
# the JSON fallback is reached. A complete "==" pad ends lenient decoding, and
# "a==" three times completes one whatever the position, so the bogus stream
# stops within its first bytes and fails at once.
_BASE64_STOP = "a==a==a=="

logger = logging.getLogger("llamaindex_convmem")


class ConvMemChatMemoryBuffer(ChatMemoryBuffer):
    """A `ChatMemoryBuffer` backed by convmem: the raw log is kept whole in a
    convmem store, and `get` returns a managed context within the token limit.

    Accepted wherever LlamaIndex takes a `ChatMemoryBuffer` or `BaseMemory`
    (chat engines, ``FunctionAgent`` / ``ReActAgent`` / ``AgentWorkflow``)::

        memory = ConvMemChatMemoryBuffer.from_defaults(
            token_limit=3000, chat_store_key="user-42", path="chat.db"
        )
        engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)

    ``get(input=None, initial_token_count=0)`` returns, within
    ``token_limit - initial_token_count`` tokens: a leading system message with
    the core facts, the rolling summary and turns recalled for `input` (when
    the memory has any), then the recent window of whole turns. A window
    never starts on an assistant or tool message and never splits a tool call
    from its results; when not even the newest question fits, that question is
    returned alone so the model reports it as too long. ``get_all()`` is the
    raw log. Tool calls and images are counted (``ChatMemoryBuffer`` counts
    them as nothing).

    ``input`` is what `ChatMemoryBuffer.get` takes: a str, a `ChatMessage`
    or a `QueryBundle` steers recall; anything else (``get(initial_tokens)``
    passes an int) is ignored, as there. Tokens are counted as there too: with
    ``tokenizer_fn``, else LlamaIndex's ``get_tokenizer()``, a message costing
    its text alone, so a history with no facts, summary or recall to add keeps
    the same messages as `ChatMemoryBuffer` (except that when not even the
    newest exchange fits, the newest question comes back alone rather than its
    answer). ``counter=TiktokenCounter()`` charges chat-API per-message
    overhead and reply priming instead. ``ConvMemChatMemoryBuffer()`` works: the limit defaults
    to 3000.

    The session is ``chat_store_key``, read on every call: one buffer can
    serve several sessions in turn, and `for_session` gives a buffer for
    another session that shares this one's store and settings. Any str is a
    key; one convmem cannot use as an id is hashed (`session_id`).
    ``chat_store`` is a `ConvMemChatStore`: a live `BaseChatStore` view of
    the same logs (``memory.chat_store.get_messages(key)``, deletes,
    ``persist``); a chat store of one's own is refused.

    Nothing secret is serialized: `to_dict` / `to_string` keep the token
    limit, session, SQLite path, `MemoryConfig` and the current session's
    history as a ``SimpleChatStore`` dict (so ``ChatMemoryBuffer.from_dict``
    reads it too); pass models and stores again to `from_dict`.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    token_limit: int = Field(
        default=DEFAULT_TOKEN_LIMIT, description="Most tokens get() returns (ChatMemoryBuffer's default)."
    )
    path: str | os.PathLike[str] | None = Field(
        default=None, description="SQLite file holding the history; None keeps it in this process."
    )
    user_id: str | None = Field(default=None, description="Owner of the session (for forgetting a user).")
    memory_config: MemoryConfig = Field(default_factory=MemoryConfig, description="convmem settings.")
    store: Any = Field(default=None, exclude=True, description="A convmem Store used instead of path.")
    counter: Any = Field(
        default=None,
        exclude=True,
        description="A convmem TokenCounter (default: tokenizer_fn, else LlamaIndex's tokenizer).",
    )
    summarizer: Any = Field(
        default=None, exclude=True, description="convmem Summarizer, or a LlamaIndex LLM to summarize with."
    )
    fact_extractor: Any = Field(
        default=None, exclude=True, description="convmem FactExtractor, or a LlamaIndex LLM to extract with."
    )
    embedder: Any = Field(
        default=None, exclude=True, description="convmem Embedder or LlamaIndex BaseEmbedding for recall."
    )
    recall: Any = Field(default=None, exclude=True, description="A configured convmem Recall (or embedder).")
    memory_kwargs: dict[str, Any] = Field(
        default_factory=dict, exclude=True, description="More ConversationMemory arguments."
    )

    _sessions: SessionRegistry = PrivateAttr()

    @classmethod
    def class_name(cls) -> str:
        return "ConvMemChatMemoryBuffer"

    # -- construction -------------------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def validate_memory(cls, values: Any) -> Any:
        # Replaces ChatMemoryBuffer's validator, which would fill in a tokenizer
        # and so hide whether the caller chose one.
        if isinstance(values, dict):
            # ChatMemoryBuffer() refuses a missing limit; a working default is kinder.
            token_limit = values.setdefault("token_limit", DEFAULT_TOKEN_LIMIT)
            if isinstance(token_limit, bool) or not isinstance(token_limit, int) or token_limit < 1:
                raise ValueError(f"Token limit must be set and greater than 0, got {token_limit!r}.")
            if values.get("tokenizer_fn", 0) is None:
                values = {k: v for k, v in values.items() if k != "tokenizer_fn"}
        return values

    @field_validator("memory_config", mode="before")
    @classmethod
    def _memory_config(cls, value: Any) -> MemoryConfig:
        return coerce_memory_config(value, MemoryConfig)

    @field_validator("path", mode="before")
    @classmethod
    def _path(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    def model_post_init(self, context: Any, /) -> None:
        if "chat_store" in self.model_fields_set:
            raise ConfigError(
                "ConvMemChatMemoryBuffer keeps its history in a convmem store, not a chat_store; "
                "pass path='chat.db' (SQLite) or store=... instead (memory.chat_store is then a live "
                "BaseChatStore view of that history)"
            )
        if "memory_config" not in self.model_fields_set:
            # The summary trigger is a share of the default budget: make it this buffer's.
            self.memory_config = self.memory_config.replace(budget=self.token_limit)
        tokenizer_fn = self.tokenizer_fn if "tokenizer_fn" in self.model_fields_set else None
        # Counted as ChatMemoryBuffer counts unless told otherwise: the same history
        # and token_limit keep the same messages.
        self._sessions = open_sessions(self, resolve_counter(self.counter, tokenizer_fn, llamaindex_counter))
        self.chat_store = ConvMemChatStore(self._sessions, self.user_id)

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        chat_history: list[ChatMessage] | None = None,
        llm: LLM | None = None,
        chat_store: BaseChatStore | None = None,
        chat_store_key: str = DEFAULT_CHAT_STORE_KEY,
        token_limit: int | None = None,
        tokenizer_fn: Callable[[str], list[Any]] | None = None,
        *,
        session_id: str | None = None,
        path: str | os.PathLike[str] | None = None,
        store: Store | None = None,
        config: MemoryConfig | None = None,
        user_id: str | None = None,
        counter: TokenCounter | None = None,
        summarizer: Any = None,
        fact_extractor: Any = None,
        embedder: Any = None,
        recall: Any = None,
        memory_kwargs: dict[str, Any] | None = None,
    ) -> ConvMemChatMemoryBuffer:
        """Create a buffer the way `ChatMemoryBuffer.from_defaults` does, plus convmem's options.

        Without `token_limit`: 75% of ``llm``'s context window, else 3000.
        `session_id` is an alias of `chat_store_key`. `path` keeps the history
        in a SQLite file (shared by every buffer on that file); `store` takes
        any convmem `Store`; neither keeps it in this process. `chat_history`
        replaces the session's history. `summarizer` and `fact_extractor` may
        be LlamaIndex LLMs. Recall is on by default, finding earlier turns by
        their words; `embedder` (a LlamaIndex `BaseEmbedding` or a convmem
        embedder) adds their meaning, its vectors next to the SQLite file;
        `recall` takes a configured convmem `Recall`, and
        ``config=MemoryConfig(recall_earlier_turns=False)`` switches recall off.
        A `tokenizer_fn` counts text the LlamaIndex way; `counter` takes a
        convmem `TokenCounter` instead.
        """
        if chat_store is not None:
            raise ConfigError(
                "ConvMemChatMemoryBuffer keeps its history in a convmem store, not a chat_store; "
                "pass path='chat.db' (SQLite) or store=... instead (memory.chat_store is then a live "
                "BaseChatStore view of that history)"
            )
        if (
            session_id is not None
            and chat_store_key != DEFAULT_CHAT_STORE_KEY
            and session_id != chat_store_key
        ):
            raise ConfigError(
                f"session_id {session_id!r} and chat_store_key {chat_store_key!r} disagree; give one of them"
            )
        if token_limit is None:
            token_limit = (
                int(llm.metadata.context_window * DEFAULT_TOKEN_LIMIT_RATIO)
                if llm is not None
                else DEFAULT_TOKEN_LIMIT
            )
        values: dict[str, Any] = {
            "token_limit": token_limit,
            "tokenizer_fn": tokenizer_fn,
            "chat_store_key": session_id if session_id is not None else chat_store_key,
            "path": path,
            "store": store,
            "user_id": user_id,
            "counter": counter,
            "summarizer": summarizer,
            "fact_extractor": fact_extractor,
            "embedder": embedder,
            "recall": recall,
            "memory_kwargs": memory_kwargs or {},
        }
        if config is not None:
            values["memory_config"] = config
        buffer = _construct(cls, values)
        if chat_history is not None:
            buffer.set(chat_history)
        return buffer

    def for_session(self, session_id: str) -> ConvMemChatMemoryBuffer:
        """A buffer for another session, sharing this one's store, settings, models and
        sessions (convmem's `SessionRegistry`: the least recently used beyond its bound are closed)."""
        session_id_for_key(session_id)  # a TypeError for a key that is not a str
        copy = self.model_copy(update={"chat_store_key": session_id})
        copy._sessions = self._sessions
        return copy

    # -- the session --------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The convmem session of ``chat_store_key``: the key itself when it is a usable
        convmem id, else its hashed form (see `session_id_for_key`)."""
        return session_id_for_key(self.chat_store_key)

    @property
    def memory(self) -> ConversationMemory:
        """The convmem `ConversationMemory` of the current session."""
        chat_store = self.chat_store
        assert isinstance(chat_store, ConvMemChatStore)  # set by model_post_init
        return chat_store.memory(self.chat_store_key)

    @property
    def token_counter(self) -> TokenCounter:
        """The convmem counter every budget of this buffer is measured with."""
        return self._sessions.counter

    # -- reading ------------------------------------------------------------------

    def _budget(self, initial_token_count: int) -> int:
        """What convmem may spend for `get`: the limit less `initial_token_count`.

        Counting with a ``tokenizer_fn``, a message costs its text alone, as in
        `ChatMemoryBuffer`, which charges nothing for priming the reply either:
        convmem's reply priming is added back so the same history keeps the
        same messages.
        """
        if isinstance(initial_token_count, bool) or not isinstance(initial_token_count, int):
            raise TypeError(f"initial_token_count must be an int, got {initial_token_count!r}")
        if initial_token_count > self.token_limit:
            raise ValueError("Initial token count exceeds token limit")
        if initial_token_count < 0:
            raise ValueError(f"initial_token_count must be >= 0, got {initial_token_count}")
        budget = self.token_limit - initial_token_count
        if budget > 0 and isinstance(self.token_counter, TokenizerFnCounter):
            budget += REPLY_PRIMING_TOKENS
        return budget

    def context(self, input: Any = None, initial_token_count: int = 0) -> BuiltContext:
        """The convmem `BuiltContext` behind `get` (see its ``explain()``).

        Raises `BudgetError` when ``token_limit - initial_token_count`` cannot
        hold the configured system prompt.
        """
        budget = self._budget(initial_token_count)
        if budget == 0:
            raise BudgetError("no tokens left: initial_token_count equals token_limit")
        return self.memory.build_context(_query(input), budget, include_query=False)

    async def acontext(self, input: Any = None, initial_token_count: int = 0) -> BuiltContext:
        budget = self._budget(initial_token_count)
        if budget == 0:
            raise BudgetError("no tokens left: initial_token_count equals token_limit")
        return await self.memory.abuild_context(_query(input), budget, include_query=False)

    def explain(self, input: Any = None, initial_token_count: int = 0) -> str:
        """Where `get` would spend its tokens, and what it leaves out and why."""
        return self.context(input, initial_token_count).explain()

    def get(self, input: Any = None, initial_token_count: int = 0, **kwargs: Any) -> list[ChatMessage]:
        """The managed context: ``[system (facts, summary, recall)] + recent window``.

        `input` (the new user message, not stored by this call) steers recall.
        Raises ``ValueError("Initial token count exceeds token limit")`` like
        `ChatMemoryBuffer`.
        """
        memory = self.memory
        budget = self._budget(initial_token_count)
        context = None
        if budget > 0:
            try:
                context = memory.build_context(_query(input), budget, include_query=False)
            except BudgetError as exc:
                logger.debug("history does not fit: %s", exc)
        if context is not None and context.window:
            return _messages(context)
        return _newest_question_alone(context, _newest_turn(memory))

    async def aget(self, input: Any = None, initial_token_count: int = 0, **kwargs: Any) -> list[ChatMessage]:
        """Async `get`."""
        memory = self.memory
        budget = self._budget(initial_token_count)
        context = None
        if budget > 0:
            try:
                context = await memory.abuild_context(_query(input), budget, include_query=False)
            except BudgetError as exc:
                logger.debug("history does not fit: %s", exc)
        if context is not None and context.window:
            return _messages(context)
        newest = await asyncio.to_thread(_newest_turn, memory)
        return _newest_question_alone(context, newest)

    def get_all(self) -> list[ChatMessage]:
        """Every stored message of the session, oldest first (the raw log)."""
        return to_chat_messages(self.memory.messages())

    async def aget_all(self) -> list[ChatMessage]:
        return to_chat_messages(await self.memory.amessages())

    def transcript(self, view: str = "orchestration") -> str:
        """The recent conversation as text: ``"orchestration"`` (questions and completed
        answers, for rewriting a question) or ``"answer"`` (questions only)."""
        return self.memory.render_transcript(view)

    async def atranscript(self, view: str = "orchestration") -> str:
        return await self.memory.arender_transcript(view)

    # -- writing ------------------------------------------------------------------

    def put(self, message: ChatMessage) -> None:
        """Append one message to the session's log."""
        self.memory.add_messages([from_chat_message(message)])

    async def aput(self, message: ChatMessage) -> None:
        await self.memory.aadd_messages([from_chat_message(message)])

    def put_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Append messages atomically: all of them or, on an invalid one, none."""
        self.memory.add_messages(from_chat_messages(messages))

    async def aput_messages(self, messages: Sequence[ChatMessage]) -> None:
        await self.memory.aadd_messages(from_chat_messages(messages))

    def set(self, messages: Sequence[ChatMessage]) -> None:
        """Replace the session's history (and everything derived from it) with `messages`."""
        converted = from_chat_messages(messages)  # validate before deleting anything
        memory = self.memory
        memory.clear()
        memory.add_messages(converted)

    async def aset(self, messages: Sequence[ChatMessage]) -> None:
        converted = from_chat_messages(messages)
        memory = self.memory
        await memory.aclear()
        await memory.aadd_messages(converted)

    def reset(self) -> None:
        """Delete the session: its log, summary, facts and vectors."""
        self.memory.clear()

    async def areset(self) -> None:
        await self.memory.aclear()

    def close(self) -> None:
        """Finish background work (summaries, facts, vectors) of every session this buffer served."""
        self._sessions.close()

    # -- serialization ------------------------------------------------------------

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """Configuration as JSON-safe data (no models, stores or secrets); see `from_dict`."""
        data: dict[str, Any] = {
            "class_name": self.class_name(),
            "base64_stop": _BASE64_STOP,
            "token_limit": self.token_limit,
            "chat_store_key": self.chat_store_key,
            "path": self.path,
            "user_id": self.user_id,
            "memory_config": self.memory_config.to_dict(),
            "counter_name": self._sessions.counter.name,
            "store_kind": store_kind(self),
            # The history in SimpleChatStore's form, so ChatMemoryBuffer.from_dict reads it too.
            "chat_store": simple_chat_store_dict({self.chat_store_key: self.get_all()}),
        }
        return data

    def to_string(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def to_json(self, **kwargs: Any) -> str:
        return self.to_string()

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> ConvMemChatMemoryBuffer:
        """A buffer from `to_dict` data; `kwargs` supply what is not serialized
        (``store=``, ``summarizer=``, ``embedder=``, ``tokenizer_fn=``, ...).

        Also reads a `ChatMemoryBuffer.to_dict()` (its ``chat_store``) and imports
        that history into an empty session.
        """
        values = {**data, **kwargs}
        values.pop("class_name", None)
        values.pop("base64_stop", None)
        history = values.pop("chat_history", None)
        chat_store = values.pop("chat_store", None)
        counter_name = values.pop("counter_name", None)
        store_kind = values.pop("store_kind", None)
        if store_kind == STORE_CUSTOM and values.get("store") is None:
            raise ConfigError(
                "this buffer was saved with a custom convmem store; pass it again: from_dict(data, store=...)"
            )
        if (
            isinstance(counter_name, str)
            and values.get("counter") is None
            and values.get("tokenizer_fn") is None
        ):
            counter = counter_from_name(counter_name)
            if counter is not None and counter.name == llamaindex_counter().name:
                counter = None  # the default: made again, never pickled with its tables
            elif counter is None:
                warnings.warn(
                    f"the buffer was saved counting with {counter_name!r}; pass tokenizer_fn= or counter= "
                    "to from_dict to count the same way (using the default counter now)",
                    RuntimeWarning,
                    stacklevel=2,
                )
            values["counter"] = counter
        if "config" in values and "memory_config" not in values:
            values["memory_config"] = values.pop("config")
        buffer = _construct(cls, values)
        messages = _saved_history(history, chat_store, buffer.chat_store_key)
        if messages and not buffer.memory.stats().message_count:
            buffer.set(messages)
        return buffer

    @classmethod
    def from_string(cls, json_str: str, **kwargs: Any) -> ConvMemChatMemoryBuffer:
        return cls.from_dict(json.loads(json_str), **kwargs)

    @classmethod
    def from_json(cls, data_str: str, **kwargs: Any) -> ConvMemChatMemoryBuffer:
        return cls.from_string(data_str, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = {"data": self.to_dict()}
        runtime = {
            "store": self.store,
            "summarizer": self.summarizer,
            "fact_extractor": self.fact_extractor,
            "embedder": self.embedder,
            "recall": self.recall,
            "memory_kwargs": self.memory_kwargs,
        }
        if "tokenizer_fn" in self.model_fields_set:
            runtime["tokenizer_fn"] = self.tokenizer_fn
        elif self.counter is not None and type(self.counter) not in (TiktokenCounter, ApproximateCounter):
            # tiktoken and approximate counters come back from "counter_name" in the data;
            # pickling a tiktoken one would add its whole BPE table (over 1 MB) to every pickle.
            runtime["counter"] = self.counter
        for key, value in runtime.items():
            if value is None:
                continue
            try:
                pickle.dumps(value)
            except Exception:
                logger.warning("not pickling %s of ConvMemChatMemoryBuffer: it cannot be pickled", key)
                continue
            state[key] = value
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        data = state["data"]
        restored = type(self).from_dict(data, **{k: v for k, v in state.items() if k != "data"})
        for attribute in (
            "__dict__",
            "__pydantic_fields_set__",
            "__pydantic_extra__",
            "__pydantic_private__",
        ):
            object.__setattr__(self, attribute, getattr(restored, attribute))


def _construct(cls: type[ConvMemChatMemoryBuffer], values: dict[str, Any]) -> ConvMemChatMemoryBuffer:
    """``cls(**values)``, raising convmem's own error rather than pydantic's wrapper of it."""
    try:
        return cls(**values)
    except ValidationError as exc:
        errors = exc.errors()
        original = errors[0].get("ctx", {}).get("error") if len(errors) == 1 else None
        if isinstance(original, ConvMemError):
            raise original from None
        raise


def _query(input: object) -> str | None:
    """The text that steers recall, from what LlamaIndex passes as `input`.

    Chat engines pass a str, a `ChatMessage` or a `QueryBundle`; the
    ``memory.get(initial_tokens)`` idiom passes an int, which `ChatMemoryBuffer`
    ignores (it never reads `input`). Anything that is not text is ignored the
    same way: it only steers recall, so ignoring it costs recall, never a reply.
    """
    if isinstance(input, str):
        return input or None
    if isinstance(input, ChatMessage):
        return input.content or None
    if isinstance(input, QueryBundle):
        return input.query_str or None
    return None


def _messages(context: BuiltContext) -> list[ChatMessage]:
    messages = (
        [ChatMessage(role=MessageRole.SYSTEM, content=context.system_text)] if context.system_text else []
    )
    memory = context.memory_message
    if memory is not None:
        # Facts, summary and recalled turns: delimited reference data, never system authority.
        messages.append(ChatMessage(role=MessageRole(memory["role"]), content=memory["content"]))
    messages.extend(to_chat_messages([chat_api_message(m) for m in context.window]))
    return messages


def _newest_turn(memory: ConversationMemory) -> list[Any]:
    return memory.recent_turns(1) if memory.stats().message_count else []


def _newest_question_alone(context: BuiltContext | None, newest: Sequence[Any]) -> list[ChatMessage]:
    """What `get` returns when not even the newest turn's question fits the budget.

    Like `ChatMemoryBuffer`, the newest message comes back alone, so the model
    raises a clear "too long" error instead of answering without the question;
    it is the newest *question*, so the list still starts on a user message.
    """
    if not newest:  # an empty session
        return _messages(context) if context is not None else []
    turn = newest[-1]
    message = turn.question or turn.messages[-1]
    return [to_chat_message(message)]


def _saved_history(history: Any, chat_store: Any, session_id: str) -> list[ChatMessage]:
    if history:
        return [m if isinstance(m, ChatMessage) else ChatMessage.model_validate(m) for m in history]
    if isinstance(chat_store, dict):
        from llama_index.core.storage.chat_store.loading import load_chat_store

        return load_chat_store(chat_store).get_messages(session_id)
    if isinstance(chat_store, BaseChatStore):
        return chat_store.get_messages(session_id)
    return []

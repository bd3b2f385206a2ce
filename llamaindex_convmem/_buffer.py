"""`ConvMemChatMemoryBuffer`: a `ChatMemoryBuffer` whose history is a convmem session."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import os
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, field_validator, model_validator
from llama_index.core.llms.llm import LLM
from llama_index.core.memory.chat_memory_buffer import (
    DEFAULT_TOKEN_LIMIT,
    DEFAULT_TOKEN_LIMIT_RATIO,
    ChatMemoryBuffer,
)
from llama_index.core.memory.types import DEFAULT_CHAT_STORE_KEY
from llama_index.core.storage.chat_store import BaseChatStore

from convmem import (
    BudgetError,
    BuiltContext,
    ConfigError,
    ConversationMemory,
    MemoryConfig,
    Message,
    SessionRegistry,
    Store,
    TokenCounter,
)
from convmem.integration import REPLY_PRIMING_TOKENS

from ._chat_store import ConvMemChatStore
from ._context import context_messages, newest_question_alone, newest_turn, query_text
from ._history import aappend_history, append_history, areplace_history, replace_history
from ._llm import check_llm
from ._messages import from_chat_messages, to_chat_messages
from ._mirror import ChatStoreMirror
from ._serialization import buffer_dict, buffer_from_dict, construct, picklable_state
from ._sessions import (
    STORE_MEMORY,
    coerce_memory_config,
    llamaindex_counter,
    open_sessions,
    resolve_counter,
    session_id_for_key,
    store_kind,
)
from ._tokenizer import TokenizerFnCounter

__all__ = ["ConvMemChatMemoryBuffer"]

logger = logging.getLogger("llamaindex_convmem")

# The key of a pickled buffer's state holding the sessions besides the current one.
_OTHER_SESSIONS = "other_sessions"


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
    ``token_limit - initial_token_count`` tokens: the configured system prompt,
    a delimited memory message with the core facts, the rolling summary and
    turns recalled for `input` (when the memory has any, or a note that
    earlier history is left out: ``note_omitted_history``), then the recent
    window of whole turns. A window never starts on an assistant or tool
    message and never splits a tool call from its results; when not even the
    newest question fits, that question is returned alone so the model reports
    it as too long. ``get_all()`` is the raw log. Tool calls and images are
    counted (``ChatMemoryBuffer`` counts them as nothing).

    ``input`` is what `ChatMemoryBuffer.get` takes: a str, a `ChatMessage`
    or a `QueryBundle` steers recall; anything else (``get(initial_tokens)``
    passes an int) is ignored, as there. Tokens are counted as there too: with
    ``tokenizer_fn``, else LlamaIndex's ``get_tokenizer()``, a message costing
    its text alone. ``counter=TiktokenCounter()`` charges chat-API per-message
    overhead and reply priming instead. ``ConvMemChatMemoryBuffer()`` works:
    the limit defaults to 3000.

    The session is ``chat_store_key``, read on every call: one buffer can
    serve several sessions in turn, and `for_session` gives a buffer for
    another session that shares this one's store and settings. Any str is a
    key; one convmem cannot use as an id is hashed (`session_id`).
    ``chat_store`` is a `ConvMemChatStore`, a live `BaseChatStore` view of the
    same logs (``memory.chat_store.get_messages(key)``, deletes, ``persist``),
    unless a chat store of one's own is given: then every write is mirrored
    into it (see `mirror`), and it is ``chat_store``.

    Nothing secret is serialized: `to_dict` / `to_string` keep the token
    limit, session, SQLite path, `MemoryConfig` and the current session's
    history as a ``SimpleChatStore`` dict (so ``ChatMemoryBuffer.from_dict``
    reads it too); pass models and stores again to `from_dict`. A
    ``copy.deepcopy`` or a pickle shares any store or file the buffer was
    given, and copies every session that lives only in this process.
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
    note_omitted_history: bool = Field(
        default=True,
        description="When earlier history is left out and the memory has nothing else to say, "
        "get() starts with a note saying so; False leaves the note out.",
    )
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
    recall: Any = Field(default=None, exclude=True, description="A configured convmem Recall.")
    memory_kwargs: dict[str, Any] = Field(
        default_factory=dict, exclude=True, description="More ConversationMemory arguments."
    )

    _sessions: SessionRegistry = PrivateAttr()
    _view: ConvMemChatStore = PrivateAttr()
    _mirror: ChatStoreMirror | None = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "ConvMemChatMemoryBuffer"

    # -- construction -------------------------------------------------------------

    @model_validator(mode="before")
    @classmethod
    def validate_memory(cls, values: Any) -> Any:
        """Check the constructor's arguments: a missing ``token_limit`` takes the default,
        one that is not an int of at least 1 is refused (pydantic's ``ValidationError``),
        and ``tokenizer_fn=None`` or ``chat_store=None`` count as not given."""
        # Replaces ChatMemoryBuffer's validator, which would fill in a tokenizer
        # and so hide whether the caller chose one.
        if isinstance(values, dict):
            # ChatMemoryBuffer() refuses a missing limit; a working default is kinder.
            token_limit = values.setdefault("token_limit", DEFAULT_TOKEN_LIMIT)
            if isinstance(token_limit, bool) or not isinstance(token_limit, int) or token_limit < 1:
                raise ValueError(f"Token limit must be set and greater than 0, got {token_limit!r}.")
            if values.get("tokenizer_fn", 0) is None:
                values = {k: v for k, v in values.items() if k != "tokenizer_fn"}
            if values.get("chat_store", 0) is None:
                values = {k: v for k, v in values.items() if k != "chat_store"}
        return values

    @field_validator("memory_config", mode="before")
    @classmethod
    def _memory_config(cls, value: Any) -> MemoryConfig:
        return coerce_memory_config(value, MemoryConfig)

    @field_validator("path", mode="before")
    @classmethod
    def _path(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @field_validator("note_omitted_history", mode="before")
    @classmethod
    def _note(cls, value: Any) -> bool:
        if not isinstance(value, bool):
            raise ConfigError(f"note_omitted_history must be True or False, got {value!r:.60}")
        return value

    def model_post_init(self, context: Any, /) -> None:
        if "memory_config" not in self.model_fields_set:
            # The summary trigger is a share of the default budget: make it this buffer's.
            self.memory_config = self.memory_config.replace(budget=self.token_limit)
        if not self.note_omitted_history and self.memory_config.note_omitted_history:
            # Without the note, and with facts, summary and recall off, the window takes
            # all the room: the same messages as ChatMemoryBuffer's.
            self.memory_config = self.memory_config.replace(note_omitted_history=False)
        tokenizer_fn = self.tokenizer_fn if "tokenizer_fn" in self.model_fields_set else None
        # Counted as ChatMemoryBuffer counts unless told otherwise: the same history
        # and token_limit keep the same messages.
        self._sessions = open_sessions(self, resolve_counter(self.counter, tokenizer_fn, llamaindex_counter))
        self._view = ConvMemChatStore(self._sessions, self.user_id)
        if "chat_store" in self.model_fields_set:
            self._use_mirror(self.chat_store)
        else:
            self.chat_store = self._view

    def _use_mirror(self, chat_store: BaseChatStore) -> None:
        """Mirror every write into `chat_store`; a session convmem holds nothing of starts
        from the history `chat_store` holds under the key."""
        self._mirror = _mirror_of(chat_store)
        self.chat_store = chat_store
        self._mirror.start(self.chat_store_key, self._session)

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
        note_omitted_history: bool = True,
        memory_kwargs: dict[str, Any] | None = None,
    ) -> ConvMemChatMemoryBuffer:
        """Create a buffer the way `ChatMemoryBuffer.from_defaults` does, plus convmem's options.

        Without `token_limit`: 75% of ``llm``'s context window, else 3000.
        `session_id` is an alias of `chat_store_key`. `path` keeps the history
        in a SQLite file (shared by every buffer on that file); `store` takes
        any convmem `Store`; neither keeps it in this process. `chat_store`, a
        `BaseChatStore` of one's own, gets a copy of every write (see
        `mirror`). `chat_history` replaces the session's history.
        `summarizer` and `fact_extractor` may be LlamaIndex LLMs. Recall is on
        by default, finding earlier turns by their words; `embedder` (a
        LlamaIndex `BaseEmbedding` or a convmem embedder) adds their meaning,
        its vectors next to the SQLite file; `recall` takes a configured
        convmem `Recall`, and ``config=MemoryConfig(recall_earlier_turns=False)``
        switches recall off. A `tokenizer_fn` counts text the LlamaIndex way;
        `counter` takes a convmem `TokenCounter` instead.
        """
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
                int(check_llm(llm).metadata.context_window * DEFAULT_TOKEN_LIMIT_RATIO)
                if llm is not None
                else DEFAULT_TOKEN_LIMIT
            )
        values: dict[str, Any] = {
            "token_limit": token_limit,
            "tokenizer_fn": tokenizer_fn,
            "chat_store": chat_store,
            "chat_store_key": session_id if session_id is not None else chat_store_key,
            "path": path,
            "store": store,
            "user_id": user_id,
            "counter": counter,
            "summarizer": summarizer,
            "fact_extractor": fact_extractor,
            "embedder": embedder,
            "recall": recall,
            "note_omitted_history": note_omitted_history,
            "memory_kwargs": memory_kwargs or {},
        }
        if config is not None:
            values["memory_config"] = config
        buffer = construct(cls, values)
        if chat_history is not None:
            buffer.set(chat_history)
        return buffer

    def for_session(self, session_id: str) -> ConvMemChatMemoryBuffer:
        """A buffer for another session, sharing this one's store, settings, models, mirror
        and sessions (convmem's `SessionRegistry`: the least recently used beyond its bound are closed)."""
        session_id_for_key(session_id)  # a TypeError for a key that is not a str
        other = self.model_copy(update={"chat_store_key": session_id})
        other._sessions = self._sessions
        other._view = self._view
        return other

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> ConvMemChatMemoryBuffer:
        """A buffer of its own with the same settings: it shares the store, file and models
        this one was given, and copies every session that lives only in this process."""
        other = self.model_copy(update={"memory_kwargs": copy.copy(self.memory_kwargs)})
        other._sessions = open_sessions(other, self.token_counter)  # its own cache of memories
        other._view = ConvMemChatStore(other._sessions, other.user_id)
        if self._mirror is None:
            other.chat_store = other._view
        other._add_sessions(self._sessions_in_process())
        if memo is not None:
            memo[id(self)] = other
        return other

    def _sessions_in_process(self) -> dict[str, list[Message]]:
        """The log of every session this buffer may read, by session id, when they live only
        in this process (a copy or a pickle must carry them); else nothing."""
        if store_kind(self) != STORE_MEMORY:
            return {}
        sessions = self._sessions
        return {
            session_id: sessions.memory(session_id, self.user_id).messages()
            for session_id in sessions.store.sessions(user_id=self.user_id)
        }

    def _add_sessions(self, logs: dict[str, list[Message]]) -> None:
        for session_id, messages in logs.items():
            if messages:
                self._sessions.memory(session_id, self.user_id).add_messages(messages)

    # -- the session --------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The convmem session of ``chat_store_key``: the key itself when it is a usable
        convmem id, else its hashed form (see `session_id_for_key`)."""
        return session_id_for_key(self.chat_store_key)

    @property
    def memory(self) -> ConversationMemory:
        """The convmem `ConversationMemory` of the current session (on its first use with
        a `mirror`, started from the mirror's history when convmem holds nothing of it)."""
        memory = self._session
        if self._mirror is not None:
            self._mirror.start(self.chat_store_key, memory)
        return memory

    async def _amemory(self) -> ConversationMemory:
        """Async `memory`."""
        memory = self._session
        if self._mirror is not None:
            await self._mirror.astart(self.chat_store_key, memory)
        return memory

    @property
    def _session(self) -> ConversationMemory:
        # The current session as convmem holds it, for what replaces it whole.
        return self._view.memory(self.chat_store_key)

    @property
    def mirror(self) -> BaseChatStore | None:
        """The `BaseChatStore` of one's own given as ``chat_store``, or None.

        It receives a copy of every write (``put``, ``put_messages``, ``set``,
        ``reset`` and their async twins) under ``chat_store_key``; convmem keeps
        the history the context is built from. A session convmem holds nothing
        of starts from the history the mirror holds under its key.
        """
        return self._mirror.store if self._mirror is not None else None

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
        return self.memory.build_context(query_text(input), budget, include_query=False)

    async def acontext(self, input: Any = None, initial_token_count: int = 0) -> BuiltContext:
        """Async `context`."""
        budget = self._budget(initial_token_count)
        if budget == 0:
            raise BudgetError("no tokens left: initial_token_count equals token_limit")
        memory = await self._amemory()
        return await memory.abuild_context(query_text(input), budget, include_query=False)

    def explain(self, input: Any = None, initial_token_count: int = 0) -> str:
        """Where `get` would spend its tokens, and what it leaves out and why."""
        return self.context(input, initial_token_count).explain()

    async def aexplain(self, input: Any = None, initial_token_count: int = 0) -> str:
        """Async `explain`."""
        return (await self.acontext(input, initial_token_count)).explain()

    def get(self, input: Any = None, initial_token_count: int = 0, **kwargs: Any) -> list[ChatMessage]:
        """The managed context: ``[system prompt] + [memory] + recent window``.

        `input` (the new user message, not stored by this call) steers recall.
        Raises ``ValueError("Initial token count exceeds token limit")`` like
        `ChatMemoryBuffer`.
        """
        memory = self.memory
        budget = self._budget(initial_token_count)
        context = None
        if budget > 0:
            try:
                context = memory.build_context(query_text(input), budget, include_query=False)
            except BudgetError as exc:
                logger.debug("history does not fit: %s", exc)
        note = self.note_omitted_history
        if context is not None and context.window:
            return context_messages(context, note_omitted_history=note)
        return newest_question_alone(context, newest_turn(memory), note_omitted_history=note)

    async def aget(self, input: Any = None, initial_token_count: int = 0, **kwargs: Any) -> list[ChatMessage]:
        """Async `get`."""
        memory = await self._amemory()
        budget = self._budget(initial_token_count)
        context = None
        if budget > 0:
            try:
                context = await memory.abuild_context(query_text(input), budget, include_query=False)
            except BudgetError as exc:
                logger.debug("history does not fit: %s", exc)
        note = self.note_omitted_history
        if context is not None and context.window:
            return context_messages(context, note_omitted_history=note)
        newest = await asyncio.to_thread(newest_turn, memory)
        return newest_question_alone(context, newest, note_omitted_history=note)

    def get_all(self) -> list[ChatMessage]:
        """Every stored message of the session, oldest first (the raw log)."""
        return to_chat_messages(self.memory.messages())

    async def aget_all(self) -> list[ChatMessage]:
        """Async `get_all`."""
        memory = await self._amemory()
        return to_chat_messages(await memory.amessages())

    def transcript(self, view: str = "orchestration") -> str:
        """The recent conversation as text: ``"orchestration"`` (questions and completed
        answers, for rewriting a question) or ``"answer"`` (questions only)."""
        return self.memory.render_transcript(view)

    async def atranscript(self, view: str = "orchestration") -> str:
        """Async `transcript`."""
        memory = await self._amemory()
        return await memory.arender_transcript(view)

    # -- writing ------------------------------------------------------------------

    def put(self, message: ChatMessage) -> None:
        """Append one message to the session's log."""
        self.put_messages([message])

    async def aput(self, message: ChatMessage) -> None:
        """Async `put`."""
        await self.aput_messages([message])

    def put_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Append messages atomically: all of them or, on an invalid one, none."""
        if self._mirror is not None:
            return self._mirror.put(self.chat_store_key, self._session, messages)
        append_history(self.memory, from_chat_messages(messages))

    async def aput_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Async `put_messages` (with a `mirror`, both writes in one worker thread, in order)."""
        if self._mirror is not None:
            return await asyncio.to_thread(self.put_messages, messages)
        await aappend_history(await self._amemory(), from_chat_messages(messages))

    def set(self, messages: Sequence[ChatMessage]) -> None:
        """Replace the session's history (and everything derived from it) with `messages`:
        all of them or, when convmem refuses one (`InvalidMessageError`), nothing changes."""
        if self._mirror is not None:
            return self._mirror.replace(self.chat_store_key, self._session, messages)
        replace_history(self._session, from_chat_messages(messages))

    async def aset(self, messages: Sequence[ChatMessage]) -> None:
        """Async `set`."""
        if self._mirror is not None:
            return await asyncio.to_thread(self.set, messages)
        await areplace_history(self._session, from_chat_messages(messages))

    def reset(self) -> None:
        """Delete the session: its log, summary, facts and vectors (and the mirror's copy)."""
        if self._mirror is not None:
            return self._mirror.clear(self.chat_store_key, self._session)
        self._session.clear()

    async def areset(self) -> None:
        """Async `reset`."""
        if self._mirror is not None:
            return await asyncio.to_thread(self.reset)
        await self._session.aclear()

    def close(self) -> None:
        """Finish background work (summaries, facts, vectors) of every session this buffer served."""
        self._sessions.close()

    async def aclose(self) -> None:
        """Async `close`."""
        await asyncio.to_thread(self._sessions.close)

    # -- serialization ------------------------------------------------------------

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """Configuration as JSON-safe data (no models, stores or secrets); see `from_dict`."""
        return buffer_dict(self)

    def to_string(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    def to_json(self, **kwargs: Any) -> str:
        """`to_dict` as JSON text (the same as `to_string`); `from_json` reads it back."""
        return self.to_string()

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> ConvMemChatMemoryBuffer:
        """A buffer from `to_dict` data; `kwargs` supply what is not serialized
        (``store=``, ``summarizer=``, ``embedder=``, ``tokenizer_fn=``, ``chat_store=``
        to mirror into, ...).

        Also reads a `ChatMemoryBuffer.to_dict()` (its ``chat_store``) and imports
        that history into an empty session.
        """
        return buffer_from_dict(cls, data, kwargs)

    @classmethod
    def from_string(cls, json_str: str, **kwargs: Any) -> ConvMemChatMemoryBuffer:
        return cls.from_dict(json.loads(json_str), **kwargs)

    @classmethod
    def from_json(cls, data_str: str, **kwargs: Any) -> ConvMemChatMemoryBuffer:
        """A buffer from `to_json` text; `kwargs` as for `from_dict`."""
        return cls.from_string(data_str, **kwargs)

    def __getstate__(self) -> dict[str, Any]:
        state = picklable_state(self)
        # The data holds the current session; the others this process alone holds come along.
        others = self._sessions_in_process()
        others.pop(self.session_id, None)
        if others:
            state[_OTHER_SESSIONS] = others
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        data = state["data"]
        kwargs = {k: v for k, v in state.items() if k not in ("data", _OTHER_SESSIONS)}
        restored = type(self).from_dict(data, **kwargs)
        restored._add_sessions(state.get(_OTHER_SESSIONS, {}))
        for attribute in (
            "__dict__",
            "__pydantic_fields_set__",
            "__pydantic_extra__",
            "__pydantic_private__",
        ):
            object.__setattr__(self, attribute, getattr(restored, attribute))


def _mirror_of(chat_store: BaseChatStore) -> ChatStoreMirror:
    if isinstance(chat_store, ConvMemChatStore):
        raise ConfigError(
            "chat_store is the ConvMemChatStore view of another buffer's logs; to serve another session "
            "of that store use buffer.for_session(key), or pass the same path=/store= here"
        )
    return ChatStoreMirror(chat_store)

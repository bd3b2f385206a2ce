"""`ConvMemMemoryBlock`: convmem's facts, summary and recall inside LlamaIndex's `Memory`."""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
from llama_index.core.memory.memory import BaseMemoryBlock

from convmem import (
    BudgetError,
    BuiltContext,
    ConfigError,
    ConversationMemory,
    MemoryConfig,
    Message,
    SessionRegistry,
    TranscriptTemplate,
)
from convmem.integration import group_turns, render_transcript

from ._history import aappend_history
from ._messages import from_chat_message
from ._sessions import (
    STORE_MEMORY,
    coerce_memory_config,
    open_sessions,
    resolve_counter,
    session_id_for_key,
    store_kind,
)

__all__ = ["ConvMemMemoryBlock"]

logger = logging.getLogger("llamaindex_convmem")

_MODEL_FIELDS = (
    "store",
    "counter",
    "tokenizer_fn",
    "summarizer",
    "fact_extractor",
    "embedder",
    "recall",
    "memory_kwargs",
)

# BaseMemoryBlock.aput tags messages with their session in additional_kwargs.
_SESSION_KWARG = "session_id"

EARLIER_TURNS = {
    "en": TranscriptTemplate("Earlier conversation (before the messages below):", "User: ", "Assistant: "),
    "zh": TranscriptTemplate("【更早的对话】", "用户：", "助手："),
}


def _block_config() -> MemoryConfig:
    # The Memory's own queue holds the recent turns; the block only bridges the
    # few flushed turns not summarized yet.
    return MemoryConfig(keep_recent_turns=2)


class ConvMemMemoryBlock(BaseMemoryBlock[str]):
    """A memory block for `llama_index.core.memory.Memory` that contributes what
    `Memory` lacks: core facts about the user, a rolling summary of the turns
    the `Memory` flushed out of its queue, turns recalled for the new input, and
    the last flushed turns not summarized yet, all within ``token_limit`` tokens::

        block = ConvMemMemoryBlock(path="chat.db", token_limit=800)
        memory = Memory.from_defaults(session_id="user-42", token_limit=4000, memory_blocks=[block])

    Messages arrive through `Memory` (the ones it flushes) tagged with its
    ``session_id``, and every read is for the ``session_id`` `Memory` passes:
    one block may serve any number of `Memory` objects and sessions, and
    nothing about one call is kept for the next, so sessions never mix.
    ``session_id`` here is only the fallback for direct calls without one.
    Any string `Memory` takes is a session: one convmem cannot use as an id
    (empty, over 256 characters, with a newline) is hashed, never shared
    (see `session_id_for_key`).
    """

    name: str = Field(default="conversation_memory", description="The name of the memory block.")
    description: str | None = Field(
        default="Known facts, a summary and recalled parts of the earlier conversation (convmem).",
        description="A description of the memory block.",
    )
    token_limit: int = Field(default=1024, gt=0, description="Most tokens the block contributes.")
    session_id: str | None = Field(default=None, description="Session for calls that pass none.")
    path: str | os.PathLike[str] | None = Field(
        default=None, description="SQLite file; None keeps sessions in this process."
    )
    user_id: str | None = None
    memory_config: MemoryConfig = Field(default_factory=_block_config, description="convmem settings.")
    store: Any = Field(default=None, exclude=True)
    counter: Any = Field(default=None, exclude=True)
    tokenizer_fn: Callable[[str], list[Any]] | None = Field(default=None, exclude=True)
    summarizer: Any = Field(default=None, exclude=True)
    fact_extractor: Any = Field(default=None, exclude=True)
    embedder: Any = Field(default=None, exclude=True)
    recall: Any = Field(default=None, exclude=True)
    memory_kwargs: dict[str, Any] = Field(default_factory=dict, exclude=True)

    # None after unpickling until the first call re-opens the sessions.
    _registry: SessionRegistry | None = PrivateAttr(default=None)
    # In-process sessions carried through pickling, restored when they re-open.
    _carried: dict[str, list[Message]] = PrivateAttr(default_factory=dict)

    @field_validator("token_limit", mode="before")
    @classmethod
    def _token_limit(cls, value: Any) -> Any:
        # pydantic would take True for 1; refused, as ConvMemChatMemoryBuffer refuses it.
        if isinstance(value, bool):
            raise ValueError(f"token_limit must be an int greater than 0, got {value!r}")
        return value

    @field_validator("memory_config", mode="before")
    @classmethod
    def _memory_config(cls, value: Any) -> MemoryConfig:
        return coerce_memory_config(value, _block_config)

    @field_validator("path", mode="before")
    @classmethod
    def _path(cls, value: Any) -> Any:
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    def model_post_init(self, context: Any, /) -> None:
        if "memory_config" not in self.model_fields_set:
            # The summary trigger is a share of the default budget: make it the block's.
            self.memory_config = self.memory_config.replace(budget=self.token_limit)
        self._registry = open_sessions(self, resolve_counter(self.counter, self.tokenizer_fn))

    @property
    def _sessions(self) -> SessionRegistry:
        if self._registry is None:
            registry = open_sessions(self, resolve_counter(self.counter, self.tokenizer_fn))
            for session_id, messages in self._carried.items():
                registry.memory(session_id, self.user_id).add_messages(messages)
            self._carried = {}
            self._registry = registry
        return self._registry

    def memory(self, session_id: str | None = None) -> ConversationMemory:
        """The convmem memory of a session (default: the block's `session_id`)."""
        return self._sessions.memory(self._session_for(session_id), self.user_id)

    def _session_for(self, session_id: str | None) -> str:
        chosen = session_id if session_id is not None else self.session_id
        if chosen is None:
            raise ConfigError(
                "ConvMemMemoryBlock needs a session: llama_index Memory passes its session_id; "
                "called directly, pass session_id=... or create the block with session_id=..."
            )
        return session_id_for_key(chosen)

    def close(self) -> None:
        """Finish background work (summaries, facts, vectors) of every session this block served."""
        if self._registry is not None:
            self._registry.close()

    async def aclose(self) -> None:
        """Async `close`."""
        await asyncio.to_thread(self.close)

    # -- pickling (llama_index Memory pickles its blocks) ------------------------

    def __getstate__(self) -> dict[str, Any]:
        """The fields and, for sessions kept in this process, their messages.

        The sessions themselves (connections, threads) are not pickled; the
        unpickled block re-opens them on first use. A model that cannot be
        pickled is left out with a warning (the default offline one takes
        its place), as `ConvMemChatMemoryBuffer` does; a custom store that
        cannot be pickled is an error, since its sessions would be lost.
        """
        fields = dict(self.__dict__)
        for name in _MODEL_FIELDS:
            value = fields.get(name)
            if value is None or _picklable(value):
                continue
            if name == "store":
                raise TypeError(
                    f"cannot pickle a ConvMemMemoryBlock whose store ({type(value).__name__}) cannot be "
                    "pickled; give the block path='chat.db' (or a picklable store) to pickle it"
                )
            logger.warning("not pickling %s of ConvMemMemoryBlock: it cannot be pickled", name)
            fields[name] = {} if name == "memory_kwargs" else None
        carried = dict(self._carried)
        if store_kind(self) == STORE_MEMORY and self._registry is not None:
            registry = self._registry
            for session_id in registry.store.sessions():
                carried[session_id] = registry.memory(session_id, self.user_id).messages()
        return {"fields": fields, "fields_set": set(self.model_fields_set), "carried": carried}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "__dict__", state["fields"])
        object.__setattr__(self, "__pydantic_fields_set__", state["fields_set"])
        object.__setattr__(self, "__pydantic_extra__", None)
        object.__setattr__(self, "__pydantic_private__", {"_registry": None, "_carried": state["carried"]})

    # -- BaseMemoryBlock ---------------------------------------------------------

    async def _aget(
        self,
        messages: list[ChatMessage] | None = None,
        session_id: str | None = None,
        **block_kwargs: Any,
    ) -> str:
        memory = self.memory(session_id)
        try:
            context = await memory.abuild_context(
                _latest_user_text(messages), self.token_limit, include_query=False
            )
        except BudgetError:
            return ""
        return self._render(context)

    async def aput(
        self,
        messages: list[ChatMessage],
        from_short_term_memory: bool = False,
        session_id: str | None = None,
    ) -> None:
        """Store `messages` in `session_id` (the session `Memory` flushes them from)."""
        if from_short_term_memory and not self.accept_short_term_memory:
            return
        # The base class tags the caller's own message objects with the session;
        # taking it from the argument leaves them untouched.
        await self._put(messages, session_id)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        await self._put(messages, None)

    async def _put(self, messages: list[ChatMessage], session_id: str | None) -> None:
        by_session: dict[str, list[Any]] = defaultdict(list)
        for message in messages:
            kwargs = dict(message.additional_kwargs)
            tagged = kwargs.pop(_SESSION_KWARG, None)
            clean = (
                message.model_copy(update={"additional_kwargs": kwargs}) if tagged is not None else message
            )
            key = session_id if session_id is not None else tagged
            by_session[self._session_for(key)].append(from_chat_message(clean))
        for session, batch in by_session.items():
            # `session` is already a convmem id: mapping it again would hash a hashed id.
            await aappend_history(self._sessions.memory(session, self.user_id), batch)

    async def atruncate(self, content: str | list[Any], tokens_to_truncate: int) -> str | None:
        """Drop whole lines from the end (the oldest-priority parts) until enough tokens are freed.

        `Memory` passes what `aget` returned, or ``[]`` when the block had nothing to
        say; content that is not text goes whole, as `BaseMemoryBlock.atruncate` does.
        """
        if not isinstance(content, str):
            return None
        lines = content.split("\n")
        counter = self._sessions.counter
        freed = 0
        while lines and freed < tokens_to_truncate:
            freed += counter.count_text(lines.pop()) + 1
        text = "\n".join(lines).strip()
        return text or None

    # -- rendering ---------------------------------------------------------------

    def _render(self, context: BuiltContext) -> str:
        parts = [text for text in (context.system_text, context.memory_text) if text]
        if context.window:
            config = self.memory_config
            earlier = render_transcript(
                group_turns(context.window),
                view="orchestration",
                template=EARLIER_TURNS.get(context.language, EARLIER_TURNS["en"]),
                max_message_chars=config.transcript_message_chars,
                max_chars=config.transcript_max_chars,
            )
            if earlier:
                parts.append(earlier)
        return "\n\n".join(parts)


def _latest_user_text(messages: Sequence[ChatMessage] | None) -> str | None:
    for message in reversed(messages or ()):
        if message.role == MessageRole.USER and message.content:
            return message.content
    return None


def _picklable(value: Any) -> bool:
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True

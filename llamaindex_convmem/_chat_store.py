"""`ConvMemChatStore`: a LlamaIndex `BaseChatStore` view over convmem's logs.

A `ConvMemChatMemoryBuffer` keeps its history in convmem, so its
``chat_store`` attribute is this view, not a second copy: reading it reads
the log, writing it writes the log, and `persist` writes what the log holds.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from typing import Any

import fsspec
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.storage.chat_store import BaseChatStore, SimpleChatStore

from convmem import ConversationMemory, InvalidMessageError, Message, SessionRegistry

from ._history import append_history, replace_history
from ._messages import from_chat_message, from_chat_messages, to_chat_messages
from ._sessions import session_id_for_key

__all__ = ["ConvMemChatStore", "simple_chat_store_dict"]


class ConvMemChatStore(BaseChatStore):
    """Every session of one convmem store, keyed like a LlamaIndex chat store.

    ``get_messages(key)`` is the raw log of the session ``key`` maps to (see
    `session_id_for_key`); `set_messages`, `add_message` and the deletes change
    that log and everything derived from it (summary, facts, vectors are
    rebuilt from what is left). Deleting one message deletes it from the log
    in one atomic step (the others keep their places; recall and the summary
    drop its text), safe while other processes append to the session;
    `set_messages` and inserting at an index rewrite the session's log whole
    (a history convmem refuses leaves the old one as it was), so do not run
    those while another process appends. `get_keys` lists the sessions of the
    buffer's user (every session of the store for a buffer without one), a
    hashed key showing as the key itself once this view has seen it::

        memory = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="user-42")
        memory.put(ChatMessage(role="user", content="Hi"))
        memory.chat_store.get_messages("user-42")  # [ChatMessage(role=user, content='Hi')]
        memory.chat_store.persist("chat_store.json")  # SimpleChatStore's format
    """

    _sessions: SessionRegistry = PrivateAttr()
    _user_id: str | None = PrivateAttr(default=None)
    _keys: dict[str, str] = PrivateAttr(default_factory=dict)

    def __init__(self, sessions: SessionRegistry, user_id: str | None = None, **data: Any) -> None:
        super().__init__(**data)
        self._sessions = sessions
        self._user_id = user_id

    @classmethod
    def class_name(cls) -> str:
        return "ConvMemChatStore"

    def memory(self, key: str) -> ConversationMemory:
        """The convmem memory of `key`'s session."""
        session_id = session_id_for_key(key)
        if session_id != key:
            self._keys[session_id] = key
        return self._sessions.memory(session_id, self._user_id)

    # -- BaseChatStore -----------------------------------------------------------

    def get_messages(self, key: str) -> list[ChatMessage]:
        return to_chat_messages(self.memory(key).messages())

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Replace the log of `key` with `messages`; a history convmem refuses leaves the old one."""
        replace_history(self.memory(key), from_chat_messages(messages))

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """Append `message`, or insert it at `idx` as `SimpleChatStore` does."""
        memory = self.memory(key)
        converted = from_chat_message(message)
        if idx is None:
            append_history(memory, [converted])
            return
        current = memory.messages()
        if idx >= len(current):
            append_history(memory, [converted])
            return
        replace_history(memory, [*current[:idx], converted, *current[idx:]])

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Delete the session (log and everything derived); its messages, or None if it had none."""
        memory = self.memory(key)
        messages = memory.messages()
        memory.clear()
        return to_chat_messages(messages) or None

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Delete the message at `idx` of the log; it, or None when there is no such message."""
        memory = self.memory(key)
        messages = memory.tail(-idx) if idx < 0 else memory.messages()
        if not -len(messages) <= idx < len(messages):
            return None
        return _delete(memory, messages[idx])

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Delete the newest message of the log (read in O(1)); it, or None for an empty log."""
        return self.delete_message(key, -1)

    def get_keys(self) -> list[str]:
        """The keys of the sessions this view may read: with a user, that user's sessions;
        without one, every session of the store (convmem lets a caller that names no user
        reach any session, as the store itself does)."""
        sessions = self._sessions.store.sessions(user_id=self._user_id)
        return [self._keys.get(session, session) for session in sessions]

    # Each async method runs its sync twin off the event loop (convmem's stores block).

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        await asyncio.to_thread(self.set_messages, key, messages)

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        return await asyncio.to_thread(self.get_messages, key)

    async def async_add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        await asyncio.to_thread(self.add_message, key, message, idx)

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        return await asyncio.to_thread(self.delete_messages, key)

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        return await asyncio.to_thread(self.delete_message, key, idx)

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        return await asyncio.to_thread(self.delete_last_message, key)

    async def aget_keys(self) -> list[str]:
        return await asyncio.to_thread(self.get_keys)

    # -- SimpleChatStore's format --------------------------------------------------

    def snapshot(self, keys: Sequence[str] | None = None) -> SimpleChatStore:
        """A `SimpleChatStore` holding a copy of the given keys' logs (default: every key)."""
        chosen = self.get_keys() if keys is None else list(keys)
        return SimpleChatStore(store={key: self.get_messages(key) for key in chosen})

    async def asnapshot(self, keys: Sequence[str] | None = None) -> SimpleChatStore:
        """Async `snapshot`."""
        return await asyncio.to_thread(self.snapshot, keys)

    def persist(self, persist_path: str = "chat_store.json", fs: Any = None) -> None:
        """Write every session in `SimpleChatStore.persist`'s format (read it back
        with ``SimpleChatStore.from_persist_path``)."""
        fs = fs or fsspec.filesystem("file")
        directory = os.path.dirname(persist_path)
        if directory and not fs.exists(directory):
            fs.makedirs(directory)
        data = simple_chat_store_dict({key: self.get_messages(key) for key in self.get_keys()})
        with fs.open(persist_path, "w", encoding="utf-8") as file:
            json.dump(data, file, ensure_ascii=False)

    async def apersist(self, persist_path: str = "chat_store.json", fs: Any = None) -> None:
        """Async `persist`."""
        await asyncio.to_thread(self.persist, persist_path, fs)


def simple_chat_store_dict(store: dict[str, list[ChatMessage]]) -> dict[str, Any]:
    """``SimpleChatStore(store=store).to_dict()``, built by hand: SimpleChatStore's own
    serializer fails on any message under pydantic >= 2.12 (llama-index-core 0.14)."""
    return {
        "store": {key: [m.model_dump(mode="json") for m in messages] for key, messages in store.items()},
        "class_name": SimpleChatStore.class_name(),
    }


def _delete(memory: ConversationMemory, message: Message) -> ChatMessage | None:
    """Delete one logged message by its seq; None when another writer deleted it first."""
    assert message.seq is not None
    try:
        [deleted] = memory.delete_messages([message.seq])
    except InvalidMessageError:
        return None
    return to_chat_messages([deleted])[0]

"""A user's own `BaseChatStore`, kept as a copy of what a buffer writes.

``ConvMemChatMemoryBuffer.from_defaults(chat_store=RedisChatStore(...))``: the
history lives in convmem (the log that the context is built from), and every
write also reaches the user's chat store under the same key, so code that reads
that store (a UI, an export, another `ChatMemoryBuffer`) keeps seeing the
conversation. Each write reaches convmem and the copy under one lock of the store's
key, shared by every buffer of the process, so writers at once (threads, a buffer per
request) leave both in the same order; async writes run in a worker thread, with the
store's sync methods. convmem never reads the mirror back, except once per session: a
session convmem holds nothing of starts from the history the mirror already
holds under its key, whichever key a buffer serves (at construction, after
``for_session`` or a change of ``chat_store_key``).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Sequence

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.storage.chat_store import BaseChatStore

from convmem import ConversationMemory

from ._history import append_history, replace_history
from ._messages import from_chat_messages

__all__ = ["ChatStoreMirror"]


class _KeyLock:
    """The lock of one key of one chat store, kept while some writer holds it."""

    __slots__ = ("__weakref__", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()


# By (chat store, key), for every buffer of the process that writes that store (a buffer
# per request), and only while a writer holds one: bounded by the writers at once.
_KEY_LOCKS: weakref.WeakValueDictionary[tuple[int, str], _KeyLock] = weakref.WeakValueDictionary()
_KEY_LOCKS_GUARD = threading.Lock()


def _key_lock(store: BaseChatStore, key: str) -> _KeyLock:
    with _KEY_LOCKS_GUARD:
        found = _KEY_LOCKS.get((id(store), key))
        if found is None:
            found = _KEY_LOCKS[(id(store), key)] = _KeyLock()
        return found


class ChatStoreMirror:
    """Writes to one `BaseChatStore` (its sync methods) as a `SimpleChatStore` user would,
    and starts each session convmem holds nothing of from what that store holds."""

    def __init__(self, store: BaseChatStore) -> None:
        self.store = store
        # The memories already started: weak, so a memory the session registry closes
        # is forgotten with it, and its next memory is checked again.
        self._started: weakref.WeakSet[ConversationMemory] = weakref.WeakSet()
        self._lock = threading.Lock()

    def history(self, key: str) -> list[ChatMessage]:
        return list(self.store.get_messages(key))

    def start(self, key: str, memory: ConversationMemory) -> None:
        """On the first use of `memory` (the session of `key`): when convmem holds
        nothing of the session, add the history this store holds under `key`."""
        if memory in self._started:
            return
        with self._lock:  # two first uses of one session must not import it twice
            if memory in self._started:
                return
            if not memory.stats().message_count:
                history = self.history(key)
                if history:
                    append_history(memory, from_chat_messages(history))
            self._started.add(memory)

    async def astart(self, key: str, memory: ConversationMemory) -> None:
        """Async `start` (the import runs in a worker thread, once per memory)."""
        if memory not in self._started:
            await asyncio.to_thread(self.start, key, memory)

    def _paired(
        self, key: str, convmem_write: Callable[[], object], copy_write: Callable[[], object]
    ) -> None:
        held = _key_lock(self.store, key)  # referenced until the writes end: one lock for all
        with held.lock:
            convmem_write()
            copy_write()

    def put(self, key: str, memory: ConversationMemory, messages: Sequence[ChatMessage]) -> None:
        """Append `messages` to `memory`'s log, then to the copy under `key`."""

        def copy_write() -> None:
            for message in messages:
                self.store.add_message(key, message)

        self.start(key, memory)
        self._paired(key, lambda: append_history(memory, from_chat_messages(messages)), copy_write)

    def replace(self, key: str, memory: ConversationMemory, messages: Sequence[ChatMessage]) -> None:
        """Replace `memory`'s log with `messages`, then the copy under `key`."""
        converted = from_chat_messages(messages)
        self._paired(
            key,
            lambda: replace_history(memory, converted),
            lambda: self.store.set_messages(key, list(messages)),
        )

    def clear(self, key: str, memory: ConversationMemory) -> None:
        """Delete `memory`'s session, then the copy under `key`."""
        self._paired(key, memory.clear, lambda: self.store.delete_messages(key))

"""A user's own `BaseChatStore`, kept as a copy of what a buffer writes.

``ConvMemChatMemoryBuffer.from_defaults(chat_store=RedisChatStore(...))``: the
history lives in convmem (the log that the context is built from), and every
write also reaches the user's chat store under the same key, so code that reads
that store (a UI, an export, another `ChatMemoryBuffer`) keeps seeing the
conversation. convmem never reads the mirror back, except once: a session
convmem has never seen starts from the history the mirror already holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.storage.chat_store import BaseChatStore

__all__ = ["ChatStoreMirror"]


class ChatStoreMirror:
    """Writes to one `BaseChatStore`, sync or async, as a `SimpleChatStore` user would."""

    def __init__(self, store: BaseChatStore) -> None:
        self.store = store

    def history(self, key: str) -> list[ChatMessage]:
        return list(self.store.get_messages(key))

    def add(self, key: str, messages: Sequence[ChatMessage]) -> None:
        for message in messages:
            self.store.add_message(key, message)

    async def aadd(self, key: str, messages: Sequence[ChatMessage]) -> None:
        for message in messages:
            await self.store.async_add_message(key, message)

    def replace(self, key: str, messages: Sequence[ChatMessage]) -> None:
        self.store.set_messages(key, list(messages))

    async def areplace(self, key: str, messages: Sequence[ChatMessage]) -> None:
        await self.store.aset_messages(key, list(messages))

    def clear(self, key: str) -> None:
        self.store.delete_messages(key)

    async def aclear(self, key: str) -> None:
        await self.store.adelete_messages(key)

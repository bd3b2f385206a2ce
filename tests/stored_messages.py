"""Messages stored straight into a store, counted as a memory would count them, for tests
that search a store's log without a `ConversationMemory` in between."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from convmem import Message, Store, TiktokenCounter

COUNTER = TiktokenCounter()


def store_messages(
    store: Store, session_id: str, items: Sequence[tuple[str, str]], **fields: Any
) -> list[Message]:
    """Append `items` (role, text) to `session_id`, each with its token count and `fields`."""
    messages = []
    for role, text in items:
        message = Message.create(role, text, **fields)
        messages.append(dataclasses.replace(message, token_count=COUNTER.count_message(message)))
    return store.append(session_id, messages)

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


# Short unrelated exchanges that pad a history around what a test recalls.
FILLER = [
    ("user", "Can you explain how compound interest works?"),
    ("assistant", "Compound interest adds the interest back to the principal each period."),
    ("user", "What is a good stretch for a stiff neck?"),
    ("assistant", "Try slow neck rolls and a chin tuck held for a few seconds."),
    ("user", "How many ounces are in a cup?"),
    ("assistant", "There are eight fluid ounces in a US cup."),
]


def long_answer(topic_sentence: str, paragraphs: int = 8, at: int = 5) -> str:
    """An assistant's long answer: `paragraphs` paragraphs of unrelated advice, with
    `topic_sentence` as its own paragraph at place `at`."""
    texts = [
        f"Paragraph {n} is about unrelated planning details, schedules and general advice number {n}. " * 4
        for n in range(paragraphs)
    ]
    texts.insert(at, topic_sentence)
    return "\n\n".join(texts)

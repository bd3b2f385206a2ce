"""With facts, summary and recall off, `get()` keeps the messages `ChatMemoryBuffer.get()` keeps,
at every token limit and tokenizer; the note about left-out history is the only addition,
and without it nothing is added. With the defaults, the window is never shorter than
`ChatMemoryBuffer`'s when the memory has nothing to add."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.utils import get_tokenizer

from convmem import MemoryConfig
from llamaindex_convmem import ConvMemChatMemoryBuffer

NOTE = "(Some earlier conversation is not included here.)"
OFF = MemoryConfig(extract_facts=False, summary_trigger="never", recall_earlier_turns=False)
TOKENIZERS: dict[str, Callable[[str], list[Any]]] = {
    "llamaindex-default": get_tokenizer(),
    "words": str.split,
    "characters": list,
}
LIMITS = [8, 20, 45, 80, 120, 160, 240, 300, 450, 700, 1000, 1500, 2200, 3000]


def history(exchanges: int = 40) -> list[ChatMessage]:
    """Questions and answers of uneven lengths, so that limits fall between turns."""
    messages = []
    for n in range(exchanges):
        detail = " and the weather there" * (n % 4)
        messages.append(
            ChatMessage(role="user", content=f"Question {n}: what is in city number {n}{detail}?")
        )
        messages.append(
            ChatMessage(role="assistant", content=f"City {n} has a museum" + ", a park" * (n % 3))
        )
    return messages


def contents(messages: list[ChatMessage]) -> list[str | None]:
    return [m.content for m in messages]


def native_get(tokenizer: Callable[[str], list[Any]], limit: int) -> list[ChatMessage] | None:
    """`ChatMemoryBuffer.get()`, or None where it returns a lone answer (which the buffer never does:
    its window never starts on an assistant message)."""
    native = ChatMemoryBuffer.from_defaults(chat_history=history(), token_limit=limit, tokenizer_fn=tokenizer)
    got = native.get()
    return None if got and got[0].role.value == "assistant" else got


def mismatches(tokenizer: Callable[[str], list[Any]], *, note: bool) -> list[tuple[int, int, int]]:
    """(limit, native length, ours) wherever ours is not native's messages (plus the note, if on)."""
    found = []
    for limit in LIMITS:
        expected = native_get(tokenizer, limit)
        if expected is None:
            continue
        ours = ConvMemChatMemoryBuffer.from_defaults(
            chat_history=history(),
            token_limit=limit,
            tokenizer_fn=tokenizer,
            config=OFF,
            note_omitted_history=note,
        ).get()
        got = contents(ours)
        if note and got[:1] == [NOTE]:
            got = got[1:]
        if got != contents(expected):
            found.append((limit, len(expected), len(ours)))
    return found


@pytest.mark.parametrize("tokenizer", TOKENIZERS.values(), ids=TOKENIZERS.keys())
def test_without_the_note_get_keeps_exactly_chat_memory_buffers_messages(
    tokenizer: Callable[[str], list[Any]],
) -> None:
    assert mismatches(tokenizer, note=False) == []


@pytest.mark.parametrize("tokenizer", TOKENIZERS.values(), ids=TOKENIZERS.keys())
def test_with_the_note_it_is_the_only_addition_to_chat_memory_buffers_messages(
    tokenizer: Callable[[str], list[Any]],
) -> None:
    assert mismatches(tokenizer, note=True) == []


def test_the_note_comes_first_and_only_when_history_is_left_out() -> None:
    short = ConvMemChatMemoryBuffer.from_defaults(chat_history=history(2), token_limit=3000, config=OFF)
    assert NOTE not in contents(short.get())
    long = ConvMemChatMemoryBuffer.from_defaults(chat_history=history(), token_limit=300, config=OFF)
    assert contents(long.get())[0] == NOTE and contents(long.get()).count(NOTE) == 1


def test_without_the_note_nothing_but_the_window_is_returned() -> None:
    buffer = ConvMemChatMemoryBuffer.from_defaults(
        chat_history=history(), token_limit=300, config=OFF, note_omitted_history=False
    )
    got = buffer.get()
    assert NOTE not in contents(got) and got[0].role.value == "user"
    assert got == history()[-len(got) :]


def test_the_note_option_must_be_a_bool() -> None:
    from convmem import ConfigError

    with pytest.raises(ConfigError, match="note_omitted_history must be True or False"):
        ConvMemChatMemoryBuffer.from_defaults(note_omitted_history="no")  # type: ignore[arg-type]


def test_with_the_defaults_the_window_keeps_at_least_chat_memory_buffers_messages() -> None:
    """Unless the memory shows something (a summary, facts, recalled turns), the window is
    never shorter than ChatMemoryBuffer's; memory items are what may take a turn's room."""
    found, checked = [], 0
    for exchanges in (3, 6, 40):
        for limit in LIMITS:
            native = ChatMemoryBuffer.from_defaults(chat_history=history(exchanges), token_limit=limit)
            expected = native.get()
            if expected and expected[0].role.value == "assistant":
                continue
            ours = ConvMemChatMemoryBuffer.from_defaults(
                chat_history=history(exchanges), token_limit=limit
            ).get()
            if any((m.content or "").startswith("<memory>") for m in ours):
                continue  # memory items were added: they may take room from the window
            checked += 1
            window = [m for m in ours if m.content != NOTE]
            if len(window) < len(expected):
                found.append((exchanges, limit, len(expected), len(window)))
    assert checked >= 10
    assert found == []

"""After `delete_messages` or `replace_message`, the old text is nowhere: not in a
context, a transcript, the summary, a fact, the recall index, or the bytes of the
SQLite file, its -wal, or the vector files next to it; also when the fact model fails."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from convmem import ConversationMemory, HashingEmbedder, LLMFactExtractor, MemoryConfig, SQLiteStore

SECRET = "4111-2222-3333-4444"


def files_holding(folder: Path, text: str) -> list[str]:
    needle = text.encode()
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes())


def remembered(memory: ConversationMemory, query: str) -> str:
    context = memory.build_context(query=query, budget=2000)
    return "\n".join(
        [
            *(str(m["content"]) for m in context.messages),
            memory.render_transcript("orchestration"),
            memory.render_transcript("answer"),
            memory.summary().text,
            *(f"{f.key} {f.value} {f.source}" for f in memory.facts()),
        ]
    )


def a_memory_with_a_secret(folder: Path) -> tuple[ConversationMemory, int]:
    store = SQLiteStore(folder / "memory.db")
    memory = ConversationMemory(
        "support-7",
        store,
        MemoryConfig(keep_recent_turns=2, summary_trigger="turns", summary_every_turns=1),
        embedder=HashingEmbedder(),
    )
    memory.add_turn("My name is Dana and I live in Lyon.", "Hello Dana.")
    secret = memory.add("user", f"My card number is {SECRET}, please keep it for the refund.")
    memory.add("assistant", "Thanks, I have noted the card for the refund.")
    for index in range(6):
        memory.add_turn(f"Question {index} about the refund timeline?", f"It takes {index + 3} days.")
    memory.flush()
    assert SECRET in remembered(memory, "what is my card number?")  # the test can fail
    assert files_holding(folder, SECRET)
    return memory, secret.seq or 0


def test_a_deleted_message_is_in_no_context_derived_state_or_file(tmp_path: Path) -> None:
    memory, seq = a_memory_with_a_secret(tmp_path)
    assert [m.text for m in memory.delete_messages([seq])] == [
        f"My card number is {SECRET}, please keep it for the refund."
    ]
    memory.flush()
    assert SECRET not in remembered(memory, "what is my card number?")
    assert "Dana" in remembered(memory, "what is my name?")
    memory.close()
    memory.store.close()
    assert files_holding(tmp_path, SECRET) == []


def test_a_replaced_message_leaves_only_its_new_text(tmp_path: Path) -> None:
    memory, seq = a_memory_with_a_secret(tmp_path)
    memory.replace_message(seq, {"role": "user", "content": "My card number is [removed]."})
    memory.flush()
    text = remembered(memory, "what is my card number?")
    assert SECRET not in text
    assert "[removed]" in text
    memory.close()
    memory.store.close()
    assert files_holding(tmp_path, SECRET) == []


class FailingAfterOneCall:
    """An LLM fact extractor whose model reads one message's fact, then is down."""

    def __init__(self) -> None:
        self.down = False

    def __call__(self, prompt: str) -> str:
        if self.down:
            raise RuntimeError("model is down")
        return '[{"key": "city", "value": "Porto"}]' if "Porto" in prompt else "[]"


@pytest.mark.parametrize("use_async", [False, True])
def test_a_redaction_while_the_fact_model_fails_still_drops_the_old_fact(use_async: bool) -> None:
    """The model raising (not only hanging) while a message is replaced: the edit completes,
    the fact the old text stated is gone at once, and the new text is read once the model
    is back."""
    model = FailingAfterOneCall()
    memory = ConversationMemory(
        "s", config=MemoryConfig(summary_trigger="never"), fact_extractor=LLMFactExtractor(model)
    )
    memory.add_turn("I live in Porto.", "Nice.")
    assert [(f.key, f.value) for f in memory.facts()] == [("city", "Porto")]
    model.down = True
    redacted = {"role": "user", "content": "I live in [redacted]."}
    if use_async:
        asyncio.run(memory.areplace_message(1, redacted))
    else:
        memory.replace_message(1, redacted)
    assert memory.messages()[0].text == "I live in [redacted]."
    assert memory.facts() == []
    assert "Porto" not in remembered(memory, "Where do I live?")
    model.down = False
    memory.add_turn("What's new?", "Not much.")
    assert "Porto" not in remembered(memory, "Where do I live?")

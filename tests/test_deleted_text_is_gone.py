"""After `delete_messages` or `replace_message`, the old text is nowhere: not in a
context, a transcript, the summary, a fact, the recall index, or the bytes of the
SQLite file, its -wal, or the vector files next to it."""

from __future__ import annotations

from pathlib import Path

from convmem import ConversationMemory, HashingEmbedder, MemoryConfig, SQLiteStore

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

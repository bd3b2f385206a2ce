"""A memory reuses the window it read for the last build only while the log is unchanged.

Every write another process (a second store object) makes to the session shows
in the next build: an append, a status change, a deletion, a replacement, the
session cleared and started again.
"""

from __future__ import annotations

from convmem import ConversationMemory, MemoryConfig, Message, Store, TurnStatus

QUIET = MemoryConfig(extract_facts=False, recall_earlier_turns=False, summary_trigger="never")


def window(memory: ConversationMemory) -> list[tuple[str, TurnStatus]]:
    context = memory.build_context(budget=2000)
    return [(m.text, m.status) for m in context.window]


def test_every_write_elsewhere_shows_in_the_next_build(two_handles: tuple[Store, Store]) -> None:
    mine, theirs = two_handles
    memory = ConversationMemory("s", mine, QUIET)
    memory.add_turn("first question", "first answer")
    assert [text for text, _ in window(memory)] == ["first question", "first answer"]
    assert window(memory) == window(memory)  # nothing changed: the same window

    [question] = theirs.append("s", [Message.create("user", "second question", status=TurnStatus.RUNNING)])
    assert window(memory)[-1] == ("second question", TurnStatus.RUNNING)

    assert question.seq is not None
    theirs.set_status("s", question.seq, TurnStatus.CANCELLED)
    assert window(memory)[-1] == ("second question", TurnStatus.CANCELLED)

    theirs.replace_message("s", 1, Message.create("user", "first question, redacted"))
    assert window(memory)[0][0] == "first question, redacted"

    theirs.delete_messages("s", [2])
    assert "first answer" not in [text for text, _ in window(memory)]

    theirs.clear("s")
    theirs.append("s", [Message.create("user", "a new start")])
    assert [text for text, _ in window(memory)] == ["a new start"]

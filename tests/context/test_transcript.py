from __future__ import annotations

import pytest

from convmem import ConfigError, ConversationMemory, MemoryConfig
from convmem._config import TranscriptTemplate


def memory_with_statuses() -> ConversationMemory:
    memory = ConversationMemory("s", config=MemoryConfig(language="en"))
    memory.add_turn("What is RAG?", "Retrieval-augmented generation.", status="completed")
    memory.add_turn("Summarize the report", "Partial summ", status="failed")
    memory.add_turn("Translate it", "", status="cancelled")
    memory.add_turn("And the budget?", status="running")
    return memory


def test_orchestration_view_keeps_questions_and_only_completed_answers() -> None:
    text = memory_with_statuses().render_transcript("orchestration")
    assert text.splitlines() == [
        "Recent conversation",
        "User: What is RAG?",
        "Assistant: Retrieval-augmented generation.",
        "User: Summarize the report",
        "User: Translate it",
    ]


def test_answer_view_keeps_questions_only() -> None:
    text = memory_with_statuses().render_transcript("answer")
    assert text.splitlines() == [
        "Recent conversation",
        "User: What is RAG?",
        "User: Summarize the report",
        "User: Translate it",
    ]


def test_running_turns_are_skipped_by_both_views() -> None:
    memory = memory_with_statuses()
    for view in ("orchestration", "answer"):
        assert "And the budget?" not in memory.render_transcript(view)


def test_chinese_conversation_gets_chinese_labels_by_default() -> None:
    memory = ConversationMemory("s")
    memory.add_turn("我养了一只柯基", "好可爱！")
    assert memory.render_transcript().splitlines() == [
        "【最近对话原文】",
        "用户：我养了一只柯基",
        "助手：好可爱！",
    ]


def test_each_message_is_clipped_to_its_maximum() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(language="en", transcript_message_chars=20))
    memory.add_turn("a" * 100, "b" * 100)
    lines = memory.render_transcript().splitlines()
    assert lines[1] == "User: " + "a" * 19 + "…"
    assert lines[2] == "Assistant: " + "b" * 19 + "…"


def test_whole_view_keeps_the_newest_turns_within_its_maximum() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(language="en", transcript_max_chars=120))
    for i in range(10):
        memory.add_turn(f"question number {i}", f"answer number {i}")
    text = memory.render_transcript()
    assert len(text) <= 120
    assert "question number 9" in text
    assert "question number 0" not in text


def test_custom_template_labels_are_used() -> None:
    template = TranscriptTemplate("History:", "Q: ", "A: ")
    memory = ConversationMemory("s", config=MemoryConfig(transcript_template=template))
    memory.add_turn("hi there", "hello")
    assert memory.render_transcript() == "History:\nQ: hi there\nA: hello"


def test_empty_history_renders_nothing() -> None:
    assert ConversationMemory("s").render_transcript() == ""


def test_unknown_view_is_rejected() -> None:
    with pytest.raises(ConfigError, match="view must be one of"):
        memory_with_statuses().render_transcript("everything")

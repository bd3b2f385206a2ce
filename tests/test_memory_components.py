"""Each component of a memory has one switch: a config flag, or giving the component."""

from __future__ import annotations

import pytest

from convmem import ConfigError, ConversationMemory, HashingEmbedder, MemoryConfig, Recall, RuleFactExtractor


def test_extract_facts_false_switches_facts_off() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(extract_facts=False, language="en"))
    memory.add_turn("My name is Ana and I live in Lisbon.", "Nice to meet you, Ana!")
    assert memory.fact_extractor is None
    assert memory.facts() == []
    assert memory.build_context(budget=500).section("facts").tokens == 0


def test_a_fact_extractor_left_none_is_the_offline_default() -> None:
    assert isinstance(ConversationMemory("s").fact_extractor, RuleFactExtractor)


def test_a_fact_extractor_with_facts_switched_off_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"fact_extractor.*extract_facts"):
        ConversationMemory("s", config=MemoryConfig(extract_facts=False), fact_extractor=RuleFactExtractor())


def test_summary_trigger_never_leaves_summarizing_to_summarize_now() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(keep_recent_turns=1, summary_trigger="never"))
    for i in range(4):
        memory.add_turn(f"Question {i} about the project.", f"Answer {i}.")
    assert memory.summary().text == ""
    assert memory.summarize_now()
    assert memory.summary().covers_through_seq == 6


def test_recall_without_recall_or_embedder_is_by_words() -> None:
    recall = ConversationMemory("s").recall
    assert isinstance(recall, Recall) and recall.embedder is None


def test_recall_earlier_turns_false_switches_recall_off() -> None:
    assert ConversationMemory("s", config=MemoryConfig(recall_earlier_turns=False)).recall is None


def test_an_embedder_turns_recall_on_with_default_settings() -> None:
    embedder = HashingEmbedder(64)
    recall = ConversationMemory("s", embedder=embedder).recall
    assert recall is not None and recall.embedder is embedder


def test_recall_and_embedder_together_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"embedder=.*recall=, not both"):
        ConversationMemory("s", recall=Recall(HashingEmbedder(64)), embedder=HashingEmbedder(64))

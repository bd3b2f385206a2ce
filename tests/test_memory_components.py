"""Each component of a memory has one switch: a config flag, or giving the component."""

from __future__ import annotations

import pytest

from convmem import (
    ConfigError,
    ConversationMemory,
    HashingEmbedder,
    InMemoryStore,
    MemoryConfig,
    Recall,
    RuleFactExtractor,
)


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


@pytest.mark.parametrize(
    ("argument", "value", "missing"),
    [
        ("summarizer", "gpt-4o-mini", r"summarize\(\) or asummarize\(\)"),
        ("summarizer", lambda prompt: prompt, r"summarize\(\) or asummarize\(\)"),
        ("fact_extractor", print, r"extract\(\) or aextract\(\)"),
        (
            "embedder",
            "all-MiniLM-L6-v2",
            r"embed_documents\(\) or aembed_documents\(\) and no embed_query\(\) or aembed_query\(\)",
        ),
        ("counter", "cl100k_base", r"count_text\(\) and no count_message\(\)"),
    ],
)
def test_something_that_is_not_a_component_is_refused_at_construction_naming_the_argument(
    argument: str, value: object, missing: str
) -> None:
    """A model's name, a plain function or a half-made component fails when it is given,
    not as a background warning at the first message while turns leave the window unsummarized."""
    store = InMemoryStore()
    ConversationMemory("s", store).add_turn("My name is Ana.", "Hello Ana.")
    with pytest.raises(
        ConfigError, match=rf"^{argument} must be .*; got \w+ .*, which has no {missing} method$"
    ):
        ConversationMemory("s", store, **{argument: value})
    assert [m.text for m in ConversationMemory("s", store).messages()] == ["My name is Ana.", "Hello Ana."]


def test_recall_that_is_not_a_recall_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^recall must be a Recall.*got str 'bm25'"):
        ConversationMemory("s", recall="bm25")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^embedder must be an Embedder.*got str 'minilm'"):
        Recall("minilm")  # type: ignore[arg-type]


def test_a_component_made_on_demand_by_a_proxy_is_accepted() -> None:
    """Looked up on the class first, then asked: a wrapper that forwards attributes passes."""

    class Forwarding:
        def __init__(self, inner: object) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self._inner, name)

    memory = ConversationMemory("s", fact_extractor=Forwarding(RuleFactExtractor()))  # type: ignore[arg-type]
    memory.add_turn("My name is Ana.", "Hello Ana.")
    assert [fact.value for fact in memory.facts()] == ["Ana"]


def test_a_summarizer_with_only_the_sync_method_is_taken_for_the_sync_calls() -> None:
    """One method of a pair is enough: a summarizer written for the sync calls only keeps
    working as it did before components were checked."""

    class SyncOnly:
        def summarize(self, previous_summary: object, messages: object, *, max_tokens: object = None) -> str:
            return "The user asked about " + str(len(messages))  # type: ignore[arg-type]

    config = MemoryConfig(keep_recent_turns=1, summary_trigger="turns", summary_every_turns=1)
    memory = ConversationMemory("s", config=config, summarizer=SyncOnly())  # type: ignore[arg-type]
    memory.add_turn("q1", "a1")
    memory.add_turn("q2", "a2")
    assert memory.summary().text == "The user asked about 2"

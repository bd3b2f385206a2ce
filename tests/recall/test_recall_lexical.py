"""Recall with no model: `Recall()` finds earlier turns by their words, and recalls only what is worth its tokens."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from stored_messages import COUNTER, FILLER, store_messages

from convmem import (
    ConfigError,
    ConversationMemory,
    HashingEmbedder,
    InMemoryStore,
    MemoryConfig,
    Recall,
    RecallConfig,
    Store,
)
from convmem._recall.engine import RecallResult
from convmem._recall.lexical import BM25TextIndex, LexicalIndex
from convmem._recall.units import SessionMirror

CHATTER = [
    ("user", "How was your weekend?"),
    ("assistant", "Pretty quiet, I mostly read a novel about sailors."),
    ("user", "I tried a new ramen place downtown."),
    ("assistant", "Was the broth any good?"),
    ("user", "Work has been busy with the quarterly report."),
    ("assistant", "Deadlines always pile up at the end of a quarter."),
]
SMALL_TALK = [
    ("user", "Thanks!"),
    ("assistant", "You're welcome!"),
    ("user", "ok"),
    ("assistant", "😊"),
    ("user", "谢谢"),
    ("assistant", "不客气！"),
]


def search(recall: Recall, store: Store, query: str, **kwargs: Any) -> RecallResult:
    kwargs.setdefault("max_tokens", 400)
    return recall.search("s1", query, store=store, counter=COUNTER, **kwargs)


# -- the engine without an embedder ------------------------------------------------------


def test_recall_without_an_embedder_finds_an_old_message_by_its_words() -> None:
    store = InMemoryStore()
    store_messages(store, "s1", [("user", "I adopted a corgi named Duoduo last spring."), *CHATTER])
    result = search(Recall(), store, "what is the name of my corgi?")
    assert "Duoduo" in result.items[0].text
    assert result.best_score is None  # no similarity by meaning to report
    assert result.degraded is None


def test_recall_without_an_embedder_finds_a_chinese_dog_name() -> None:
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [
            ("user", "我养了一只狗，品种是柯基，名字叫多多。"),
            ("user", "今天天气怎么样？"),
            ("user", "晚饭吃什么好？"),
        ],
    )
    result = search(Recall(), store, "我的狗叫什么名字？")
    assert [item.text.splitlines()[-1] for item in result.items] == [
        "用户：我养了一只狗，品种是柯基，名字叫多多。"
    ]


def test_recall_none_is_the_same_lexical_engine_as_recall_with_no_arguments() -> None:
    assert Recall(None).embedder is None
    assert repr(Recall()) == "Recall(None)"


def test_recall_without_an_embedder_keeps_no_vectors() -> None:
    store = InMemoryStore()
    recall = Recall()
    recall.add("s1", store_messages(store, "s1", CHATTER))
    assert recall.stats("s1") == {
        "messages": len(CHATTER),
        "vectors": 0,
        "pending": 0,
        "kind": None,
        "bytes_per_vector": None,
    }


@pytest.mark.parametrize("option", ["index_dir", "index_factory"])
def test_vector_options_without_an_embedder_are_refused_naming_the_option(
    option: str, tmp_path: Path
) -> None:
    value: Any = tmp_path if option == "index_dir" else (lambda session_id, dimension: None)
    with pytest.raises(ConfigError, match=rf"{option} was given to a Recall without an embedder"):
        Recall(**{option: value})


def test_async_search_without_an_embedder_matches_the_sync_one() -> None:
    store = InMemoryStore()
    store_messages(store, "s1", [("user", "I adopted a corgi named Duoduo last spring."), *CHATTER])
    recall = Recall()
    sync = search(recall, store, "corgi Duoduo")
    async_ = asyncio.run(recall.asearch("s1", "corgi Duoduo", store=store, max_tokens=400, counter=COUNTER))
    assert [i.seqs for i in async_.items] == [i.seqs for i in sync.items]


def test_async_add_and_catch_up_without_an_embedder_index_the_words() -> None:
    store = InMemoryStore()
    recall = Recall()
    asyncio.run(recall.aadd("s1", store_messages(store, "s1", [("user", "My corgi is Duoduo."), *CHATTER])))
    store_messages(store, "s1", [("user", "Our cat is called Mimi.")])
    asyncio.run(recall.acatch_up("s1", store))
    assert recall.stats("s1")["messages"] == len(CHATTER) + 2
    assert "Mimi" in search(recall, store, "cat Mimi").text


# -- worth its tokens -------------------------------------------------------------------


@pytest.mark.parametrize("embedder", [None, HashingEmbedder(64)], ids=["lexical", "hashing"])
def test_small_talk_is_never_recalled(embedder: HashingEmbedder | None) -> None:
    store = InMemoryStore()
    store_messages(
        store, "s1", [*SMALL_TALK, ("user", "Thanks for the tip about the ok corgi café!"), *CHATTER]
    )
    # The evidence gate off: this query is all small talk but one line, which must come back.
    config = RecallConfig(min_coverage=None)
    recall = Recall(embedder, config=config) if embedder is not None else Recall(config=config)
    result = search(recall, store, "thanks ok 谢谢 不客气 welcome")
    recalled = result.text
    for _, text in SMALL_TALK:
        assert f": {text}" not in recalled and f"：{text}" not in recalled
    assert "corgi café" in recalled


def test_small_talk_is_not_brought_along_as_a_neighbour_or_in_an_exchange() -> None:
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [("user", "My corgi is called Duoduo."), ("assistant", "Thanks!"), ("user", "ok"), *CHATTER],
    )
    for config in (RecallConfig(neighbour_radius=2), RecallConfig(granularity="exchange")):
        result = search(Recall(config=config), store, "corgi Duoduo")
        assert "Duoduo" in result.text
        assert "Thanks!" not in result.text and "User: ok" not in result.text


def test_candidates_below_the_relevance_floor_do_not_fill_the_cap() -> None:
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [
            ("user", "My corgi Duoduo loves chasing tennis balls in the park."),
            ("user", "The park was crowded on Sunday."),
            *CHATTER,
        ],
    )
    loose = search(Recall(config=RecallConfig(relevance_floor=0.0)), store, "Duoduo tennis balls park")
    strict = search(Recall(config=RecallConfig(relevance_floor=0.6)), store, "Duoduo tennis balls park")
    assert len(loose.items) == 2
    assert [item.text.splitlines()[-1] for item in strict.items] == [
        "User: My corgi Duoduo loves chasing tennis balls in the park."
    ]
    assert any("relevance floor" in d.reason for d in strict.dropped)


def test_chinese_question_words_and_pronouns_alone_recall_nothing() -> None:
    store = InMemoryStore()
    store_messages(
        store, "s1", [("user", "你想吃什么？"), ("user", "我们去哪个公园？"), ("user", "我有一个问题。")]
    )
    assert search(Recall(), store, "我的狗叫什么名字？我现在住在哪个城市？").items == ()


def test_relevance_floor_must_be_a_fraction() -> None:
    with pytest.raises(ConfigError, match=r"relevance_floor must be None or a number in \[0, 1\], got 1.5"):
        RecallConfig(relevance_floor=1.5)


# -- the lexical seam ---------------------------------------------------------------------


class RecordingIndex(BM25TextIndex):
    """A `LexicalIndex` that records what recall gives it (a store-backed index would slot in the same way)."""

    added: list[int]

    def __init__(self) -> None:
        super().__init__()
        self.added = []

    def add(self, doc_id: int, text: str) -> None:
        self.added.append(doc_id)
        super().add(doc_id, text)


def test_a_session_mirror_takes_any_lexical_index() -> None:
    made: list[RecordingIndex] = []

    def new_index() -> LexicalIndex:
        made.append(RecordingIndex())
        return made[-1]

    store = InMemoryStore()
    stored = store_messages(store, "s1", [("user", "My corgi is Duoduo."), ("assistant", "Lovely!")])
    mirror = SessionMirror("s1", embeds=False, new_lexical_index=new_index)
    mirror.ingest(stored, RecallConfig())
    messages_index, exchanges_index = made
    assert messages_index.added == [1, 2]
    assert exchanges_index.added == [1]  # once for the batch, answer included
    assert set(exchanges_index.scores("lovely")) == {1}
    assert set(mirror.lexical_messages.scores("corgi")) == {1}
    mirror.ingest(store_messages(store, "s1", [("assistant", "Truly adorable.")]), RecallConfig())
    assert exchanges_index.added == [1, 1]  # the exchange grew: indexed again, whole
    assert set(exchanges_index.scores("adorable lovely corgi")) == {1}


def test_the_in_process_lexical_index_scores_text() -> None:
    index = BM25TextIndex()
    index.add(1, "My dog is called Duoduo")
    index.add(2, "The weather is fine")
    assert set(index.scores("what is my dog called?")) == {1}
    index.remove(1)
    assert index.scores("dog") == {}
    assert len(index) == 1


# -- the memory's default ------------------------------------------------------------------


def test_a_memory_with_no_options_recalls_an_old_turn_by_its_words() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(keep_recent_turns=4))
    memory.add_turn("我养了一只狗，品种是柯基，名字叫多多。", "好可爱！")
    for i in range(10):
        memory.add_turn(f"第{i}个问题：数据库迁移进展如何？", f"第{i}个回答：迁移正常。")
    context = memory.build_context(query="我的狗叫什么名字？", budget=400)
    assert any("名字叫多多" in item.text for item in context.recalled)
    assert "名字叫多多" in context.memory_text


def test_with_recall_switched_off_a_build_recalls_nothing() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(recall_earlier_turns=False, keep_recent_turns=1))
    memory.add_turn("My corgi is called Duoduo.", "Lovely name!")
    memory.add_turn("How is the weather?", "Sunny.")
    context = memory.build_context(query="What is my corgi called?", budget=400)
    assert memory.recall is None
    assert context.recalled == ()


@pytest.mark.parametrize("option", ["recall", "embedder"])
def test_recall_or_embedder_with_recall_switched_off_is_refused_naming_both(option: str) -> None:
    value = Recall() if option == "recall" else HashingEmbedder(64)
    with pytest.raises(ConfigError, match=rf"{option}=.*recall_earlier_turns is False"):
        ConversationMemory("s", config=MemoryConfig(recall_earlier_turns=False), **{option: value})


def test_recall_earlier_turns_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="recall_earlier_turns must be True or False, got 'no'"):
        MemoryConfig(recall_earlier_turns="no")  # type: ignore[arg-type]


def test_a_memory_in_the_background_indexes_words_off_the_hot_path() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(background=True, keep_recent_turns=2))
    try:
        memory.add_turn("My corgi is called Duoduo.", "Lovely name!")
        for i in range(4):
            memory.add_turn(f"Question {i} about the database migration.", f"Answer {i}: it runs.")
        assert memory.flush(timeout=30)
        assert memory.recall is not None and memory.recall.stats("s")["messages"] == 10
        context = memory.build_context(query="What is my corgi called?", budget=400)
        assert any("Duoduo" in item.text for item in context.recalled)
    finally:
        memory.close()


def test_recall_room_a_weak_match_leaves_goes_back_to_the_window() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(keep_recent_turns=50, extract_facts=False))
    memory.add_turn("My corgi is called Duoduo.", "Lovely name!")
    for i in range(30):
        memory.add_turn(f"Question {i} about the database migration plan.", f"Answer {i}: it runs fine.")
    context = memory.build_context(query="What is my corgi called?", budget=600)
    window = context.section("window")
    assert {seq for item in context.recalled for seq in item.seqs} <= {1, 2}  # the corgi exchange only
    assert window.tokens > window.cap  # the window took the room recall left


def chat_then_six_turns(*turns: tuple[str, str], **config: Any) -> ConversationMemory:
    """A memory that keeps two turns, holding `turns` and then six turns about something else."""
    memory = ConversationMemory("s", config=MemoryConfig(keep_recent_turns=2, **config))
    for question, answer in turns:
        memory.add_turn(question, answer)
    for i in range(6):
        memory.add_turn(f"Question {i} about the database migration.", f"Answer {i}: it runs.")
    return memory


def moved_memory() -> ConversationMemory:
    return chat_then_six_turns(
        ("I live in Hangzhou, near the lake.", "Hangzhou is lovely."),
        ("I moved to Beijing last month.", "Welcome to Beijing!"),
    )


def test_a_statement_a_newer_one_replaced_is_not_recalled_without_it() -> None:
    memory = moved_memory()
    assert [f.value for f in memory.facts() if f.key == "city"] == ["Beijing"]
    context = memory.build_context(query="Is the lake in Hangzhou nice?", budget=500)
    assert "I live in Hangzhou" not in context.memory_text


def test_explain_says_why_recall_gave_what_it_gave() -> None:
    memory = chat_then_six_turns(("My corgi is called Duoduo.", "Lovely name!"), extract_facts=False)
    context = memory.build_context(query="What is my corgi called?", budget=500)
    assert context.recalled
    note = context.section("recall").note
    assert "recalled: a message holds 100% of the query's informative words" in note
    assert note in context.explain()


def test_explain_says_when_every_match_was_a_statement_replaced_since() -> None:
    memory = chat_then_six_turns(
        ("I live in Hangzhou, near the lake.", "Noted."),
        ("I moved to Beijing last month.", "Welcome to Beijing!"),
    )
    context = memory.build_context(query="What is the lake near my home in Hangzhou called?", budget=500)
    assert context.recalled == ()
    assert context.section("recall").note.endswith(
        "nothing recalled: what matched states facts the user has replaced since)"
    )


def test_explain_says_when_what_recall_found_is_in_the_window_already() -> None:
    memory = ConversationMemory("bo", config=MemoryConfig(keep_recent_turns=3))
    memory.add_turn("My cat is called Miso.", "Your cat is called Miso.")
    memory.add_turn("What is my cat called?", "Your cat is called Miso.")
    context = memory.build_context("What is my cat called?", budget=300)
    assert context.recalled == ()
    assert context.section("recall").note.endswith("; none of it kept: the recent window holds it)")


def test_a_search_whose_evidence_does_not_fit_says_so() -> None:
    store = InMemoryStore()
    store_messages(store, "s1", [("user", "I took French lessons in the morning before work."), *FILLER])
    result = Recall().search(
        "s1", "When did I take my French lessons?", store=store, max_tokens=8, counter=COUNTER
    )
    assert result.items == ()
    assert result.reason == "nothing recalled: the matches do not fit in 8 tokens"


def test_a_replaced_statement_is_recalled_next_to_the_one_that_replaced_it() -> None:
    context = moved_memory().build_context(query="Did I live in Hangzhou before Beijing?", budget=500)
    assert "I live in Hangzhou" in context.memory_text
    assert "I moved to Beijing" in context.memory_text

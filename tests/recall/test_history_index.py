"""A user's history in one keyword index: every session a slot, one scoring pass over all
of them, on the statistics of the sessions searched, and slots given back when a session
is dropped."""

from __future__ import annotations

import random

import numpy as np
import pytest

from convmem import ConversationMemory, InMemoryStore, Message, Recall, TiktokenCounter
from convmem._recall.history_index import SLOT_SHIFT, HistoryIndex
from convmem._recall.lexical import BM25Index, query_terms, tokenize

WORDS = [
    "dog",
    "cat",
    "bike",
    "garden",
    "paris",
    "rain",
    "coffee",
    "violin",
    "pasta",
    "tennis",
    "bread",
    "river",
    "lamp",
    "chess",
]


def sessions_of_words(seed: int, sessions: int, documents: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [
        [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))) for _ in range(documents)]
        for _ in range(sessions)
    ]


def filled(history: HistoryIndex, texts: list[list[str]]) -> list:
    views = []
    for session in texts:
        messages, exchanges = history.acquire() or pytest.fail("no slot")
        for doc_id, text in enumerate(session, start=1):
            messages.add(doc_id, text)
            exchanges.add(doc_id, text)
        views.append(messages)
    return views


def bm25_over(texts: list[list[str]], slots: list[int]) -> BM25Index:
    """One BM25Index over the documents of `slots`, under their joint ids."""
    index = BM25Index()
    for slot in slots:
        for doc_id, text in enumerate(texts[slot], start=1):
            index.add(slot << SLOT_SHIFT | doc_id, tokenize(text))
    return index


@pytest.mark.parametrize("seed", range(4))
def test_a_history_scores_its_sessions_as_one_collection(seed: int) -> None:
    texts = sessions_of_words(seed, 6, 40)
    history = HistoryIndex()
    views = filled(history, texts)
    query = "dog garden paris coffee"
    found = history.find(query, views, ("messages", "exchanges"))
    expected = bm25_over(texts, list(range(6))).scores(query_terms(query))
    assert found.scores["messages"].ids.tolist() == expected.ids.tolist()
    np.testing.assert_allclose(found.scores["messages"].scores, expected.scores, rtol=1e-12)
    assert found.collections["messages"].documents == 6 * 40


@pytest.mark.parametrize("seed", range(4))
def test_a_search_of_some_sessions_uses_their_statistics_alone(seed: int) -> None:
    texts = sessions_of_words(seed, 5, 30)
    history = HistoryIndex()
    views = filled(history, texts)
    searched = [1, 3]
    query = "violin pasta river"
    found = history.find(query, [views[s] for s in searched], ("messages",))
    expected = bm25_over(texts, searched).scores(query_terms(query))
    assert found.scores["messages"].ids.tolist() == expected.ids.tolist()
    np.testing.assert_allclose(found.scores["messages"].scores, expected.scores, rtol=1e-12)
    coverage = bm25_over(texts, searched).coverage(query_terms(query))
    np.testing.assert_allclose(found.coverage.scores, coverage.scores, rtol=1e-12)


def test_a_slot_given_back_takes_its_documents_and_its_views_write_nothing() -> None:
    history = HistoryIndex()
    first, _ = history.acquire() or pytest.fail("no slot")
    first.add(1, "my dog is called Rex")
    first.release()
    second, _ = history.acquire() or pytest.fail("no slot")
    assert second.slot == first.slot  # the slot is taken again
    first.add(2, "a secret about the dog")  # a view of the old lease: nothing happens
    assert len(second) == 0
    assert not history.find("dog", [second], ("messages",)).scores["messages"].ids.size
    assert not first.alive


def test_every_session_of_a_user_lands_in_one_history() -> None:
    store = InMemoryStore()
    recall = Recall()
    for number in range(4):
        memory = ConversationMemory(f"chat-{number}", store, user_id="ana", recall=recall)
        memory.add_turn(f"My bike number {number} is {['red', 'blue', 'green', 'pink'][number]}.", "Nice.")
    asker = ConversationMemory("chat-new", store, user_id="ana", recall=recall)
    context = asker.build_context("Which colour is my bike number 2?", budget=600)
    assert "green" in "\n".join(str(m["content"]) for m in context.messages)
    users = {owner: len(history) for (_, owner), history in recall._mirrors._histories.items()}
    assert users[("user", "ana")] == 4  # the new chat has no owner until its first message


def test_sessions_dropped_from_a_bounded_recall_give_their_slots_back() -> None:
    store = InMemoryStore()
    recall = Recall(max_sessions=3)
    for number in range(8):
        stored = store.append(
            f"s{number}", [Message.create("user", f"note {number} about tennis")], user_id="bo"
        )
        recall.add(f"s{number}", stored, store=store)
        recall.search(f"s{number}", "tennis", store=store, max_tokens=200, counter=TiktokenCounter())
    held = sum(len(history) for history in recall._mirrors._histories.values())
    assert held <= 3


def test_a_search_across_sessions_finds_the_same_items_from_every_session() -> None:
    """The candidates of each retriever are the best of the whole history: the answer's
    session contributes wherever it sits among the user's sessions."""
    store = InMemoryStore()
    recall = Recall()
    rng = random.Random(3)
    for number in range(12):
        filler = [Message.create("user", " ".join(rng.choice(WORDS) for _ in range(6))) for _ in range(10)]
        stored = store.append(f"s{number}", filler, user_id="cy")
        recall.add(f"s{number}", stored, store=store)
    answer = store.append("s7", [Message.create("user", "My violin teacher is called Ottoline.")])
    recall.add("s7", answer, store=store)
    others = [store.stats(f"s{n}") for n in range(12) if n != 0]
    result = recall.search(
        "s0",
        "who is my violin teacher?",
        store=store,
        max_tokens=300,
        counter=TiktokenCounter(),
        other_sessions=others,
    )
    assert any("Ottoline" in item.text and item.session_id == "s7" for item in result.items)

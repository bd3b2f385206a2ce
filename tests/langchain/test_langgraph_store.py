"""ConvMemStore: LangGraph's BaseStore contract, and a user's convmem memory seen through it."""

from __future__ import annotations

import asyncio
import math
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.tools import ToolRuntime
from langchain_core.embeddings import Embeddings
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_store
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore as LangGraphInMemoryStore
from scripted_models import scripted
from shared_stores import SERVER_KINDS, location_for

import convmem
from convmem import ConfigError, ConversationMemory, HashingEmbedder
from langchain_convmem import ConvMemNode, ConvMemStore

FACTS = ("convmem", "alice", "facts")
TALKS = ("convmem", "alice", "conversations")


def say(store: convmem.Store, session_id: str, user_id: str, *turns: str) -> ConversationMemory:
    """Log alternating user/assistant turns in a session of `user_id`."""
    memory = ConversationMemory(session_id, store, user_id=user_id)
    for position, text in enumerate(turns):
        memory.add("user" if position % 2 == 0 else "assistant", text)
    return memory


def log_alice_and_bob(store: convmem.Store) -> None:
    """Alice in two chats, Bob in one: same kinds of facts, different values."""
    say(store, "alice-1", "alice", "My name is Alice. My dog is called Duoduo.", "Hello Alice!")
    say(store, "alice-2", "alice", "I live in Hangzhou.", "Hangzhou is lovely in spring.")
    say(store, "bob-1", "bob", "My name is Bob. My dog is called Rex.", "Hi Bob!")


@pytest.fixture
def logged() -> convmem.InMemoryStore:
    store = convmem.InMemoryStore()
    log_alice_and_bob(store)
    return store


@pytest.fixture(params=["sqlite", *SERVER_KINDS])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[convmem.Store]:
    """Each persistent convmem store, Alice and Bob logged in it."""
    if request.param == "sqlite":
        with closing(convmem.SQLiteStore(tmp_path / "memory.db")) as sqlite_store:
            log_alice_and_bob(sqlite_store)
            yield sqlite_store
        return
    location = location_for(request.param, request)
    with closing(location.open()) as server_store:
        log_alice_and_bob(server_store)
        yield server_store
    location.cleanup()


class WordEmbeddings(Embeddings):
    """One dimension per word of a fixed vocabulary: texts sharing words are close."""

    VOCABULARY = ("apple", "banana", "car", "train", "red", "yellow", "fast", "fruit")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        words = re.findall(r"[a-z]+", text.lower())
        vector = [float(words.count(word)) for word in self.VOCABULARY]
        norm = math.sqrt(sum(x * x for x in vector)) or 1.0
        return [x / norm for x in vector]


# -- the generic contract (items of any other namespace) -----------------------------


def test_put_get_update_delete_round_trip() -> None:
    store = ConvMemStore()
    store.put(("memories", "alice"), "m1", {"text": "likes tea", "n": 1})
    first = store.get(("memories", "alice"), "m1")
    assert first is not None and first.value == {"text": "likes tea", "n": 1}
    assert first.namespace == ("memories", "alice") and first.key == "m1"
    store.put(("memories", "alice"), "m1", {"text": "likes coffee", "n": 2})
    second = store.get(("memories", "alice"), "m1")
    assert second is not None and second.value["text"] == "likes coffee"
    assert second.created_at >= first.created_at
    store.delete(("memories", "alice"), "m1")
    assert store.get(("memories", "alice"), "m1") is None
    assert store.get(("memories", "nobody"), "m1") is None


def test_search_filters_with_operators_and_pages_with_offset_and_limit() -> None:
    store = ConvMemStore()
    for number in range(10):
        store.put(("docs", "a"), f"d{number}", {"n": number, "kind": "even" if number % 2 == 0 else "odd"})
    store.put(("other",), "x", {"n": 100, "kind": "even"})
    evens = store.search(("docs",), filter={"kind": "even"}, limit=100)
    assert sorted(item.value["n"] for item in evens) == [0, 2, 4, 6, 8]
    big = store.search(("docs",), filter={"n": {"$gte": 7}}, limit=100)
    assert sorted(item.value["n"] for item in big) == [7, 8, 9]
    not_three = store.search(("docs",), filter={"n": {"$ne": 3}, "kind": "odd"}, limit=100)
    assert sorted(item.value["n"] for item in not_three) == [1, 5, 7, 9]
    everything = [item.key for item in store.search(("docs",), limit=100)]
    pages = [
        item.key for offset in range(0, 10, 3) for item in store.search(("docs",), offset=offset, limit=3)
    ]
    assert pages == everything and len(everything) == 10
    assert len(store.search((), limit=100)) == 11


def test_list_namespaces_with_prefix_suffix_wildcards_max_depth_and_paging() -> None:
    store = ConvMemStore()
    for namespace in [("a", "b", "c"), ("a", "b", "d"), ("a", "x", "c"), ("z",)]:
        store.put(namespace, "k", {"v": 1})
    assert store.list_namespaces(prefix=("a", "b")) == [("a", "b", "c"), ("a", "b", "d")]
    assert store.list_namespaces(suffix=("c",)) == [("a", "b", "c"), ("a", "x", "c")]
    assert store.list_namespaces(prefix=("a", "*", "c")) == [("a", "b", "c"), ("a", "x", "c")]
    assert store.list_namespaces(max_depth=1) == [("a",), ("z",)]
    assert store.list_namespaces(prefix=("a",), max_depth=2) == [("a", "b"), ("a", "x")]
    assert store.list_namespaces(limit=2, offset=1) == [("a", "b", "d"), ("a", "x", "c")]


def test_batch_returns_results_in_the_order_of_the_ops(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    store.put(("notes",), "n1", {"text": "one"})
    results = store.batch(
        [
            GetOp(FACTS, "city"),
            GetOp(("notes",), "n1"),
            SearchOp(("notes",)),
            PutOp(("notes",), "n2", {"text": "two"}),
            ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("convmem", "alice")),)),
            GetOp(FACTS, "no_such_fact"),
        ]
    )
    assert results[0] is not None and results[0].value["value"] == "Hangzhou"
    assert results[1] is not None and results[1].value == {"text": "one"}
    assert [item.key for item in results[2]] == ["n1"]
    assert results[3] is None
    assert results[4] == [TALKS, FACTS]
    assert results[5] is None
    assert store.get(("notes",), "n2") is not None


async def test_async_twins_answer_like_the_sync_methods(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    await store.aput(("notes", "alice"), "n1", {"text": "prefers short answers"})
    item = await store.aget(("notes", "alice"), "n1")
    assert item is not None and item.value["text"] == "prefers short answers"
    fact = await store.aget(FACTS, "pet_name")
    assert fact is not None and fact.value["value"] == "Duoduo"
    found = await store.asearch(TALKS, query="what is my dog called")
    assert found and "Duoduo" in found[0].value["text"]
    assert await store.alist_namespaces(prefix=("convmem", "alice")) == [TALKS, FACTS]
    await store.adelete(FACTS, "pet_name")
    assert await store.aget(FACTS, "pet_name") is None
    await store.adelete(("notes", "alice"), "n1")
    assert await store.aget(("notes", "alice"), "n1") is None
    assert await store.abatch([GetOp(FACTS, "city"), SearchOp(("notes",))]) == store.batch(
        [GetOp(FACTS, "city"), SearchOp(("notes",))]
    )


def test_vector_search_through_the_inner_index() -> None:
    store = ConvMemStore(index={"dims": len(WordEmbeddings.VOCABULARY), "embed": WordEmbeddings()})
    store.put(("docs",), "apple", {"text": "red apple fruit"})
    store.put(("docs",), "banana", {"text": "yellow banana fruit"})
    store.put(("docs",), "train", {"text": "fast train"})
    store.put(("docs",), "unindexed", {"text": "red apple"}, index=False)
    found = store.search(("docs",), query="red apple", limit=3)
    assert [item.key for item in found[:1]] == ["apple"]
    assert found[0].score is not None and found[0].score > (found[1].score or 0.0)
    assert store.search(("docs",), query="fast train", limit=1)[0].key == "train"
    assert [item.key for item in store.search(("docs",), query="fruit", filter={"text": "fast train"})] == [
        "train"
    ]
    assert store.index_config is not None and store.index_config["dims"] == 8


def test_invalid_namespaces_are_refused_before_anything_runs() -> None:
    store = ConvMemStore()
    with pytest.raises(InvalidNamespaceError):
        store.put(("a.b",), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.put((), "k", {"v": 1})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("fine",), "k", {"v": 1}), PutOp(("", "x"), "k", {"v": 1})])
    assert store.get(("fine",), "k") is None


def test_an_inner_store_of_your_own_holds_the_generic_items() -> None:
    inner = LangGraphInMemoryStore()
    store = ConvMemStore(inner=inner)
    store.put(("memories", "alice"), "m1", {"text": "x"})
    assert inner.get(("memories", "alice"), "m1") is not None
    with pytest.raises(ConfigError, match="index"):
        ConvMemStore(inner=inner, index={"dims": 8, "embed": WordEmbeddings()})
    with pytest.raises(ConfigError, match="not both"):
        ConvMemStore(convmem.InMemoryStore(), path="x.db")


# -- a user's facts ---------------------------------------------------------------------


def test_a_users_facts_from_all_their_sessions_are_items(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    facts = {item.key: item for item in store.search(FACTS, limit=100)}
    assert facts["name"].value["value"] == "Alice"
    assert facts["pet_name"].value["value"] == "Duoduo"
    assert facts["city"].value["value"] == "Hangzhou"
    assert facts["city"].value["session_id"] == "alice-2"
    assert facts["pet_name"].value["session_id"] == "alice-1"
    assert set(facts["city"].value) == {"key", "value", "speaker", "session_id", "seq", "timestamp", "source"}
    assert facts["city"].value["speaker"] is None  # the user of a one-person chat
    assert all(item.namespace == FACTS for item in facts.values())
    item = store.get(FACTS, "pet_name")
    assert item is not None and item.value == facts["pet_name"].value


def test_facts_of_two_speakers_of_one_key_are_two_items_and_deleted_apart() -> None:
    logged = convmem.InMemoryStore()
    memory = ConversationMemory("friends", logged, user_id="club")
    memory.add("user", "I live in Oslo.", name="Caroline")
    memory.add("user", "I live in Rome.", name="Melanie")
    store = ConvMemStore(logged)
    namespace = ("convmem", "club", "facts")
    facts = {item.key: item.value for item in store.search(namespace, limit=100)}
    assert facts["Caroline:city"]["value"] == "Oslo" and facts["Caroline:city"]["speaker"] == "Caroline"
    assert facts["Melanie:city"]["value"] == "Rome"
    store.delete(namespace, "Caroline:city")
    assert store.get(namespace, "Caroline:city") is None
    melanie = store.get(namespace, "Melanie:city")
    assert melanie is not None and melanie.value["value"] == "Rome"


def test_a_query_ranks_the_facts_it_names_first(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    found = store.search(FACTS, query="which city")
    assert found[0].key == "city" and (found[0].score or 0) > 0
    assert store.search(FACTS, filter={"value": "Duoduo"})[0].key == "pet_name"


def test_deleting_a_fact_forgets_it_in_every_session_of_the_user(logged: convmem.InMemoryStore) -> None:
    say(logged, "alice-3", "alice", "My dog is called Duoduo, did I say?", "You did.")
    store = ConvMemStore(logged)
    store.delete(FACTS, "pet_name")
    assert store.get(FACTS, "pet_name") is None
    assert all(
        fact.key != "pet_name" for fact in ConversationMemory("alice-1", logged, user_id="alice").facts()
    )
    bob = store.get(("convmem", "bob", "facts"), "pet_name")
    assert bob is not None and bob.value["value"] == "Rex"


def test_writing_a_fact_is_refused_and_names_the_namespace(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    with pytest.raises(ConfigError, match=r"\('convmem', 'alice', 'facts'\)"):
        store.put(FACTS, "city", {"value": "Paris"})
    with pytest.raises(ConfigError):
        store.batch([PutOp(("notes",), "n", {"v": 1}), PutOp(FACTS, "city", {"value": "Paris"})])
    assert store.get(("notes",), "n") is None  # the batch was refused whole
    city = store.get(FACTS, "city")
    assert city is not None and city.value["value"] == "Hangzhou"


# -- a user's past conversations -------------------------------------------------------


def test_search_finds_past_turns_of_any_session_by_recall(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    found = store.search(TALKS, query="What is my dog called?")
    assert found[0].key == "alice-1:1" and found[0].score is not None
    assert found[0].value == {
        "text": "My name is Alice. My dog is called Duoduo.",
        "role": "user",
        "session_id": "alice-1",
        "seq": 1,
        "timestamp": found[0].value["timestamp"],
    }
    scores = [item.score or 0.0 for item in found]
    assert scores == sorted(scores, reverse=True)
    spring = store.search(TALKS, query="spring in Hangzhou")
    assert spring[0].value["session_id"] == "alice-2"
    assert all("Rex" not in item.value["text"] for item in found + spring)


def test_conversation_search_honours_filter_offset_and_limit(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    newest = store.search(TALKS, limit=2)
    assert [item.key for item in newest] == ["alice-2:2", "alice-2:1"]
    assert [item.key for item in store.search(TALKS, limit=2, offset=2)] == ["alice-1:2", "alice-1:1"]
    assert store.search(TALKS, offset=4) == []
    users = store.search(TALKS, filter={"role": "user"}, limit=10)
    assert {item.key for item in users} == {"alice-1:1", "alice-2:1"}
    recalled = store.search(TALKS, query="Alice dog Duoduo", filter={"role": "assistant"})
    assert recalled and all(item.value["role"] == "assistant" for item in recalled)
    assert len(store.search(TALKS, query="Alice dog Duoduo", limit=1)) == 1


@pytest.mark.parametrize("page", [{"limit": -1}, {"offset": -2}, {"limit": "10"}, {"offset": 1.5}])
def test_a_page_out_of_range_is_refused_naming_it(
    logged: convmem.InMemoryStore, page: dict[str, object]
) -> None:
    """A negative limit cut the page from its end (``items[offset:offset - 1]``)."""
    store = ConvMemStore(logged)
    (name,) = page
    with pytest.raises(ConfigError, match=rf"^{name} must be an int from 0 to"):
        store.search(TALKS, **page)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=rf"^{name} must be an int from 0 to"):
        store.list_namespaces(**page)  # type: ignore[arg-type]
    assert [item.key for item in store.search(TALKS, limit=1)] == ["alice-2:2"]


def test_messages_sharing_a_timestamp_are_listed_by_their_seq_newest_first() -> None:
    chats = convmem.InMemoryStore()
    memory = ConversationMemory("s", chats, user_id="ana")
    day = datetime(2024, 5, 1)
    for minute in range(6):  # imported turns: a question and its answer share their time
        memory.add_turn(f"question {minute}", f"answer {minute}", timestamp=day + timedelta(minutes=minute))
    store = ConvMemStore(chats)
    namespace = ConvMemStore.conversations_namespace("ana")
    newest = [item.key for item in store.search(namespace, limit=100)]
    assert newest == [f"s:{seq}" for seq in range(12, 0, -1)]
    pages = [
        item.key for offset in range(0, 12, 5) for item in store.search(namespace, limit=5, offset=offset)
    ]
    assert pages == newest


def test_get_returns_one_message_of_the_users_own_sessions(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    item = store.get(TALKS, "alice-2:1")
    assert item is not None and item.value["text"] == "I live in Hangzhou."
    for key in ["bob-1:1", "alice-2:99", "alice-2", "alice-2:x", ":1", "alice-2:-1"]:
        assert store.get(TALKS, key) is None, key


@pytest.mark.parametrize("key", ["alice-2:01", "alice-2:0001", "alice-2:\u0661", "alice-2:+1", "alice-2: 1"])
def test_get_finds_a_message_by_its_exact_key_only(logged: convmem.InMemoryStore, key: str) -> None:
    # LangGraph's get returns the item stored under that very key: "alice-2:01" is not "alice-2:1".
    store = ConvMemStore(logged)
    assert store.get(TALKS, key) is None
    assert store.get(TALKS, "alice-2:1") is not None


def test_conversations_are_read_only(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    with pytest.raises(ConfigError, match="conversations"):
        store.put(TALKS, "alice-1:1", {"text": "rewritten"})
    with pytest.raises(ConfigError, match="forget_user"):
        store.delete(TALKS, "alice-1:1")
    assert ConversationMemory("alice-1", logged, user_id="alice").messages()[0].text.startswith("My name")


def test_dense_recall_with_an_embedder(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged, embedder=HashingEmbedder())
    found = store.search(TALKS, query="dog called Duoduo", limit=3)
    assert found[0].key == "alice-1:1"


def test_a_langchain_embeddings_is_taken_as_the_embedder(caplog: pytest.LogCaptureFixture) -> None:
    chats = convmem.InMemoryStore()
    say(chats, "carol-1", "carol", "My favourite fruit is a yellow banana.", "Noted.", "I drive a red car.")
    store = ConvMemStore(chats, embedder=WordEmbeddings())
    with caplog.at_level("WARNING", logger="convmem"):
        found = store.search(ConvMemStore.conversations_namespace("carol"), query="yellow fruit", limit=1)
    assert [item.value["text"] for item in found] == ["My favourite fruit is a yellow banana."]
    assert caplog.records == []


@pytest.mark.parametrize("embedder", [object(), "all-MiniLM-L6-v2", LangGraphInMemoryStore()])
def test_an_embedder_of_no_known_kind_is_refused_at_construction(embedder: object) -> None:
    with pytest.raises(ConfigError) as refused:
        ConvMemStore(embedder=embedder)
    message = str(refused.value)
    assert "embedder" in message and type(embedder).__name__ in message
    assert "convmem Embedder" in message and "LangChain Embeddings" in message


def test_a_convmem_user_prefix_lists_and_searches_both_namespaces(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    assert store.list_namespaces(prefix=("convmem", "alice")) == [TALKS, FACTS]
    assert store.list_namespaces(prefix=("convmem", "alice"), max_depth=2) == [("convmem", "alice")]
    assert store.list_namespaces(prefix=("convmem", "alice"), suffix=("facts",)) == [FACTS]
    assert store.list_namespaces(prefix=("convmem", "alice"), limit=1, offset=1) == [FACTS]
    namespaces = {item.namespace for item in store.search(("convmem", "alice"), limit=100)}
    assert namespaces == {TALKS, FACTS}
    assert store.list_namespaces(prefix=("convmem", "carol")) == []
    keys = [item.key for item in store.search(("convmem", "alice"), limit=100)]
    paged = [
        item.key
        for offset in range(0, len(keys), 4)
        for item in store.search(("convmem", "alice"), offset=offset, limit=4)
    ]
    assert paged == keys


def test_an_apps_namespaces_never_reach_convmems_items(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    store.put(("users", "alice", "facts"), "tea", {"value": "prefers tea"})
    store.put(("users", "alice", "conversations"), "c1", {"text": "kept by the app"})
    assert sorted(item.key for item in store.search(("users", "alice"), limit=100)) == ["c1", "tea"]
    assert store.list_namespaces(prefix=("users", "alice")) == [
        ("users", "alice", "conversations"),
        ("users", "alice", "facts"),
    ]
    item = store.get(("users", "alice", "facts"), "tea")
    assert item is not None and item.value == {"value": "prefers tea"}
    assert store.get(FACTS, "tea") is None
    assert store.list_namespaces(prefix=("*", "alice")) == [
        ("users", "alice", "conversations"),
        ("users", "alice", "facts"),
    ]


@pytest.mark.parametrize(
    "namespace",
    [("convmem",), ("convmem", "alice"), ("convmem", "alice", "notes"), ("convmem", "x", "y", "z")],
)
def test_writing_under_the_reserved_label_is_refused_and_says_where_to_write(
    logged: convmem.InMemoryStore, namespace: tuple[str, ...]
) -> None:
    store = ConvMemStore(logged)
    with pytest.raises(ConfigError, match=r"reserved for convmem's own items.*e\.g\. \('users'"):
        store.put(namespace, "k", {"text": "x"})
    assert store.inner.search(("convmem",)) == []


def test_the_reserved_namespaces_are_named_on_the_class() -> None:
    assert ConvMemStore.RESERVED == "convmem"
    assert ConvMemStore.facts_namespace("ana") == ("convmem", "ana", "facts")
    assert ConvMemStore.conversations_namespace("ana") == ("convmem", "ana", "conversations")


# -- walls between users ---------------------------------------------------------------


@pytest.mark.parametrize(
    "intruder", ["a/b", "a\\alice", "Alice", "ALICE", "alice ", "ａｌｉｃｅ", "alice\u200b", "%", "alice:*"]
)
def test_another_user_id_never_reaches_alices_memory(logged: convmem.InMemoryStore, intruder: str) -> None:
    say(logged, "intruder-1", intruder, "My name is Mallory.", "Hi.")
    store = ConvMemStore(logged)
    facts = store.search(("convmem", intruder, "facts"), limit=100)
    assert {item.value["value"] for item in facts} == {"Mallory"}
    talks = store.search(("convmem", intruder, "conversations"), query="dog Duoduo Alice Hangzhou", limit=100)
    talks += store.search(("convmem", intruder, "conversations"), limit=100)
    assert talks and {item.value["session_id"] for item in talks} == {"intruder-1"}
    assert store.get(("convmem", intruder, "conversations"), "alice-1:1") is None
    assert store.get(("convmem", intruder, "facts"), "pet_name") is None
    assert store.list_namespaces(prefix=("convmem", intruder), suffix=("facts",)) == [
        ("convmem", intruder, "facts")
    ]
    store.delete(("convmem", intruder, "facts"), "name")
    assert store.get(FACTS, "name") is not None


def test_a_user_id_langgraph_cannot_name_is_refused_not_resolved(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    for hostile in ["../alice", "alice.", ".", "", "a\x00"]:
        with pytest.raises(InvalidNamespaceError):
            store.search(("convmem", hostile, "facts"))
        with pytest.raises(InvalidNamespaceError):
            store.get(("convmem", hostile, "conversations"), "alice-1:1")
        with pytest.raises(InvalidNamespaceError):
            store.delete(("convmem", hostile, "facts"), "pet_name")
    assert store.get(FACTS, "pet_name") is not None
    assert store.search(("convmem", " ", "facts")) == []  # no user can have a blank id


def test_wildcards_and_short_prefixes_do_not_enumerate_users(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    assert store.search(("convmem",), limit=100) == []
    assert store.search((), limit=100) == []
    assert store.list_namespaces(prefix=("convmem", "*")) == []
    assert store.list_namespaces(prefix=("*", "alice")) == []
    assert store.list_namespaces() == []
    assert store.search(("convmem", "*", "facts")) == []


def test_a_users_memory_appears_only_after_their_first_message() -> None:
    logged = convmem.InMemoryStore()
    store = ConvMemStore(logged)
    assert store.search(FACTS) == [] and store.search(TALKS, query="dog") == []
    assert store.list_namespaces(prefix=("convmem", "alice")) == []
    say(logged, "alice-1", "alice", "My dog is called Duoduo.")
    assert store.get(FACTS, "pet_name") is not None
    assert store.list_namespaces(prefix=("convmem", "alice")) == [TALKS, FACTS]


def test_forget_user_removes_their_sessions_and_their_items(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    store.put(("users", "alice", "notes"), "n1", {"text": "x"})
    store.put(("users", "alice", "notes", "deep"), "n2", {"text": "y"})
    store.put(("users", "bob", "notes"), "n1", {"text": "z"})
    store.put(("memories", "alice"), "m1", {"text": "kept: not under users/alice"})
    assert store.forget_user("alice") == ["alice-1", "alice-2"]
    assert store.search(("users", "alice"), limit=100) == []
    assert store.search(TALKS, query="dog Duoduo") == []
    assert store.get(TALKS, "alice-1:1") is None
    assert store.list_namespaces(prefix=("convmem", "alice")) == []
    assert store.get(("users", "bob", "notes"), "n1") is not None
    assert store.get(("convmem", "bob", "facts"), "pet_name") is not None
    assert store.get(("memories", "alice"), "m1") is not None
    assert logged.sessions() == ["bob-1"]


async def test_aforget_user(logged: convmem.InMemoryStore) -> None:
    store = ConvMemStore(logged)
    await store.aput(("users", "alice", "notes"), "n1", {"text": "x"})
    assert await store.aforget_user("alice") == ["alice-1", "alice-2"]
    assert await store.asearch(("users", "alice"), limit=100) == []


def test_every_store_backend_shows_each_user_only_their_own(backend: convmem.Store) -> None:
    say(backend, "mallory-1", "Alice", "My name is Mallory. My dog is called Fang.", "Hi.")
    store = ConvMemStore(backend)
    facts = {item.key: item.value["value"] for item in store.search(FACTS, limit=100)}
    assert facts["pet_name"] == "Duoduo" and facts["city"] == "Hangzhou" and facts["name"] == "Alice"
    found = store.search(TALKS, query="What is my dog called?")
    assert found[0].key == "alice-1:1"
    assert {item.value["session_id"] for item in store.search(TALKS, limit=100)} == {"alice-1", "alice-2"}
    assert store.get(TALKS, "mallory-1:1") is None and store.get(TALKS, "bob-1:1") is None
    mallory = store.search(("convmem", "Alice", "facts"), limit=100)
    assert {item.value["value"] for item in mallory} >= {"Mallory", "Fang"}
    assert "Duoduo" not in {item.value["value"] for item in mallory}
    store.delete(FACTS, "pet_name")
    assert store.get(FACTS, "pet_name") is None
    assert store.get(("convmem", "Alice", "facts"), "pet_name") is not None
    assert store.forget_user("alice") == ["alice-1", "alice-2"]
    assert store.search(("users", "alice"), limit=100) == []
    assert store.get(("convmem", "bob", "facts"), "pet_name") is not None


def test_a_sqlite_path_is_a_store_that_memories_share(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    say(convmem.SQLiteStore(path), "alice-1", "alice", "My dog is called Duoduo.")
    store = ConvMemStore(path=path)
    item = store.get(FACTS, "pet_name")
    assert item is not None and item.value["value"] == "Duoduo"
    dense = ConvMemStore(path=path, embedder=HashingEmbedder())
    assert dense.search(TALKS, query="dog called Duoduo")[0].key == "alice-1:1"
    assert dense.recall.index_dir == Path(f"{path.resolve()}.vectors")


# -- agents and graphs ---------------------------------------------------------------------


@dataclass
class UserContext:
    user_id: str


def test_a_create_agent_tool_reads_the_users_facts_from_runtime_store(logged: convmem.InMemoryStore) -> None:
    seen: dict[str, Any] = {}

    @tool
    def recall_facts(runtime: ToolRuntime[UserContext]) -> str:
        """What is known about the user."""
        user_id = runtime.context.user_id
        assert get_store() is runtime.store
        items = runtime.store.search(("convmem", user_id, "facts"), limit=20)
        seen["facts"] = {item.key: item.value["value"] for item in items}
        return "; ".join(f"{key}={value}" for key, value in seen["facts"].items())

    model = scripted(
        AIMessage("", tool_calls=[{"id": "c1", "name": "recall_facts", "args": {}}]),
        AIMessage("Your dog is Duoduo."),
    )
    agent = create_agent(model, tools=[recall_facts], store=ConvMemStore(logged), context_schema=UserContext)
    result = agent.invoke({"messages": [HumanMessage("What's my dog's name?")]}, context=UserContext("alice"))
    assert seen["facts"]["pet_name"] == "Duoduo" and seen["facts"]["city"] == "Hangzhou"
    assert "Rex" not in seen["facts"].values()
    tool_message = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    assert "pet_name=Duoduo" in tool_message.content
    assert "pet_name=Duoduo" in str(model.calls[1])  # the model saw the tool's answer


def test_a_state_graph_node_searches_the_users_past_conversations(logged: convmem.InMemoryStore) -> None:
    def answer(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        user_id = config["configurable"]["user_id"]
        question = str(state["messages"][-1].content)
        found = store.search(("convmem", user_id, "conversations"), query=question, limit=1)
        return {"messages": [AIMessage(found[0].value["text"] if found else "nothing")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    graph = builder.compile(store=ConvMemStore(logged))
    asked = {"messages": [HumanMessage("What is my dog called?")]}
    alice = graph.invoke(asked, {"configurable": {"user_id": "alice"}})
    assert alice["messages"][-1].content == "My name is Alice. My dog is called Duoduo."
    bob = graph.invoke(asked, {"configurable": {"user_id": "bob"}})
    assert bob["messages"][-1].content == "My name is Bob. My dog is called Rex."
    carol = graph.invoke(asked, {"configurable": {"user_id": "carol"}})
    assert carol["messages"][-1].content == "nothing"


def test_what_a_conv_mem_node_graph_records_its_store_shows_in_the_users_next_thread() -> None:
    chats = convmem.InMemoryStore()
    memory = ConvMemNode(store=chats)
    seen: list[str] = []

    def chatbot(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        user_id = config["configurable"]["user_id"]
        fact = store.get(("convmem", user_id, "facts"), "pet_name")
        seen.append(fact.value["value"] if fact else "-")
        return {"messages": [memory.node(scripted("Noted.").invoke)(state, config)["messages"][-1]]}

    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", chatbot)
    builder.add_edge(START, "chatbot")
    graph = builder.compile(checkpointer=InMemorySaver(), store=ConvMemStore(chats))
    ana = {"configurable": {"thread_id": "ana-1", "user_id": "ana"}}
    graph.invoke({"messages": [HumanMessage("My dog is called Duoduo.")]}, ana)
    later = {"configurable": {"thread_id": "ana-2", "user_id": "ana"}}
    graph.invoke({"messages": [HumanMessage("What is my dog called?")]}, later)
    other = {"configurable": {"thread_id": "ben-1", "user_id": "ben"}}
    graph.invoke({"messages": [HumanMessage("What is my dog called?")]}, other)
    assert seen == ["-", "Duoduo", "-"]


async def test_a_state_graph_reads_the_store_asynchronously(logged: convmem.InMemoryStore) -> None:
    async def answer(state: MessagesState, *, store: BaseStore) -> dict[str, Any]:
        fact = await store.aget(FACTS, "city")
        return {"messages": [AIMessage(fact.value["value"] if fact else "?")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    graph = builder.compile(store=ConvMemStore(logged))
    results = await asyncio.gather(*(graph.ainvoke({"messages": [HumanMessage("where?")]}) for _ in range(3)))
    assert [result["messages"][-1].content for result in results] == ["Hangzhou"] * 3


def test_importing_the_package_does_not_import_langgraph() -> None:
    probe = "import sys, langchain_convmem\nprint('langgraph' in sys.modules)\n"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"

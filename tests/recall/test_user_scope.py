"""A user's sessions share facts and recall; users and session-only memories are walls.

Every test runs on every store (in-memory, a SQLite file, Redis, Redis Cluster,
PostgreSQL) through the public `ConversationMemory` API, as an app with a
"new chat" button uses it.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shared_stores import SERVER_KINDS, location_for
from unheard_subject import check_unheard_subject

from convmem import ConversationMemory, InMemoryStore, MemoryConfig, Recall, SQLiteStore, Store
from convmem._recall.embedder import BaseEmbedder

DAY = 86400.0
THEN = time.time() - 40 * DAY
# More sessions than a search could afford to read one by one, were it to screen them.
MANY_SESSIONS = 20


@pytest.fixture(params=["memory", "sqlite", *SERVER_KINDS])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "memory":
        yield InMemoryStore()
        return
    if request.param == "sqlite":
        with closing(SQLiteStore(tmp_path / "memory.db")) as sqlite_store:
            yield sqlite_store
        return
    location = location_for(request.param, request)
    with closing(location.open()) as server_store:
        yield server_store
    location.cleanup()


def context_text(memory: ConversationMemory, query: str | None = None, budget: int = 1024) -> str:
    """The text of a context for `query`, less the query itself."""
    context = memory.build_context(query, budget, include_query=False)
    return "\n".join(str(m["content"]) for m in context.messages)


def facts_section(text: str) -> str:
    """The lines of the facts section of a context's text ("" when there is none)."""
    if "Known facts about the user:" not in text:
        return ""
    return text.split("Known facts about the user:", 1)[1].split("</memory>", 1)[0].split("\n\n", 1)[0]


def chat(memory: ConversationMemory, *pairs: tuple[str, str], at: float | None = None) -> None:
    for user, assistant in pairs:
        memory.add_turn(user, assistant, timestamp=at)


# -- facts follow the user into a new chat ------------------------------------------------------


@pytest.mark.parametrize(
    ("statement", "query", "expected"),
    [
        ("I'm allergic to peanuts.", "Can you suggest a snack?", "peanut"),
        ("我对花生过敏。", "推荐一个零食吧", "花生"),
    ],
)
def test_a_fact_from_session_1_is_in_the_first_context_of_session_2_at_budget_300(
    store: Store, statement: str, query: str, expected: str
) -> None:
    first = ConversationMemory("chat-1", store, user_id="alice")
    chat(first, (statement, "Noted."))
    second = ConversationMemory("chat-2", store, user_id="alice")
    context = second.build_context(query, budget=300)
    assert context.token_count <= 300
    assert expected in "\n".join(str(m["content"]) for m in context.messages)
    # With no query, the facts alone.
    assert expected in context_text(second, None, 300)


def test_a_newer_value_from_any_session_supersedes_and_keeps_its_provenance(store: Store) -> None:
    first = ConversationMemory("chat-1", store, user_id="alice")
    chat(first, ("I live in Hangzhou. My name is Alice.", "Nice."), at=THEN)
    second = ConversationMemory("chat-2", store, user_id="alice")
    chat(second, ("I moved to Beijing last month.", "Exciting!"))
    for memory in (first, second, ConversationMemory("chat-3", store, user_id="alice")):
        facts = {fact.key: fact for fact in memory.facts()}
        assert facts["city"].value == "Beijing" and facts["city"].session_id == "chat-2"
        assert facts["name"].value == "Alice" and facts["name"].session_id == "chat-1"
        assert facts["city"].seq is not None and facts["city"].timestamp > THEN
    facts_lines = facts_section(context_text(first))
    assert "city: Beijing" in facts_lines and "Hangzhou" not in facts_lines


def test_a_negation_in_one_session_ends_a_value_stated_in_another(store: Store) -> None:
    first = ConversationMemory("chat-1", store, user_id="alice")
    chat(first, ("I live in Hangzhou.", "Nice."), at=THEN)
    second = ConversationMemory("chat-2", store, user_id="alice")
    chat(second, ("I no longer live in Hangzhou.", "I see."))
    assert "city" not in {fact.key for fact in second.facts()}
    assert "city" not in {fact.key for fact in first.facts()}


def test_forget_fact_is_user_wide(store: Store) -> None:
    first = ConversationMemory("chat-1", store, user_id="alice")
    chat(first, ("My name is Alice.", "Hello Alice."))
    second = ConversationMemory("chat-2", store, user_id="alice")
    chat(second, ("My name is Alice, as I said.", "Sure."))
    assert second.forget_fact("name") is True
    for memory in (first, second, ConversationMemory("chat-3", store, user_id="alice")):
        assert "name" not in {fact.key for fact in memory.facts()}
    assert second.forget_fact("name") is False


def test_forgetting_a_session_removes_the_facts_only_it_stated(store: Store) -> None:
    first = ConversationMemory("chat-1", store, user_id="alice")
    chat(first, ("My name is Alice. I'm allergic to peanuts.", "Noted."), at=THEN)
    second = ConversationMemory("chat-2", store, user_id="alice")
    chat(second, ("My name is Alice.", "Hi."))
    store.clear("chat-1")
    facts = {fact.key: fact for fact in ConversationMemory("chat-3", store, user_id="alice").facts()}
    assert "allergy:peanut" not in facts  # said only in the forgotten session
    assert facts["name"].value == "Alice" and facts["name"].session_id == "chat-2"


def test_forget_user_leaves_nothing_for_a_new_session_of_that_user(store: Store) -> None:
    chat(ConversationMemory("chat-1", store, user_id="alice"), ("My dog is called Rex.", "Cute."))
    assert sorted(store.forget_user("alice")) == ["chat-1"]
    fresh = ConversationMemory("chat-2", store, user_id="alice")
    assert fresh.facts() == []
    assert "Rex" not in context_text(fresh, "What is my dog called?")


def test_facts_can_stay_per_session(store: Store) -> None:
    chat(ConversationMemory("chat-1", store, user_id="alice"), ("My name is Alice.", "Hi."))
    private = ConversationMemory("chat-2", store, MemoryConfig(share_facts=False), user_id="alice")
    assert private.facts() == []
    assert "Alice" not in context_text(private)
    # Recall is still shared: the turn is found by its words.
    assert "Alice" in context_text(private, "What is my name, Alice?")


# -- recall over the user's earlier sessions -----------------------------------------------------


def test_recall_finds_an_earlier_session_with_its_date(store: Store) -> None:
    first = ConversationMemory("trip", store, user_id="alice")
    chat(
        first,
        ("We loved the night market in Tainan, the oyster omelette was amazing.", "Sounds great!"),
        at=THEN,
    )
    chat(first, ("Also the temples were beautiful.", "Indeed."), at=THEN + 60)
    second = ConversationMemory("today", store, user_id="alice")
    chat(second, ("How do I sort a list in Python?", "Use sorted()."))
    text = context_text(second, "Which dish did I love at the night market?", 600)
    assert "oyster omelette" in text
    # The other session's date line comes right before what was said then.
    before = text.split("oyster omelette")[0].rstrip().splitlines()
    date_line = before[-2] if before[-1].startswith("User:") else before[-1]
    assert date_line.startswith("[") and time.strftime("%Y", time.localtime(THEN)) in date_line


def test_recall_across_sessions_can_be_switched_off(store: Store) -> None:
    chat(
        ConversationMemory("trip", store, user_id="alice"),
        ("The oyster omelette in Tainan was amazing.", "Great!"),
    )
    own = ConversationMemory(
        "today", store, MemoryConfig(share_recall=False, extract_facts=False), user_id="alice"
    )
    chat(own, ("Hello there.", "Hi."))
    assert "oyster" not in context_text(own, "What was the oyster omelette like?")


def test_the_asking_sessions_turn_wins_a_tie(store: Store) -> None:
    chat(
        ConversationMemory("older", store, MemoryConfig(extract_facts=False), user_id="alice"),
        ("The parking code is 4821.", "Noted."),
    )
    current = ConversationMemory("current", store, MemoryConfig(extract_facts=False), user_id="alice")
    chat(current, ("The parking code is 4821.", "Noted."))
    for i in range(30):
        chat(current, (f"Filler question {i} about gardening tomatoes?", f"Water them well ({i})."))
    assert current.recall is not None
    result = current.recall.search(
        "current",
        "what is the parking code?",
        store=store,
        exclude_seqs=(),
        max_tokens=30,
        counter=current.counter,
        other_sessions=["older"],
    )
    assert result.items, result
    assert result.items[0].session_id is None  # the same words, the asking session first
    full = current.recall.search(
        "current",
        "what is the parking code?",
        store=store,
        exclude_seqs=(),
        max_tokens=400,
        counter=current.counter,
        other_sessions=["older"],
    )
    assert {item.session_id for item in full.items} == {None, "older"}
    older = next(item for item in full.items if item.session_id == "older")
    assert older.seqs == (1, 2) or older.seqs[0] == 1
    # Other sessions' items come first in the section, each session opening with its date.
    assert full.items[0].session_id == "older" and full.items[0].text.startswith("[")
    assert next(item for item in full.items if item.session_id is None).text.startswith("[")


def test_a_new_session_with_a_query_starts_warm(store: Store) -> None:
    chat(
        ConversationMemory("s1", store, user_id="alice"),
        ("I'm training for the Hangzhou marathon in April.", "Good luck!"),
    )
    fresh = ConversationMemory("s2", store, user_id="alice")
    assert "marathon" in context_text(fresh, "When is my marathon?", 300)


async def test_async_twins_share_too(store: Store) -> None:
    first = ConversationMemory("a1", store, user_id="alice")
    await first.aadd_turn("My favourite colour is teal.", "Noted!")
    second = ConversationMemory("a2", store, user_id="alice")
    assert any(fact.value == "teal" for fact in await second.afacts())
    context = await second.abuild_context("What is my favourite colour?", 300)
    assert "teal" in "\n".join(str(m["content"]) for m in context.messages)
    assert await second.aforget_fact("favourite:colour") or await second.aforget_fact("colour")


# -- walls ---------------------------------------------------------------------------------------


def test_another_user_and_a_session_without_a_user_see_nothing(store: Store) -> None:
    chat(
        ConversationMemory("alice-1", store, user_id="alice"),
        ("My name is Alice and my password hint is aubergine.", "Noted."),
    )
    chat(ConversationMemory("anon-1", store), ("My name is Zed, the hint is rhubarb.", "Ok."))
    for memory in (
        ConversationMemory("bob-1", store, user_id="bob"),
        ConversationMemory("anon-2", store),
    ):
        text = context_text(memory, "What is my name and my password hint? aubergine rhubarb")
        assert "aubergine" not in text and "Alice" not in text and "rhubarb" not in text
        assert memory.facts() == []
    # The session without a user keeps to itself, and alice never sees it.
    alice = ConversationMemory("alice-2", store, user_id="alice")
    assert "rhubarb" not in context_text(alice, "what is the hint rhubarb?")


@pytest.mark.parametrize(
    "other",
    [
        "Alice",
        "alice ",
        unicodedata.normalize("NFD", "alicé"),
        "alice%20",
        "alice\\",
    ],
)
def test_ids_that_differ_only_by_case_form_or_escaping_are_other_users(store: Store, other: str) -> None:
    name = "alicé" if "e\u0301" in other else "alice"
    chat(ConversationMemory("one", store, user_id=name), ("My dog is called Rex.", "Cute."))
    lookalike = ConversationMemory("two", store, user_id=other)
    assert lookalike.facts() == []
    assert "Rex" not in context_text(lookalike, "What is my dog called? Rex")


_words = st.lists(
    st.sampled_from(["apple", "river", "奶茶", "Rex", "teal", "北京", "piano", "4821"]),
    min_size=1,
    max_size=4,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(secrets=st.lists(_words, min_size=1, max_size=3), query=_words)
def test_no_text_of_one_user_ever_reaches_another(
    store: Store, secrets: list[list[str]], query: list[str]
) -> None:
    run = f"{time.monotonic_ns()}"
    marker = f"zq{run[-6:]}"
    for index, words in enumerate(secrets):
        memory = ConversationMemory(f"a-{run}-{index}", store, user_id=f"a-{run}")
        chat(memory, (f"My name is {marker}. I like {' '.join(words)} {marker}.", f"Noted {marker}."))
    question = " ".join(query) + f" {marker}?"
    for memory in (
        ConversationMemory(f"b-{run}", store, user_id=f"b-{run}"),
        ConversationMemory(f"n-{run}", store),
    ):
        chat(memory, ("Tell me about " + " ".join(query), "Sure."))
        context = memory.build_context(question, 2000, include_query=False)
        seen = [
            "\n".join(str(m["content"]) for m in context.messages),
            memory.render_transcript(),
            repr(memory.facts()),
        ]
        assert memory.recall is not None
        seen.append(
            memory.recall.search(
                memory.session_id, question, store=store, max_tokens=500, counter=memory.counter
            ).text
        )
        assert not any(marker in text for text in seen)


# -- many sessions: only the best-matching ones are searched in full ----------------------------


class Concepts(BaseEmbedder):
    """Vectors by concept, not by word: "canine" and "barks" meet, sharing no word."""

    _name = "concepts-test"

    def _embed(self, texts: list[str], *, query: bool) -> np.ndarray:
        rows = []
        for text in texts:
            lowered = text.lower()
            row = np.zeros(4, dtype=np.float32)
            if "canine" in lowered or "barks" in lowered:
                row[0] = 1.0
            elif "feline" in lowered:
                row[1] = 1.0
            else:
                row[2], row[3] = 1.0, 0.5
            rows.append(row)
        return np.stack(rows)


def test_a_request_in_passing_about_what_the_user_never_mentioned_brings_only_its_evidence(
    store: Store,
) -> None:
    check_unheard_subject(store)


def test_with_many_sessions_the_one_that_names_the_thing_is_found(store: Store) -> None:
    config = MemoryConfig(extract_facts=False)
    for number in range(MANY_SESSIONS):
        memory = ConversationMemory(f"s{number}", store, config, user_id="alice")
        chat(memory, (f"My locker code for the club is K{number:03d}.", "Noted."))
    chat(
        ConversationMemory("target", store, config, user_id="alice"),
        ("My locker code for the Kalomiru project is K999.", "Noted."),
    )
    fresh = ConversationMemory("new", store, config, user_id="alice")
    assert "K999" in context_text(fresh, "What is my locker code for the Kalomiru project?", 400)


def test_with_many_sessions_a_match_by_meaning_alone_is_found(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    recall = Recall(Concepts())
    config = MemoryConfig(extract_facts=False)
    for number in range(MANY_SESSIONS):
        memory = ConversationMemory(f"s{number}", store, config, user_id="alice", recall=recall)
        chat(memory, (f"Which animal shelter is open on day {number}?", "The one downtown."))
    target = ConversationMemory("target", store, config, user_id="alice", recall=recall)
    chat(target, ("Our canine friend is named Biscuit.", "What a good name."))
    fresh = ConversationMemory("new", store, config, user_id="alice", recall=recall)
    # A question about the user's own animals: a request that stands on its own needs its
    # words as well as its meaning found in one message (`gate.judge`).
    assert "Biscuit" in context_text(fresh, "Which of my animals barks at night?", 400)
    store.close()


def test_batched_reads_agree_with_one_read_per_session(store: Store) -> None:
    """What a store answers in one query (`user_session_stats`, `get_states`) is what one
    read per session gives; a store without them is read a session at a time."""
    from convmem._derived.records import FACTS_KEY
    from convmem._derived.user_scope import other_session_stats

    for name in ("a", "b", "c"):
        chat(
            ConversationMemory(f"alice-{name}", store, user_id="alice"),
            (f"My name is {name.upper()}x.", "Hi."),
        )
    chat(ConversationMemory("bob-a", store, user_id="bob"), ("My name is Bob.", "Hi."))
    chat(ConversationMemory("nobody", store), ("My name is Zed.", "Hi."))
    expected = [store.stats(s) for s in ("alice-b", "alice-c")]
    assert other_session_stats(store, "alice", "alice-a") == expected
    assert other_session_stats(store, "carol", "carol-1") == []
    batched = getattr(store, "get_states", None)
    if batched is not None:
        wanted = ["alice-a", "bob-a", "nobody", "missing"]
        assert batched(wanted, FACTS_KEY) == {
            s: record for s in wanted if (record := store.get_state(s, FACTS_KEY)) is not None
        }
        assert set(batched(wanted, FACTS_KEY)) == {"alice-a", "bob-a", "nobody"}
        assert batched([], FACTS_KEY) == {}


def test_a_statement_another_session_replaced_is_not_recalled_alone(store: Store) -> None:
    old = ConversationMemory("spring", store, user_id="alice")
    chat(old, ("I live in Hangzhou near the lake.", "Lovely city."), at=THEN)
    new = ConversationMemory("autumn", store, user_id="alice")
    chat(new, ("I moved to Beijing.", "Big change!"), at=THEN + 100 * DAY)
    asking = ConversationMemory("today", store, user_id="alice")
    recalled = asking.build_context("Do I live near the lake in Hangzhou?", 600).recalled
    texts = [item.text for item in recalled]
    assert not any("Hangzhou" in text for text in texts) or any("Beijing" in text for text in texts)
    # Without the newer statement's session, the old one is all there is, and it is recalled.
    store.clear("autumn")
    recalled = asking.build_context("Do I live near the lake in Hangzhou?", 600).recalled
    assert any("Hangzhou" in item.text and item.session_id == "spring" for item in recalled)


class CountingStore(InMemoryStore):
    """An InMemoryStore that counts whole-log reads, per session."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: dict[str, int] = {}

    def messages(self, session_id: str, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        self.reads[session_id] = self.reads.get(session_id, 0) + 1
        return super().messages(session_id, *args, **kwargs)  # type: ignore[arg-type]


def test_memories_of_one_store_share_recall_so_a_new_chat_reads_no_log_again() -> None:
    store = CountingStore()
    earlier = ConversationMemory("monday", store, user_id="ada")
    earlier.add_turn("My locker code is K123.", "Noted.")
    earlier.add_turn("I keep my bike in the basement.", "Good to know.")
    assert "K123" in str(earlier.build_context(query="what is my locker code?").messages)
    reads = dict(store.reads)

    new_chat = ConversationMemory("tuesday", store, user_id="ada")
    assert new_chat.recall is earlier.recall  # by words, one Recall per store
    assert "K123" in str(new_chat.build_context(query="what is my locker code?").messages)
    assert store.reads.get("monday", 0) == reads.get("monday", 0)  # found as already mirrored

    other_store = CountingStore()
    elsewhere = ConversationMemory("tuesday", other_store, user_id="ada")
    assert elsewhere.recall is not earlier.recall
    assert "K123" not in str(elsewhere.build_context(query="what is my locker code?").messages)
    bob = ConversationMemory("bob-chat", store, user_id="bob")
    assert "K123" not in str(bob.build_context(query="what is my locker code?").messages)


def test_a_forked_child_gets_its_own_shared_recall() -> None:
    """A lock a parent thread holds at a fork is never released in the child: the child's
    memories must not use the parent's shared recall."""
    import os

    store = InMemoryStore()
    parent = ConversationMemory("s", store).recall
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            same = ConversationMemory("t", store).recall is parent
            os.write(write, b"same" if same else b"own")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 16)
    os.close(read)
    os.waitpid(child, 0)
    assert answer == b"own"
    assert ConversationMemory("u", store).recall is parent  # the parent keeps its own

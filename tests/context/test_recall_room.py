"""How much of a build recall may take: its share, and what a short chat leaves unused only
when the query points to the past."""

from __future__ import annotations

from pathlib import Path

from convmem import ConversationMemory, SQLiteStore

# An old chat of the user's about long bike rides, with the assistant's long answers.
RIDES = [
    ("user", "I do long bike rides on weekends and eat Clif Bars on the way."),
    (
        "assistant",
        "Clif Bars are a fine choice for long bike rides. "
        + "Carbohydrates every forty minutes keep your energy steady on a long ride. " * 30,
    ),
    ("user", "My long bike rides usually take four hours, mostly hills."),
    (
        "assistant",
        "Four hours of hills on a long bike ride calls for a plan. "
        + "Pace the climbs, drink before you are thirsty and eat before you are hungry. " * 30,
    ),
]


def _memory(tmp_path: Path) -> tuple[SQLiteStore, ConversationMemory]:
    store = SQLiteStore(tmp_path / "m.db")
    old = ConversationMemory("old-chat", store, user_id="u")
    old.add_messages([{"role": role, "content": text} for role, text in RIDES])
    return store, ConversationMemory("new-chat", store, user_id="u")


def test_a_request_that_does_not_point_to_the_past_keeps_recall_to_its_share(tmp_path: Path) -> None:
    # A new chat has no turns for the window: a request that memory only may help gets
    # recall's share, not the whole budget filled with long old answers.
    store, memory = _memory(tmp_path)
    with store:
        built = memory.build_context(query="What should I eat before I go for a long bike ride?", budget=2048)
        recall = built.section("recall")
        assert "default split: 25% to recall" in recall.note
        assert recall.cap is not None and recall.cap <= 0.25 * 2048
        assert 0 < recall.tokens <= recall.cap
        assert "Clif Bars" in built.memory_text
        assert built.token_count < 0.4 * 2048, built.explain()
        assert "the rest stays unused: recall keeps to its share" in built.section("window").note


def test_a_question_about_the_past_takes_what_the_window_leaves(tmp_path: Path) -> None:
    store, memory = _memory(tmp_path)
    with store:
        built = memory.build_context(query="What did I say I eat on my long bike rides?", budget=2048)
        recall = built.section("recall")
        assert "query points to the past" in recall.note
        assert recall.cap is not None and recall.cap > 0.9 * 2048, built.explain()
        assert recall.items == 4 and "four hours" in built.memory_text, built.explain()
        assert "unused" not in built.section("window").note


def test_the_window_row_says_the_room_is_unused_only_when_recall_kept_to_its_share(tmp_path: Path) -> None:
    # A request that recalls nothing leaves the room unused whatever its share: the row
    # does not blame the share for it.
    store, memory = _memory(tmp_path)
    with store:
        built = memory.build_context(query="Write a haiku about the first snowfall.", budget=2048)
        assert built.section("recall").tokens == 0
        assert "unused" not in built.section("window").note, built.explain()

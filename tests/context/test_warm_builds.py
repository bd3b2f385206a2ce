"""Builds of a returning user's session reuse what they read, and never serve it stale.

A memory keeps between builds what has not changed (the facts of the user's
sessions, the recalled candidates' rows and messages, the window): every write
that another memory or another process (a second store object) makes to any
session of the user shows in the next build: an append, an edit, a deletion, a
session forgotten, a fact stated or forgotten.
"""

from __future__ import annotations

from convmem import ConversationMemory, Message, Store

QUESTION = "Which bike do I ride to work?"


def _memory_text(memory: ConversationMemory, query: str = QUESTION) -> str:
    return memory.build_context(query=query, budget=1500).memory_text


def _earlier_session(store: Store) -> ConversationMemory:
    """An earlier chat of user "u": the bike among small talk."""
    earlier = ConversationMemory("earlier", store, user_id="u")
    earlier.add_turn("I ride a red Trek bike to work every day.", "That is a solid commuter choice.")
    earlier.add_turn("The weather in Lyon was grey all week.", "Grey weeks happen in autumn there.")
    earlier.add_turn("I am reading a novel about sailors.", "Sea stories make good winter reading.")
    earlier.flush()
    return earlier


def test_an_unchanged_history_builds_the_same_context_again(two_handles: tuple[Store, Store]) -> None:
    mine, theirs = two_handles
    _earlier_session(theirs)
    memory = ConversationMemory("new", mine, user_id="u")
    first = memory.build_context(query=QUESTION, budget=1500)
    assert "red Trek" in first.memory_text
    again = memory.build_context(query=QUESTION, budget=1500)
    assert again.messages == first.messages and again.token_count == first.token_count


def test_every_write_to_another_session_of_the_user_shows_in_the_next_build(
    two_handles: tuple[Store, Store],
) -> None:
    mine, theirs = two_handles
    earlier = _earlier_session(theirs)
    memory = ConversationMemory("new", mine, user_id="u")
    assert "red Trek" in _memory_text(memory)

    # An edit elsewhere: the recalled line is the new text, never the old one.
    theirs.replace_message(
        "earlier", 1, Message.create("user", "I ride a blue Giant bike to work every day.")
    )
    text = _memory_text(memory)
    assert "blue Giant" in text and "red Trek" not in text

    # An append elsewhere is recalled by the next build.
    earlier.add_turn("I also bought a green Cannondale bike for the weekends.", "Two bikes, nice.")
    earlier.flush()
    assert "green Cannondale" in _memory_text(memory, "Which Cannondale bike did I buy?")

    # A deletion elsewhere: the deleted text is gone.
    theirs.delete_messages("earlier", [1])
    assert "blue Giant" not in _memory_text(memory)

    # The session forgotten: nothing of it is left.
    theirs.clear("earlier")
    text = _memory_text(memory, "Which Cannondale bike did I buy?")
    assert "Cannondale" not in text and "Trek" not in text


def test_facts_stated_or_forgotten_in_another_session_show_in_the_next_build(
    two_handles: tuple[Store, Store],
) -> None:
    mine, theirs = two_handles
    memory = ConversationMemory("new", mine, user_id="u")
    memory.add_turn("Hello there.", "Hi! How can I help?")
    assert "Ana" not in _memory_text(memory, "What is my name?")

    elsewhere = ConversationMemory("profile", theirs, user_id="u")
    elsewhere.add_turn("My name is Ana.", "Nice to meet you, Ana.")
    elsewhere.flush()
    assert "Ana" in _memory_text(memory, "What is my name?")

    ConversationMemory("profile", theirs, user_id="u").forget_fact("name")
    assert "name: Ana" not in _memory_text(memory, "What is my name?")


async def test_async_builds_see_writes_elsewhere_as_sync_builds_do(two_handles: tuple[Store, Store]) -> None:
    mine, theirs = two_handles
    _earlier_session(theirs)
    memory = ConversationMemory("new", mine, user_id="u")
    assert "red Trek" in (await memory.abuild_context(query=QUESTION, budget=1500)).memory_text
    theirs.replace_message(
        "earlier", 1, Message.create("user", "I ride a blue Giant bike to work every day.")
    )
    text = (await memory.abuild_context(query=QUESTION, budget=1500)).memory_text
    assert "blue Giant" in text and "red Trek" not in text


def test_a_fact_restated_in_another_session_replaces_the_one_the_last_build_showed(
    two_handles: tuple[Store, Store],
) -> None:
    mine, theirs = two_handles
    memory = ConversationMemory("new", mine, user_id="u")
    profile = ConversationMemory("profile", theirs, user_id="u")
    profile.add_turn("My name is Ana.", "Nice to meet you, Ana.")
    profile.flush()
    assert "name: Ana" in _memory_text(memory, "What is my name?")

    later = ConversationMemory("later", theirs, user_id="u")
    later.add_turn("My name is Bea.", "Nice to meet you, Bea.")
    later.flush()
    text = _memory_text(memory, "What is my name?")
    assert "name: Bea" in text and "name: Ana" not in text

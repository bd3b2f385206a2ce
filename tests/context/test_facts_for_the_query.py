"""Facts about the user go into a context when the query is about the user, or shares a
word with the fact: a request that needs no memory gets none, and explain() says why."""

from __future__ import annotations

import pytest

from convmem import ConversationMemory


@pytest.fixture
def ana() -> ConversationMemory:
    memory = ConversationMemory("chat", user_id="ana")
    memory.add_turn("My name is Ana and I live in Porto. I love French food.", "Nice to meet you, Ana!")
    assert len(memory.facts()) >= 3
    return memory


@pytest.mark.parametrize(
    "request_text", ["Write a haiku about autumn.", "Explain quicksort in two lines.", "写一首关于秋天的诗。"]
)
def test_a_request_that_needs_no_memory_gets_no_facts(ana: ConversationMemory, request_text: str) -> None:
    context = ana.build_context(request_text, budget=400)
    assert context.section("facts").items == 0
    assert "not about the user" in context.section("facts").note
    assert "Porto" not in (context.memory_text or "")


@pytest.mark.parametrize(
    "question",
    ["What should I cook tonight?", "Where do I live?", "我住在哪里？", "What did I tell you last time?"],
)
def test_a_question_about_the_user_gets_every_fact(ana: ConversationMemory, question: str) -> None:
    context = ana.build_context(question, budget=400)
    assert context.section("facts").items == len(ana.facts())
    assert context.section("facts").note == ""


def test_a_build_without_a_query_shows_the_facts(ana: ConversationMemory) -> None:
    assert ana.build_context(None, budget=400).section("facts").items == len(ana.facts())


def test_a_request_that_names_what_a_fact_is_about_gets_that_fact(ana: ConversationMemory) -> None:
    context = ana.build_context("Is French food healthy?", budget=400)
    assert context.section("facts").items == 1
    assert "french food" in context.memory_text.lower() and "Porto" not in context.memory_text


@pytest.mark.parametrize(
    "request_text",
    [
        "Translate 'I love French food' into Spanish.",
        'Proofread this: "Ana lives in Porto and loves French food."',
        "翻译成英文：我住在波尔图，喜欢法国菜。",
    ],
)
def test_the_text_a_request_works_on_brings_no_facts(ana: ConversationMemory, request_text: str) -> None:
    """What a request quotes, or translates after a colon, is its material, not its subject."""
    context = ana.build_context(request_text, budget=400)
    assert context.section("facts").items == 0
    assert "not about the user" in context.section("facts").note

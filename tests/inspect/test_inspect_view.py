"""The view of a built context: the facts every surface of the inspector draws."""

from __future__ import annotations

import re

import pytest
from inspector_data import ANA_PORTO, HOSTILE_TEXT

from convmem import BuiltContext, ConversationMemory, MemoryConfig
from convmem._inspect.html import render_html
from convmem._inspect.view import RecallRow, context_view, shared_words

QUESTION = "What is my dog called?"


@pytest.fixture
def context() -> BuiltContext:
    """A build in which the window cannot hold the turn that names the dog, so recall brings it."""
    memory = ConversationMemory("s", config=MemoryConfig(system_prompt="Be brief."))
    for user, assistant in ANA_PORTO * 3:
        memory.add_turn(user, assistant)
    built = memory.build_context(query=QUESTION, budget=260)
    memory.close()
    return built


def test_the_bar_spends_exactly_the_budget(context: BuiltContext) -> None:
    view = context_view(context)
    assert sum(segment.tokens for segment in view.segments) == context.budget
    assert view.used == context.token_count and view.free == context.budget - context.token_count
    assert view.segments[-1].name == "free"


def test_the_bar_keeps_prompt_order_and_skips_empty_sections(context: BuiltContext) -> None:
    names = [segment.name for segment in context_view(context).segments]
    reported = [s.name for s in context.sections if s.tokens > 0]
    assert names == [*reported, "free"]


def test_every_message_is_labelled_with_its_section(context: BuiltContext) -> None:
    view = context_view(context)
    assert [row.text for row in view.messages][-1] == QUESTION
    sections = [row.section for row in view.messages]
    assert sections[0] == "system" and sections[1] == "memory" and sections[-1] == "query"
    assert sections[2:-1] == ["window"] * len(context.window)
    window_rows = [row for row in view.messages if row.section == "window"]
    assert [row.seq for row in window_rows] == [m.seq for m in context.window]
    assert [row.tokens for row in window_rows] == [m.token_count for m in context.window]


def test_a_recalled_item_says_which_query_words_it_holds(context: BuiltContext) -> None:
    view = context_view(context)
    pico = next(row for row in view.recalled if "Pico" in row.text)
    assert pico.words == ("called",)
    assert pico.why == "shares 'called' with the query"
    assert pico.session == "this session"
    assert pico.score == pytest.approx(next(i.score for i in context.recalled if "Pico" in i.text))
    assert re.fullmatch(r"\d{1,2} \w+ \d{4}", pico.date), pico.date


def test_the_left_out_list_is_what_the_build_dropped(context: BuiltContext) -> None:
    view = context_view(context)
    assert [(d.section, d.what, d.tokens, d.reason) for d in view.left_out] == [
        (d.section, d.what, d.tokens, d.reason) for d in context.dropped
    ]
    assert view.left_out, "the budget is too small for the whole log"


def test_shared_words_match_by_stem_and_keep_the_query_spelling() -> None:
    assert shared_words("Where are my dogs walking?", "I walked the dog by the river") == ("dogs", "walking")
    assert shared_words("What is my name?", "I like tea") == ()


def test_shared_words_show_the_cjk_characters_and_pairs_in_common() -> None:
    assert shared_words("我的狗叫什么名字？", "我养了一只狗，名字叫多多") == ("狗", "叫", "名", "字", "名字")


def test_a_reason_without_shared_words_says_how_else_an_item_is_found() -> None:
    row = RecallRow((3,), "this session", "1 May 2024", 0.61, 12, "Ana: I adopted Pico.", ())
    assert row.why == "no word in common with the query: found by meaning, or as a neighbour of a match"


def test_html_escapes_stored_text_and_carries_no_script() -> None:
    memory = ConversationMemory("s")
    memory.add_turn(HOSTILE_TEXT, "No.")
    page = render_html(memory.build_context(query="hi", budget=300))
    assert "<script" not in page
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in page
    assert "&lt;b&gt;bold?&lt;/b&gt;" in page


def test_the_notebook_display_is_the_inspector_picture(context: BuiltContext) -> None:
    page = context._repr_html_()
    assert page == render_html(context)
    assert 'class="cm-bar"' in page
    for segment in context_view(context).segments:
        assert f"cm-seg-{segment.name}" in page


def test_plain_repr_stays_short_while_the_notebook_gets_the_picture() -> None:
    memory = ConversationMemory("repr")
    for index in range(30):
        memory.add_turn(f"Question {index} about my sourdough starter?", f"Answer {index}: feed it daily.")
    context = memory.build_context("What do I feed the starter?", budget=300)
    text = repr(context)
    assert text.startswith("<BuiltContext ") and len(text) < 120
    assert f"{context.token_count} of 300 tokens" in text
    assert "<svg" in context._repr_html_() or "<div" in context._repr_html_()

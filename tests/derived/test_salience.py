"""Salience: small talk, low-information turns and the information value of a sentence."""

from __future__ import annotations

import pytest

from convmem import Message
from convmem._models import Role
from convmem._salience import conversation_messages, information_value, is_filler


@pytest.mark.parametrize(
    "text", ["thanks", "Thanks!!", "ok, thanks", "好的，谢谢", "你好！", "  ", "Thanks! Bye."]
)
def test_stock_replies_are_filler_at_both_granularities(text: str) -> None:
    assert is_filler(text)
    assert is_filler(text, stock_phrases_only=True)


@pytest.mark.parametrize("text", ["thank you very much", "no", "对", "How can I help you today?"])
def test_small_talk_beyond_the_stock_replies_is_filler_only_by_default(text: str) -> None:
    assert is_filler(text)
    assert not is_filler(text, stock_phrases_only=True)


@pytest.mark.parametrize("text", ["My dog is called Duoduo", "我住在北京", "ok, my name is Alice"])
def test_text_with_content_is_never_filler(text: str) -> None:
    assert not is_filler(text)
    assert not is_filler(text, stock_phrases_only=True)


def test_small_talk_is_worth_nothing_and_facts_about_the_user_most() -> None:
    assert information_value("Thanks so much!", Role.USER) == 0.0
    about_me = information_value("I live in Beijing with my dog.", Role.USER)
    restated = information_value("You live in Beijing with your dog.", Role.ASSISTANT)
    assert about_me > restated > 0


def test_conversation_leaves_out_system_messages_and_unfinished_answers() -> None:
    messages = [
        Message.create("system", "Be brief."),
        Message.create("user", "Hi, I'm Alice."),
        Message.create("assistant", "Hello Alice", status="failed"),
        Message.create("assistant", "Hello Alice!"),
    ]
    assert [m.text for m in conversation_messages(messages)] == ["Hi, I'm Alice.", "Hello Alice!"]

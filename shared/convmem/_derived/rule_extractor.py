"""The offline fact extractor: English and Chinese rules over what the user says of themselves."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .._language import check_language, speaker_name, split_sentences
from .._models import Message, Role
from .._salience import check_messages
from .facts import Fact, source_quote

if TYPE_CHECKING:
    from .fact_rules import RuleTable, Said

__all__ = ["RuleFactExtractor"]

# The rule extractor reads only this much of each message. The rules cost time
# in proportion to the text (a 10 MB paste took seconds inside `add`), while
# facts about the user are stated in conversation, not deep inside a pasted
# document or log.
_RULE_SCAN_CHARS = 20_000


def _facts_from(message: Message, said: Iterable[Said], source: str) -> list[Fact]:
    quote = source_quote(source)
    speaker = speaker_name(message)
    return [
        Fact(
            key,
            value,
            seq=message.seq,
            timestamp=message.timestamp,
            source=quote,
            negated=negated,
            speaker=speaker,
        )
        for key, value, negated in said
    ]


def _sentences_to_scan(text: str) -> list[str]:
    """The sentences of the first `_RULE_SCAN_CHARS` characters of `text`, quoted speech emptied,
    up to where text handed over for a task begins."""
    from .fact_rules import handed_over_at, strip_quoted_speech  # loaded on first use: see RuleFactExtractor

    scanned = text[:_RULE_SCAN_CHARS]
    handed_over = handed_over_at(scanned)
    if handed_over is not None:
        scanned = scanned[:handed_over]
    sentences = split_sentences(strip_quoted_speech(scanned).replace("’", "'"))
    if handed_over is None and len(text) > _RULE_SCAN_CHARS and sentences:
        # The cut may fall inside a sentence; half a sentence can state a wrong fact ("I live in New").
        sentences.pop()
    return sentences


class RuleFactExtractor:
    """The offline default: English and Chinese patterns over the user's own messages.

    Recognizes names (``my name is``, ``call me``, ``I'm Alice``, 我叫, 叫我), where
    the user lives (``I live in``, ``I moved to``, 我住在, 我搬到了) and comes from
    (``I'm from``, 我来自, 我是广东人), favourites (``my favourite colour is``,
    我最喜欢的颜色是), likes and dislikes (``I like/love/prefer``, ``I don't
    like/hate``, 我喜欢, 我不喜欢, 我讨厌), pets and their names (``my dog Rex``,
    ``I have a cat named Luna``, 我的狗叫多多, 我养了一只猫。它叫咪咪), family
    members' names (``my sister Anna``, 我妈妈叫王芳), work (``I work at Acme as a
    data engineer``, 我在腾讯当产品经理), age, birthday, allergies (``I'm allergic
    to peanuts``, 我对花生过敏), diets (``I'm vegetarian``, 我吃素) and languages
    (``I speak French``, 我会说日语). Statements that a value no longer holds
    ("I no longer live in Berlin", 我不再吃素了) come back as negated facts.

    Precision over recall: questions, hypotheticals ("if I lived in Paris",
    "assume my name is..."), plans, stories, past states ("I used to live in"),
    other people ("my friend is allergic to nuts", 他叫小明), quoted and reported
    speech ("he said 'I live in Rome'") and text handed over for a task ("Reply
    to this review: I'm 43...") are not facts about the user and are ignored; so
    is liking what the chat just offered ("I like the idea of...", "I love the
    third option", 我喜欢第二个方案), every message that tries to instruct the
    model, and any value that is long, spans lines or holds control characters
    or markup. Only user messages are
    read, and of each only the first 20,000 characters.

    In a chat of several people a fact belongs to whoever stated it: a user
    message with a ``name`` (LangChain's ``HumanMessage(name=...)``, each friend
    of a group chat) gives facts with that `Fact.speaker`; a message without
    one speaks for the user, as before.
    """

    def __init__(self, language: str = "auto") -> None:
        self.language = check_language(language)

    @functools.cached_property
    def _rules(self) -> RuleTable:
        """The rule table, built on the first extraction, not with the extractor: its
        patterns take tens of milliseconds to compile, and a returning user's first
        context, built before anything is added, needs none of them."""
        from .fact_rules import RuleTable

        return RuleTable.for_language(self.language)

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        """Facts stated in the user messages of `messages`, in the order stated."""
        from .fact_rules import carries_instructions, is_question, pet_name_following

        facts: list[Fact] = []
        for message in check_messages(messages):
            if message.role is not Role.USER or carries_instructions(message.text[:_RULE_SCAN_CHARS]):
                continue
            pet_without_name = False
            for sentence in _sentences_to_scan(message.text):
                if is_question(sentence):
                    continue
                said = self._rules.find(sentence)
                keys = {key for key, _, negated in said if not negated}
                if pet_without_name and not said:
                    name = pet_name_following(sentence)
                    if name:
                        said = [("pet_name", name, False)]
                        keys = {"pet_name"}
                if said:
                    pet_without_name = "pet" in keys and "pet_name" not in keys
                facts.extend(_facts_from(message, said, sentence))
        return facts

    async def aextract(self, messages: Sequence[Message]) -> list[Fact]:
        """Same as :meth:`extract`; it does no I/O, so it runs inline."""
        return self.extract(messages)

"""Core facts about the user: small key/value statements that outlive the window.

A :class:`FactExtractor` turns messages into :class:`Fact` objects
(``name = Alice``, ``city = Beijing``, ``preference:coffee = likes``); a
:class:`FactBook` holds a session's facts. A newer value for a key supersedes
the older one (a user who moved from Hangzhou to Beijing lives in Beijing) and
every value stays in the key's history. A negated fact ("I no longer live in
Beijing") ends the value it names: the key has no current value until the user
states a new one, and the negation stays in the history as its provenance.

Two extractors: :class:`RuleFactExtractor` (here, the offline default: English
and Chinese patterns from :mod:`convmem._fact_rules` over the user's own
messages, precision over recall) and :class:`~convmem._llm.LLMFactExtractor`
(any model behind a ``complete(prompt) -> str`` callable, answering in JSON).
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import re
import threading
import time
import unicodedata
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .._errors import InvalidMessageError, StoreError
from .._language import LABEL_SEPARATORS, TRIM_CHARS, check_language, split_sentences
from .._models import Message, Role
from .._salience import check_messages

if TYPE_CHECKING:
    from .fact_rules import Said

__all__ = [
    "Fact",
    "FactBook",
    "FactExtractor",
    "RuleFactExtractor",
]

_SOURCE_CHARS = 160
# The rule extractor reads only this much of each message. The rules cost time
# in proportion to the text (a 10 MB paste took seconds inside `add`), while
# facts about the user are stated in conversation, not deep inside a pasted
# document or log.
_RULE_SCAN_CHARS = 20_000


def normalize_key(key: str) -> str:
    """``"Pet Name"`` -> ``"pet_name"``; ``"Preference: Green Tea"`` -> ``"preference:green tea"``."""
    key = key.strip().lower()
    if ":" in key:
        head, tail = key.split(":", 1)
        return re.sub(r"[\s\-]+", "_", head.strip()) + ":" + " ".join(tail.split())
    return re.sub(r"[\s\-]+", "_", key)


def _comparable(value: str) -> str:
    return " ".join(value.casefold().split()).strip(TRIM_CHARS)


def _same_value(first: str, second: str) -> bool:
    return _comparable(first) == _comparable(second)


def _same_statement(first: Fact, second: Fact) -> bool:
    return first.negated == second.negated and _same_value(first.value, second.value)


HISTORY_KEPT = 32
"""Statements kept per key (the newest): the book is read on every build, and a value that
keeps changing must not grow it with the length of the conversation."""


def _live(history: list[Fact]) -> Fact | None:
    """The key's current value: its newest entry, unless that entry is a negation."""
    return history[-1] if history and not history[-1].negated else None


@dataclasses.dataclass(frozen=True)
class Fact:
    """One thing known about the user, and where it came from.

    ``key`` is normalized (lowercase, snake_case before a ``:``), e.g.
    ``"name"``, ``"city"``, ``"pet_name"``, ``"preference:coffee"``; free keys
    are allowed. ``seq`` is the seq of the message that stated it, ``source``
    a short quote of that message, and ``session_id`` the session it was said
    in (set on the facts a memory shares across a user's sessions; ``None`` in
    a session's own book, where the session is implied). ``negated`` marks a statement that the
    value no longer holds (``Fact("diet", "vegetarian", negated=True)`` for
    "I'm not vegetarian anymore").

    >>> Fact("Pet Name", "Duoduo", seq=12).key
    'pet_name'
    """

    key: str
    value: str
    seq: int | None = None
    timestamp: float = dataclasses.field(default_factory=time.time)
    source: str | None = None
    negated: bool = False
    session_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not normalize_key(self.key).strip(":_"):
            raise InvalidMessageError(f"a fact key must be a non-empty str, got {self.key!r}")
        if not isinstance(self.value, str) or not self.value.strip():
            raise InvalidMessageError(
                f"the value of fact {self.key!r} must be a non-empty str, got {self.value!r}"
            )
        if self.seq is not None and (
            isinstance(self.seq, bool) or not isinstance(self.seq, int) or self.seq < 0
        ):
            raise InvalidMessageError(f"a fact's seq must be a non-negative int or None, got {self.seq!r}")
        if (
            isinstance(self.timestamp, bool)
            or not isinstance(self.timestamp, (int, float))
            or not math.isfinite(self.timestamp)
        ):
            raise InvalidMessageError(f"a fact's timestamp must be epoch seconds, got {self.timestamp!r}")
        if self.source is not None and not isinstance(self.source, str):
            raise InvalidMessageError(f"a fact's source must be a str or None, got {self.source!r}")
        if not isinstance(self.negated, bool):
            raise InvalidMessageError(f"a fact's negated flag must be a bool, got {self.negated!r}")
        if self.session_id is not None and not isinstance(self.session_id, str):
            raise InvalidMessageError(
                f"a fact's session_id must be a str or None, got {self.session_id!r:.60}"
            )
        object.__setattr__(self, "key", normalize_key(self.key))
        object.__setattr__(self, "value", self.value.strip())
        object.__setattr__(self, "timestamp", float(self.timestamp))

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if not self.negated:
            del data["negated"]  # the common case keeps the layout stored before negations existed
        if self.session_id is None:
            del data["session_id"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fact:
        """The inverse of :meth:`to_dict`; raises `InvalidMessageError` on a bad field."""
        if not isinstance(data, dict) or "key" not in data or "value" not in data:
            raise InvalidMessageError(f"a fact needs 'key' and 'value', got {data!r:.80}")
        return cls(
            key=data["key"],
            value=data["value"],
            seq=data.get("seq"),
            timestamp=data.get("timestamp", 0.0),
            source=data.get("source"),
            negated=data.get("negated", False),
            session_id=data.get("session_id"),
        )


@runtime_checkable
class FactExtractor(Protocol):
    """Turns messages into facts about the user.

    Implement both methods (``aextract`` may call ``extract`` when there is no
    I/O). Facts come back in the order they were stated, each with the seq and
    timestamp of its message, so a later fact for the same key supersedes an
    earlier one when a :class:`FactBook` applies them.
    """

    def extract(self, messages: Sequence[Message]) -> list[Fact]: ...

    async def aextract(self, messages: Sequence[Message]) -> list[Fact]: ...


def source_quote(text: str) -> str:
    """`text` on one line, cut to a short quote: where a fact came from."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _SOURCE_CHARS else flat[: _SOURCE_CHARS - 1] + "…"


def _facts_from(message: Message, said: Iterable[Said], source: str) -> list[Fact]:
    quote = source_quote(source)
    return [
        Fact(key, value, seq=message.seq, timestamp=message.timestamp, source=quote, negated=negated)
        for key, value, negated in said
    ]


def _sentences_to_scan(text: str) -> list[str]:
    """The sentences of the first `_RULE_SCAN_CHARS` characters of `text`, quoted speech emptied."""
    from .fact_rules import strip_quoted_speech  # loaded on first use: see RuleFactExtractor

    sentences = split_sentences(strip_quoted_speech(text[:_RULE_SCAN_CHARS]).replace("’", "'"))
    if len(text) > _RULE_SCAN_CHARS and sentences:
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

    Precision over recall: questions, hypotheticals ("if I lived in Paris"),
    plans, stories, past states ("I used to live in"), other people ("my friend
    is allergic to nuts", 他叫小明), quoted and reported speech ("he said 'I live
    in Rome'") are not facts about the user and are ignored; so is every
    message that tries to instruct the model, and any value that is long,
    spans lines or holds control characters or markup. Only user messages are
    read, and of each only the first 20,000 characters.
    """

    def __init__(self, language: str = "auto") -> None:
        # The rule tables compile over a hundred patterns, most of `import convmem`'s
        # time: they load with the first extractor, not with the package.
        from .fact_rules import RuleTable

        self.language = check_language(language)
        self._table = RuleTable.for_language(self.language)

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
                said = self._table.find(sentence)
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


# --------------------------------------------------------------------------- fact book

_KEY_LABELS = {
    "name": ("name", "名字"),
    "city": ("city", "所在城市"),
    "hometown": ("hometown", "家乡"),
    "age": ("age", "年龄"),
    "birthday": ("birthday", "生日"),
    "birth_year": ("birth year", "出生年份"),
    "job": ("job", "职业"),
    "employer": ("employer", "工作单位"),
    "workplace": ("workplace", "工作地点"),
    "diet": ("diet", "饮食"),
    "pet": ("pet", "宠物"),
    "pet_name": ("pet name", "宠物名字"),
    "mother": ("mother", "妈妈"),
    "father": ("father", "爸爸"),
    "sister": ("sister", "姐妹"),
    "older_sister": ("older sister", "姐姐"),
    "younger_sister": ("younger sister", "妹妹"),
    "brother": ("brother", "兄弟"),
    "older_brother": ("older brother", "哥哥"),
    "younger_brother": ("younger brother", "弟弟"),
    "wife": ("wife", "妻子"),
    "husband": ("husband", "丈夫"),
    "spouse": ("spouse", "爱人"),
    "partner": ("partner", "伴侣"),
    "boyfriend": ("boyfriend", "男朋友"),
    "girlfriend": ("girlfriend", "女朋友"),
    "son": ("son", "儿子"),
    "daughter": ("daughter", "女儿"),
    "grandmother": ("grandmother", "祖母"),
    "grandfather": ("grandfather", "祖父"),
}
# "<prefix>:<thing> = <value>" keys: the label that the value stands for, put before the thing
# ("dislikes: coffee", "allergic to: peanut", "母语：粤语").
_VALUE_LABELS = {
    "preference": {
        "likes": ("likes", "喜欢"),
        "loves": ("loves", "喜爱"),
        "prefers": ("prefers", "偏好"),
        "dislikes": ("dislikes", "不喜欢"),
        "hates": ("hates", "讨厌"),
    },
    "allergy": {"allergic": ("allergic to", "过敏")},
    "language": {
        "speaks": ("speaks", "会说"),
        "native": ("native language", "母语"),
        "learning": ("learning", "在学"),
    },
}
# "<prefix>:<thing> = <value>" keys whose label is made from the thing ("favourite colour: teal").
_THING_LABELS = {"favourite": ("favourite {}", "最喜欢的{}")}
# Format 2 is format 1 plus negated entries in a history. A book is written as
# format 1 until it holds a negation, so a convmem that predates negations keeps
# reading it, and refuses a book it would misread (a negated value as current).
_FACTBOOK_FORMAT = 1
_FACTBOOK_FORMAT_WITH_NEGATIONS = 2


class FactBook:
    """A session's facts: the current value of each key, newest first, with history.

    Thread-safe. ``apply`` folds in extracted facts: a new value for a key
    supersedes the current one and joins its history; the same value again
    (ignoring case, spacing and end punctuation) changes nothing; a fact from
    an older message than the current value's (a late or repeated extraction)
    joins the history without superseding. A negated fact naming the current
    value ends it: the key drops out of :meth:`current` and :meth:`get` while
    :meth:`history` keeps both the value and the negation, each with the seq
    and quote of the message that said it. ``forget(key)`` removes a key and
    remembers up to which seq it was forgotten, so re-extracting the same old
    messages does not bring it back, while a newer statement does.

    Persist it with :meth:`to_json` / :meth:`from_json`::

        book = FactBook()
        book.apply(RuleFactExtractor().extract(messages))
        book.render_lines("en")    # ['city: Beijing', 'name: Alice', ...]
    """

    def __init__(self, facts: Iterable[Fact] = ()) -> None:
        self._lock = threading.RLock()
        self._history: dict[str, list[Fact]] = {}
        self._updated: dict[str, int] = {}  # key -> when it last changed, for stable "newest first"
        self._clock = 0
        self._forgotten: dict[str, int] = {}
        self.apply(facts)

    @classmethod
    def merged(cls, books: Iterable[tuple[str, FactBook]]) -> FactBook:
        """One book of what several sessions' books say, each fact tagged with its session.

        A user's facts, from the books of their sessions: every statement is
        folded in the order it was made (message time), whichever session made
        it, so a newer value from any session supersedes an older one from any
        other, and a negation said in one session ("I no longer live in
        Hangzhou") ends the value another session stated. A value stated in two
        sessions keeps the provenance of the first statement; dropping either
        session's book (a forgotten session) leaves the other's.
        """
        by_key: dict[str, list[list[Fact]]] = {}
        for session_id, book in books:
            with book._lock:
                for key, history in book._history.items():
                    by_key.setdefault(key, []).append(
                        [dataclasses.replace(fact, session_id=session_id) for fact in history]
                    )
        merged = cls()
        for key in sorted(by_key):
            # Each session's history is in the order its log said it (by seq, whatever the
            # clocks of its writers): merged by time across sessions, never reordered within.
            merged._fold(heapq.merge(*by_key[key], key=lambda fact: fact.timestamp), in_order=True)
        return merged

    def apply(self, facts: Iterable[Fact]) -> list[Fact]:
        """Fold `facts` (oldest first) in; return those that changed a key's current value.

        A negated fact ends the current value when it names that value, and is
        returned then; naming another value ("I no longer live in Paris" while
        the current city is Rome) changes nothing. A negation of a key with no
        value yet changes nothing here either, but joins the key's history: the
        value it names may be another session's (see :meth:`merged`).
        """
        return self._fold(facts, in_order=False)

    def _fold(self, facts: Iterable[Fact], *, in_order: bool) -> list[Fact]:
        """`apply`; with `in_order` the facts are known to come in the order they were
        said (merged from several sessions, whose seqs are not comparable)."""
        if isinstance(facts, Fact):
            facts = [facts]
        changed: dict[str, Fact] = {}
        with self._lock:
            for index, fact in enumerate(facts):
                if not isinstance(fact, Fact):
                    raise InvalidMessageError(f"facts[{index}] must be a Fact, got {type(fact).__name__}")
                forgotten_through = self._forgotten.get(fact.key)
                if forgotten_through is not None and fact.seq is not None and fact.seq <= forgotten_through:
                    continue
                history = self._history.get(fact.key, [])
                current = history[-1] if history else None
                if fact.negated and current is None:
                    self._history[fact.key] = [fact]  # no value to end here; kept for merging
                    continue
                if fact.negated and (
                    current is None or current.negated or not _same_value(current.value, fact.value)
                ):
                    continue
                if current is not None:
                    if not fact.negated and not current.negated and _same_value(current.value, fact.value):
                        continue
                    if (
                        not in_order
                        and fact.seq is not None
                        and current.seq is not None
                        and fact.seq < current.seq
                    ):
                        self._insert_older(history, fact)
                        continue
                history.append(fact)
                del history[:-HISTORY_KEPT]
                self._history[fact.key] = history
                self._clock += 1
                self._updated[fact.key] = self._clock
                changed.pop(fact.key, None)
                changed[fact.key] = fact
        return list(changed.values())

    @staticmethod
    def _insert_older(history: list[Fact], fact: Fact) -> None:
        """Place a fact stated before the current value into the history, by seq."""
        assert fact.seq is not None
        position = len(history)
        while position > 0:
            before = history[position - 1].seq
            if before is not None and before <= fact.seq:
                break
            position -= 1
        if position > 0 and _same_statement(history[position - 1], fact):
            return  # the value it would repeat is already there
        if position < len(history) and _same_statement(history[position], fact):
            return
        history.insert(position, fact)
        del history[:-HISTORY_KEPT]

    def current(self) -> list[Fact]:
        """The current value of every key, newest first (by time stated, then seq)."""
        with self._lock:
            latest = [
                (history[-1], self._updated[key])
                for key, history in self._history.items()
                if _live(history) is not None
            ]
        latest.sort(
            key=lambda pair: (pair[0].timestamp, pair[0].seq if pair[0].seq is not None else -1, pair[1]),
            reverse=True,
        )
        return [fact for fact, _ in latest]

    def get(self, key: str) -> Fact | None:
        """The current fact for `key`, or ``None``."""
        with self._lock:
            return _live(self._history.get(normalize_key(key), []))

    def history(self, key: str) -> list[Fact]:
        """The values `key` has had, oldest first, negations included (empty for an unknown key):
        the last `HISTORY_KEPT` statements, so a book stays small however often a value changes."""
        with self._lock:
            return list(self._history.get(normalize_key(key), ()))

    def forget(self, key: str) -> bool:
        """Remove `key` and its history; ``False`` when there was no such key (nor a history)."""
        key = normalize_key(key)
        with self._lock:
            history = self._history.pop(key, None)
            self._updated.pop(key, None)
            if not history:
                return False
            seqs = [fact.seq for fact in history if fact.seq is not None]
            if seqs:
                self._forgotten[key] = max(max(seqs), self._forgotten.get(key, -1))
            return True

    def drop_seqs(self, seqs: Iterable[int]) -> bool:
        """Remove every fact stated by the messages `seqs` (deleted or rewritten messages);
        a key whose current value goes falls back to its previous one. True if any went."""
        doomed = set(seqs)
        changed = False
        with self._lock:
            for key in list(self._history):
                history = self._history[key]
                kept = [fact for fact in history if fact.seq is None or fact.seq not in doomed]
                if len(kept) == len(history):
                    continue
                changed = True
                if kept:
                    self._history[key] = kept
                    self._clock += 1
                    self._updated[key] = self._clock
                else:
                    del self._history[key]
                    self._updated.pop(key, None)
        return changed

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for history in self._history.values() if _live(history) is not None)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def render_lines(self, language: str) -> list[str]:
        """Current facts as readable lines, newest first: ``"name: Alice"`` / ``"名字：小明"``,
        ``"likes: coffee"`` / ``"喜欢：咖啡"``, ``"favourite colour: teal"`` / ``"最喜欢的颜色：蓝色"``.
        `language` is ``"en"`` or ``"zh"``."""
        language = check_language(language, allow_auto=False)
        zh = language == "zh"
        separator = LABEL_SEPARATORS[language]
        lines = []
        for fact in self.current():
            prefix, colon, thing = fact.key.partition(":")
            thing_line = _one_line(thing, FACT_KEY_MAX_CHARS)
            value_line = _one_line(fact.value, FACT_VALUE_MAX_CHARS)
            if colon and prefix in _THING_LABELS:
                lines.append(_THING_LABELS[prefix][zh].format(thing_line) + separator + value_line)
                continue
            if colon and prefix in _VALUE_LABELS:
                labels = _VALUE_LABELS[prefix].get(fact.value.lower())
                lines.append(
                    (labels[zh] + separator + thing_line) if labels else (thing_line + separator + value_line)
                )
                continue
            labels = _KEY_LABELS.get(fact.key)
            label = labels[zh] if labels else (fact.key if zh else fact.key.replace("_", " "))
            lines.append(
                _one_line(label, FACT_KEY_MAX_CHARS) + separator + _one_line(fact.value, FACT_VALUE_MAX_CHARS)
            )
        return lines

    def to_json(self) -> str:
        """The whole book (current values, history, forgotten keys) as JSON text."""
        with self._lock:
            keys = sorted(self._history, key=lambda key: self._updated.get(key, 0))
            negations = any(fact.negated for history in self._history.values() for fact in history)
            data = {
                "format": _FACTBOOK_FORMAT_WITH_NEGATIONS if negations else _FACTBOOK_FORMAT,
                "history": {key: [fact.to_dict() for fact in self._history[key]] for key in keys},
                "forgotten": dict(self._forgotten),
            }
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> FactBook:
        """A book from :meth:`to_json` output; raises :class:`StoreError` when it is not one."""
        try:
            data = json.loads(text)
        except (ValueError, TypeError) as exc:
            raise StoreError(
                f"the stored fact book is not valid JSON ({exc}); delete or rebuild it"
            ) from None
        found_format = data.get("format") if isinstance(data, dict) else None
        if not isinstance(data, dict) or found_format not in (
            _FACTBOOK_FORMAT,
            _FACTBOOK_FORMAT_WITH_NEGATIONS,
        ):
            raise StoreError(
                f"the stored fact book has an unknown layout (format {found_format!r}, expected "
                f"{_FACTBOOK_FORMAT} or {_FACTBOOK_FORMAT_WITH_NEGATIONS}); delete or rebuild it"
            )
        history, forgotten = data.get("history"), data.get("forgotten", {})
        if not isinstance(history, dict) or not isinstance(forgotten, dict):
            raise StoreError("the stored fact book needs a 'history' object and a 'forgotten' object")
        book = cls()
        try:
            for key, entries in history.items():
                if not isinstance(entries, list):
                    raise InvalidMessageError(f"history of {key!r} must be a list")
                facts = [Fact.from_dict(entry) for entry in entries[-HISTORY_KEPT:]]
                if facts:
                    book._history[normalize_key(key)] = facts
                    book._clock += 1
                    book._updated[normalize_key(key)] = book._clock
            for key, seq in forgotten.items():
                if isinstance(seq, bool) or not isinstance(seq, int):
                    raise InvalidMessageError(f"forgotten seq of {key!r} must be an int, got {seq!r}")
                book._forgotten[normalize_key(key)] = seq
        except InvalidMessageError as exc:
            raise StoreError(f"the stored fact book holds a malformed fact: {exc}") from None
        return book


FACT_KEY_MAX_CHARS = 60
FACT_VALUE_MAX_CHARS = 200
"""A rendered fact line is ``label: value`` on one line, each part capped (an LLM
extractor may return anything; a fact must not grow into a section of its own)."""

# Line breaks, tabs and other controls become spaces; bidi overrides and other
# invisible format characters go (the zero-width joiner stays: emoji need it).
_INVISIBLE = {c for c in map(chr, range(0x2000, 0x2070)) if unicodedata.category(c) == "Cf"} - {"\u200d"}


def _one_line(text: str, max_chars: int) -> str:
    cleaned = "".join(
        " " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c
        for c in text
        if c not in _INVISIBLE and c != "\ufeff"
    )
    cleaned = " ".join(cleaned.split())
    return cleaned if len(cleaned) <= max_chars else cleaned[: max_chars - 1].rstrip() + "…"

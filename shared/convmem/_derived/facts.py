"""Core facts about the user: small key/value statements that outlive the window.

A :class:`FactExtractor` turns messages into :class:`Fact` objects
(``name = Alice``, ``city = Beijing``, ``preference:coffee = likes``); a
:class:`FactBook` holds a session's facts. A newer value for a key supersedes
the older one (a user who moved from Hangzhou to Beijing lives in Beijing) and
every value stays in the key's history. A negated fact ("I no longer live in
Beijing") ends the value it names: the key has no current value until the user
states a new one, and the negation stays in the history as its provenance.

Two extractors: :class:`~convmem._derived.rule_extractor.RuleFactExtractor`
(the offline default: English and Chinese patterns over the user's own
messages, precision over recall) and
:class:`~convmem._derived.llm.LLMFactExtractor` (any model behind a
``complete(prompt) -> str`` callable, answering in JSON). How a book reads in a
prompt is :mod:`convmem._derived.fact_lines`.
"""

from __future__ import annotations

import dataclasses
import heapq
import json
import math
import re
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from .._errors import InvalidMessageError, StoreError
from .._language import MAX_NAME_CHARS, TRIM_CHARS, check_language, line_prefix
from .._models import Message
from .fact_lines import fact_line

__all__ = ["HISTORY_KEPT", "Fact", "FactBook", "FactExtractor", "normalize_key", "source_quote"]

_SOURCE_CHARS = 160


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


def _is_speaker_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= MAX_NAME_CHARS
        and name == name.strip()
        and name.isprintable()
        and ":" not in name
        and "：" not in name
    )


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

    ``speaker`` is who the fact is about in a chat of several people: the name
    of the message that stated it (``Message.name``, as ``speaker_name`` gives
    it: one line, no colon, at most 40 characters). ``None``, the default, is
    the user of a one-person chat. Facts of different speakers never supersede
    one another: Caroline's city and Melanie's city are two facts.

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
    speaker: str | None = None

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
        if self.speaker is not None and not _is_speaker_name(self.speaker):
            raise InvalidMessageError(
                f"a fact's speaker must be None or a name of one line without ':' and at most "
                f"{MAX_NAME_CHARS} characters (as speaker_name gives it), got {self.speaker!r:.60}"
            )
        object.__setattr__(self, "key", normalize_key(self.key))
        object.__setattr__(self, "value", self.value.strip())
        object.__setattr__(self, "timestamp", float(self.timestamp))

    def to_dict(self) -> dict[str, Any]:
        """The fact as a JSON-ready dict (`from_dict` reads it back); unset optional fields are left out."""
        data = dataclasses.asdict(self)
        if not self.negated:
            del data["negated"]  # the common case keeps the layout stored before negations existed
        if self.session_id is None:
            del data["session_id"]
        if self.speaker is None:
            del data["speaker"]
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
            speaker=data.get("speaker"),
        )


@runtime_checkable
class FactExtractor(Protocol):
    """Turns messages into facts about the user.

    Implement both methods (``aextract`` may call ``extract`` when there is no
    I/O). Facts come back in the order they were stated, each with the seq and
    timestamp of its message, so a later fact for the same key supersedes an
    earlier one when a :class:`FactBook` applies them.
    """

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        """The facts `messages` state, in the order they were stated (none is an empty list)."""
        ...

    async def aextract(self, messages: Sequence[Message]) -> list[Fact]:
        """`extract` as a coroutine; the memory's async methods call this one."""
        ...


def source_quote(text: str) -> str:
    """`text` on one line, cut to a short quote: where a fact came from."""
    flat = " ".join(text.split())
    return flat if len(flat) <= _SOURCE_CHARS else flat[: _SOURCE_CHARS - 1] + "…"


# Format 2 is format 1 plus negated entries in a history, format 3 adds the facts
# of named speakers. A book is written in the oldest format that holds it, so a
# convmem that predates negations or speakers keeps reading it, and refuses a book
# it would misread (a negated value as current, two people's facts as one person's).
_FACTBOOK_FORMAT = 1
_FACTBOOK_FORMAT_WITH_NEGATIONS = 2
_FACTBOOK_FORMAT_WITH_SPEAKERS = 3
_FACTBOOK_FORMATS = (_FACTBOOK_FORMAT, _FACTBOOK_FORMAT_WITH_NEGATIONS, _FACTBOOK_FORMAT_WITH_SPEAKERS)

_Slot = tuple[str | None, str]
"""Where a book keeps a fact: (speaker, key). The user of a one-person chat is speaker None."""


def _slot(fact: Fact) -> _Slot:
    return (fact.speaker, fact.key)


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

    In a chat of several people each speaker has keys of their own (see
    `Fact.speaker`): a value Melanie states never supersedes Caroline's, and
    ``get``, ``history`` and ``forget`` take the ``speaker`` they are about
    (``None``, the default, is the user of a one-person chat).

    Persist it with :meth:`to_json` / :meth:`from_json`::

        book = FactBook()
        book.apply(RuleFactExtractor().extract(messages))
        book.render_lines("en")    # ['city: Beijing', 'name: Alice', ...]
    """

    def __init__(self, facts: Iterable[Fact] = ()) -> None:
        self._lock = threading.RLock()
        self._history: dict[_Slot, list[Fact]] = {}
        self._updated: dict[_Slot, int] = {}  # slot -> when it last changed, for stable "newest first"
        self._clock = 0
        self._forgotten: dict[_Slot, int] = {}
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
        by_slot: dict[_Slot, list[list[Fact]]] = {}
        for session_id, book in books:
            with book._lock:
                for slot, history in book._history.items():
                    by_slot.setdefault(slot, []).append(
                        [dataclasses.replace(fact, session_id=session_id) for fact in history]
                    )
        merged = cls()
        for slot in sorted(by_slot, key=lambda slot: (slot[0] or "", slot[0] is not None, slot[1])):
            # Each session's history is in the order its log said it (by seq, whatever the
            # clocks of its writers): merged by time across sessions, never reordered within.
            merged._fold(heapq.merge(*by_slot[slot], key=lambda fact: fact.timestamp), in_order=True)
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
        changed: dict[_Slot, Fact] = {}
        with self._lock:
            for index, fact in enumerate(facts):
                if not isinstance(fact, Fact):
                    raise InvalidMessageError(f"facts[{index}] must be a Fact, got {type(fact).__name__}")
                slot = _slot(fact)
                forgotten_through = self._forgotten.get(slot)
                if forgotten_through is not None and fact.seq is not None and fact.seq <= forgotten_through:
                    continue
                history = self._history.get(slot, [])
                current = history[-1] if history else None
                if fact.negated and current is None:
                    self._history[slot] = [fact]  # no value to end here; kept for merging
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
                self._history[slot] = history
                self._clock += 1
                self._updated[slot] = self._clock
                changed.pop(slot, None)
                changed[slot] = fact
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
        """The current value of every key (of every speaker), newest first (by time stated, then seq)."""
        with self._lock:
            latest = [
                (history[-1], self._updated[slot])
                for slot, history in self._history.items()
                if _live(history) is not None
            ]
        latest.sort(
            key=lambda pair: (pair[0].timestamp, pair[0].seq if pair[0].seq is not None else -1, pair[1]),
            reverse=True,
        )
        return [fact for fact, _ in latest]

    def get(self, key: str, speaker: str | None = None) -> Fact | None:
        """The current fact for `key` (of `speaker`), or ``None``."""
        with self._lock:
            return _live(self._history.get((speaker, normalize_key(key)), []))

    def history(self, key: str, speaker: str | None = None) -> list[Fact]:
        """The values `key` (of `speaker`) has had, oldest first, negations included (empty for
        an unknown key): the last `HISTORY_KEPT` statements, so a book stays small however
        often a value changes."""
        with self._lock:
            return list(self._history.get((speaker, normalize_key(key)), ()))

    def forget(self, key: str, speaker: str | None = None) -> bool:
        """Remove `key` (of `speaker`) and its history; ``False`` when there was no such key
        (nor a history)."""
        slot = (speaker, normalize_key(key))
        with self._lock:
            history = self._history.pop(slot, None)
            self._updated.pop(slot, None)
            if not history:
                return False
            seqs = [fact.seq for fact in history if fact.seq is not None]
            if seqs:
                self._forgotten[slot] = max(max(seqs), self._forgotten.get(slot, -1))
            return True

    def drop_seqs(self, seqs: Iterable[int]) -> bool:
        """Remove every fact stated by the messages `seqs` (deleted or rewritten messages);
        a key whose current value goes falls back to its previous one. True if any went."""
        doomed = set(seqs)
        changed = False
        with self._lock:
            for slot in list(self._history):
                history = self._history[slot]
                kept = [fact for fact in history if fact.seq is None or fact.seq not in doomed]
                if len(kept) == len(history):
                    continue
                changed = True
                if kept:
                    self._history[slot] = kept
                    self._clock += 1
                    self._updated[slot] = self._clock
                else:
                    del self._history[slot]
                    self._updated.pop(slot, None)
        return changed

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for history in self._history.values() if _live(history) is not None)

    def __contains__(self, key: object) -> bool:
        """Whether the user of a one-person chat has a current value for `key`."""
        return isinstance(key, str) and self.get(key) is not None

    def render_lines(self, language: str) -> list[str]:
        """Current facts as readable lines, newest first: ``"name: Alice"`` / ``"名字：小明"``,
        ``"likes: coffee"`` / ``"喜欢：咖啡"``, ``"favourite colour: teal"`` / ``"最喜欢的颜色：蓝色"``.
        When the facts are of several people, a named speaker's fact says whose it is, as
        a line of their conversation does: ``"Caroline: city: Boston"``; the facts of one
        person read the same whether or not their messages carry a name. `language` is
        ``"en"`` or ``"zh"``."""
        language = check_language(language, allow_auto=False)
        facts = self.current()
        several = len({fact.speaker for fact in facts}) > 1
        return [
            (line_prefix(None, fact.speaker, language) if several else "")
            + fact_line(fact.key, fact.value, language)
            for fact in facts
        ]

    def to_json(self) -> str:
        """The whole book (current values, history, forgotten keys) as JSON text."""
        parts: dict[str | None, dict[str, dict[str, Any]]] = {None: {"history": {}, "forgotten": {}}}
        with self._lock:
            for speaker, key in sorted(self._history, key=lambda slot: self._updated.get(slot, 0)):
                part = parts.setdefault(speaker, {"history": {}, "forgotten": {}})
                # A speaker's part names them once; its facts need not repeat the name.
                part["history"][key] = [
                    {name: field for name, field in fact.to_dict().items() if name != "speaker"}
                    for fact in self._history[(speaker, key)]
                ]
            for (speaker, key), seq in self._forgotten.items():
                parts.setdefault(speaker, {"history": {}, "forgotten": {}})["forgotten"][key] = seq
            negations = any(fact.negated for history in self._history.values() for fact in history)
        data: dict[str, Any] = {"format": _FACTBOOK_FORMAT, **parts.pop(None)}
        if negations:
            data["format"] = _FACTBOOK_FORMAT_WITH_NEGATIONS
        if parts:
            data["format"] = _FACTBOOK_FORMAT_WITH_SPEAKERS
            data["speakers"] = parts
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
        if not isinstance(data, dict) or found_format not in _FACTBOOK_FORMATS:
            raise StoreError(
                f"the stored fact book has an unknown layout (format {found_format!r}, expected one "
                f"of {', '.join(map(str, _FACTBOOK_FORMATS))}); delete or rebuild it"
            )
        speakers = data.get("speakers", {})
        if not isinstance(speakers, dict) or not all(isinstance(part, dict) for part in speakers.values()):
            raise StoreError("the stored fact book's 'speakers' must map each name to an object")
        book = cls()
        try:
            book._load_part(None, data)
            for speaker, part in speakers.items():
                if not _is_speaker_name(speaker):
                    raise InvalidMessageError(f"{speaker!r:.60} is not a speaker's name")
                book._load_part(speaker, part)
        except InvalidMessageError as exc:
            raise StoreError(f"the stored fact book holds a malformed fact: {exc}") from None
        return book

    def _load_part(self, speaker: str | None, part: dict[str, Any]) -> None:
        """Read one speaker's ``history`` and ``forgotten`` objects of a stored book."""
        history, forgotten = part.get("history"), part.get("forgotten", {})
        if not isinstance(history, dict) or not isinstance(forgotten, dict):
            raise StoreError("the stored fact book needs a 'history' object and a 'forgotten' object")
        for key, entries in history.items():
            if not isinstance(entries, list):
                raise InvalidMessageError(f"history of {key!r} must be a list")
            facts = [
                dataclasses.replace(Fact.from_dict(entry), speaker=speaker)
                for entry in entries[-HISTORY_KEPT:]
            ]
            if facts:
                slot = (speaker, normalize_key(key))
                self._history[slot] = facts
                self._clock += 1
                self._updated[slot] = self._clock
        for key, seq in forgotten.items():
            if isinstance(seq, bool) or not isinstance(seq, int):
                raise InvalidMessageError(f"forgotten seq of {key!r} must be an int, got {seq!r}")
            self._forgotten[(speaker, normalize_key(key))] = seq

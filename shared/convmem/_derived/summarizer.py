"""Rolling summaries: turns that leave the recent window are folded into one
running summary of the session.

Summarizing is incremental. A summarizer receives the previous summary and
only the messages evicted since, never the whole log, and returns the new
summary; the caller keeps the watermark (the last seq the summary covers).

Two implementations:

- :class:`ExtractiveSummarizer` (here, the default) needs no model: it keeps
  the sentences that carry the most information, in their original order.
- :class:`~convmem._llm.LLMSummarizer` asks a language model through a plain
  ``complete(prompt) -> str`` callable (sync or async), which is what the
  LangChain and LlamaIndex wrappers adapt their models to.

Both keep a summary within ``max_tokens`` by dropping whole sentences, never
by cutting one.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import re
import unicodedata
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .._errors import BudgetError, ConfigError
from .._language import (
    HAN,
    LABEL_SEPARATORS,
    LANGUAGES,
    MAX_NAME_CHARS,
    check_language,
    detect_language,
    line_prefix,
    speaker_label,
    speaker_name,
    split_sentences,
)
from .._models import Message, Role
from .._salience import check_messages, conversation_messages, cue_value, information_value, is_filler
from .._tokens import TokenCounter, default_counter

__all__ = ["ExtractiveSummarizer", "Summarizer"]


@runtime_checkable
class Summarizer(Protocol):
    """Folds newly evicted messages into the previous summary.

    Implement both methods; an implementation without I/O may let
    ``asummarize`` call ``summarize``. ``messages`` holds only the messages
    evicted since ``previous_summary`` was written, oldest first. The result
    must fit ``max_tokens`` (when given) and end at a sentence boundary.
    """

    def summarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        """The new summary: `previous_summary` (``None`` for the first) with `messages` folded in."""
        ...

    async def asummarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        """`summarize` as a coroutine; the memory's async methods call this one."""
        ...


# --------------------------------------------------------------------------- inputs


def check_max_tokens(max_tokens: object) -> int | None:
    """`max_tokens` if it is a positive int or ``None``, else raise `BudgetError`."""
    if max_tokens is None:
        return None
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise BudgetError(f"max_tokens must be a positive int or None, got {max_tokens!r}")
    return max_tokens


def check_previous_summary(previous_summary: object) -> str | None:
    """`previous_summary`, or ``None`` when it is blank; raise `ConfigError` for a non-str."""
    if previous_summary is None:
        return None
    if not isinstance(previous_summary, str):
        raise ConfigError(f"previous_summary must be a str or None, got {type(previous_summary).__name__}")
    return previous_summary if previous_summary.strip() else None


def check_counter(counter: object) -> TokenCounter | None:
    """`counter` if it is a `TokenCounter` or ``None``, else raise `ConfigError`."""
    if counter is not None and not isinstance(counter, TokenCounter):
        raise ConfigError(
            f"counter must be a TokenCounter (e.g. TiktokenCounter()), got {type(counter).__name__}"
        )
    return counter


# A summary labels the sentences of users, assistants and tools; reading a
# summary back, a line that starts with one of their labels is theirs.
_ROLE_BY_LABEL = {
    speaker_label(role, language): role
    for language in LANGUAGES
    for role in (Role.USER, Role.ASSISTANT, Role.TOOL)
}
_LABEL_MARKS = "".join(separator.strip() for separator in LABEL_SEPARATORS.values())
_LABEL_PREFIX = re.compile(rf"^({'|'.join(map(re.escape, _ROLE_BY_LABEL))})\s*[{_LABEL_MARKS}]\s*")
# A named speaker's line as `_render` writes it ("Caroline: ...", "小明：..."): a name of
# at most MAX_NAME_CHARS characters without a colon, then the separator ("10:30" and
# "http://" are not).
_NAME_PREFIX = re.compile(rf"^([^:：\n]{{1,{MAX_NAME_CHARS}}}?)(?::\s+|：\s*)")


# --------------------------------------------------------------------------- extractive summarizer

# Sentences longer than this many tokens are worth proportionally less per
# token, so one long explanation does not crowd out several short facts.
_LONG_SENTENCE_TOKENS = 60


@dataclasses.dataclass(frozen=True)
class _Unit:
    """One sentence of a summary, with where it came from and what it is worth."""

    text: str
    role: Role | None
    name: str | None  # the speaker's name (`speaker_name`), shown instead of the role's label
    group: tuple[str, int]  # sentences of one message (or one summary line) share a line
    order: int
    value: float


def _ends_sentence(text: str) -> bool:
    return text[-1] in "。！？；…｡.!?\"'”’」』）)]】》〉" or unicodedata.category(text[-1]) == "So"


def _terminated(sentence: str) -> str:
    """`sentence` with a closing mark, so joined sentences split apart the same way again."""
    if _ends_sentence(sentence):
        return sentence
    stripped = sentence.rstrip(",:;，：、")
    if not stripped:
        return sentence
    return stripped + ("。" if HAN.match(stripped[-1]) else ".")


def _join_sentences(sentences: Sequence[str]) -> str:
    out = ""
    for sentence in sentences:
        if out and not (HAN.match(out[-1]) or out[-1] in "。！？；…" or HAN.match(sentence[0])):
            out += " "
        out += sentence
    return out


# A sentence of a summary line: its text, role, speaker's name and information value.
_LineSentence = tuple[str, Role | None, str | None, float]


def _sentences_of_line(line: str) -> tuple[_LineSentence, ...]:
    """The sentences of one line of a summary, with the speaker its label names."""
    line = line.strip()
    role: Role | None = None
    name: str | None = None
    match = _LABEL_PREFIX.match(line)
    if match:
        role = _ROLE_BY_LABEL[match.group(1)]
        line = line[match.end() :]
    elif named := _NAME_PREFIX.match(line):
        # A line this summarizer wrote for a named speaker: the name stays with
        # the line's sentences whichever of them are kept.
        name = named.group(1)
        line = line[named.end() :]
    return tuple(
        (sentence, role, name, information_value(sentence, role)) for sentence in split_sentences(line)
    )


def _dedupe_key(text: str) -> str:
    return "".join(filter(str.isalnum, text.lower()))


class ExtractiveSummarizer:
    """The offline default: keeps the most informative sentences, in order, no model needed.

    Each sentence of the new messages gets an information value (numbers,
    dates, names, decisions, what the user says about themselves; greetings,
    thanks and filler are worth nothing). The best `max_sentences_per_message`
    sentences of each message that are worth at least `min_value` join the
    sentences of the previous summary; each message's sentences share one line
    behind a compact speaker label (``"User: ..."`` / ``"用户：..."``). When the
    result is longer than ``max_tokens``, the lowest-value sentences are dropped
    (older first among equals) until it fits. Deterministic.

    >>> summarizer = ExtractiveSummarizer()
    >>> summarizer.summarize(None, [Message.create("user", "Hi! My name is Alice.")])
    'User: My name is Alice.'
    """

    def __init__(
        self,
        counter: TokenCounter | None = None,
        language: str = "auto",
        *,
        min_value: float = 2.0,
        max_sentences_per_message: int = 3,
    ) -> None:
        self._counter = check_counter(counter)
        self.language = check_language(language)
        if (
            isinstance(min_value, bool)
            or not isinstance(min_value, (int, float))
            or not math.isfinite(min_value)
        ):
            raise ConfigError(f"min_value must be a finite number, got {min_value!r}")
        if (
            isinstance(max_sentences_per_message, bool)
            or not isinstance(max_sentences_per_message, int)
            or max_sentences_per_message <= 0
        ):
            raise ConfigError(
                f"max_sentences_per_message must be a positive int, got {max_sentences_per_message!r}"
            )
        self.min_value = float(min_value)
        self.max_sentences_per_message = max_sentences_per_message
        # The last summary `condense` split and scored, with its language and sentences: a
        # memory condenses one summary to the room each question leaves, which differs.
        self._condensing: tuple[str, str, list[_Unit]] | None = None
        # The sentences of each line of the summary read last. A summary keeps most of its
        # lines from one update to the next, so each line is split and scored once while it
        # lasts, not at every update; a line's sentences depend on nothing but its text.
        self._summary_lines: dict[str, tuple[_LineSentence, ...]] = {}

    @property
    def counter(self) -> TokenCounter:
        """The counter that measures summaries against ``max_tokens`` (the default if none was given)."""
        if self._counter is None:
            self._counter = default_counter()
        return self._counter

    def summarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        """Fold `messages` (only the newly evicted ones) into `previous_summary`."""
        previous = check_previous_summary(previous_summary)
        conversation = conversation_messages(check_messages(messages))
        cap = check_max_tokens(max_tokens)
        language = self._language_of(previous, conversation)
        old_units = self._units_of_summary(previous) if previous else []
        new_units = self._units_of_messages(conversation, first_order=len(old_units))
        if not new_units:
            if previous is None:
                return ""
            if cap is None or self.counter.count_text(previous) <= cap:
                return previous
        units = self._dedupe(old_units + new_units)
        return self._render(self._fit(units, cap, language), language)

    async def asummarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        """Same as :meth:`summarize`; it does no I/O, so it runs inline."""
        return self.summarize(previous_summary, messages, max_tokens=max_tokens)

    def condense(self, summary: str, max_tokens: int) -> str:
        """Shorten `summary` to at most `max_tokens` by dropping its least informative
        sentences; returned unchanged when it already fits. Works on any text.

        Unlike :meth:`summarize`, a `max_tokens` of zero or less is accepted and
        gives ``""``: it is usually computed room (a cap minus headers) that
        turned out to hold nothing.
        """
        if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens <= 0:
            check_previous_summary(summary)
            return ""
        previous = check_previous_summary(summary)
        cap = check_max_tokens(max_tokens)
        if previous is None:
            return ""
        if cap is None or self.counter.count_text(previous) <= cap:
            return previous
        known = self._condensing
        if known is not None and known[0] == previous:
            _, language, units = known
        else:
            language = self._language_of(previous, [])
            units = self._dedupe(self._units_of_summary(previous))
            self._condensing = (previous, language, units)  # one assignment: safe across threads
        return self._render(self._fit(units, cap, language), language)

    # -- internals

    def _language_of(self, previous: str | None, conversation: Sequence[Message]) -> str:
        if self.language != "auto":
            return self.language
        text = "\n".join(m.text for m in conversation) or previous or ""
        return detect_language(text)

    def _units_of_summary(self, summary: str) -> list[_Unit]:
        known = self._summary_lines
        lines: dict[str, tuple[_LineSentence, ...]] = {}
        units: list[_Unit] = []
        for line_number, line in enumerate(summary.splitlines()):
            sentences = known.get(line)
            if sentences is None:
                sentences = _sentences_of_line(line)
            lines[line] = sentences
            for text, role, name, value in sentences:
                units.append(_Unit(text, role, name, ("summary", line_number), len(units), value))
        self._summary_lines = lines  # one assignment: safe across threads
        return units

    def _units_of_messages(self, conversation: Sequence[Message], *, first_order: int) -> list[_Unit]:
        units: list[_Unit] = []
        order = first_order
        kept = self.max_sentences_per_message
        for index, message in enumerate(conversation):
            scored: list[_Unit] = []
            # What a later sentence must beat to be among the best `kept` so far: ties go to
            # the earlier one, and the length discount only lowers a value, so a sentence
            # worth no more than this before it is not counted.
            floor = -math.inf
            for sentence in split_sentences(message.text):
                # `information_value`, with the small-talk test (which gives 0) left to
                # the few sentences worth enough to be kept otherwise.
                value = cue_value(sentence, message.role)
                if value <= 0 or value < self.min_value or value <= floor or is_filler(sentence):
                    order += 1
                    continue
                tokens = self.counter.count_text(sentence)
                value /= max(1.0, tokens / _LONG_SENTENCE_TOKENS)
                unit = _Unit(sentence, message.role, speaker_name(message), ("message", index), order, value)
                scored.append(unit)
                order += 1
                if len(scored) >= kept:
                    floor = heapq.nlargest(kept, (earlier.value for earlier in scored))[-1]
            best = sorted(scored, key=lambda unit: (-unit.value, unit.order))
            units.extend(sorted(best[:kept], key=lambda unit: unit.order))
        return units

    @staticmethod
    def _dedupe(units: Sequence[_Unit]) -> list[_Unit]:
        seen: set[str] = set()
        kept = []
        for unit in units:
            key = _dedupe_key(unit.text)
            if key and key not in seen:
                seen.add(key)
                kept.append(unit)
        return kept

    def _render(self, units: Sequence[_Unit], language: str) -> str:
        lines: list[str] = []
        index = 0
        while index < len(units):
            group = units[index].group
            sentences = []
            prefix = line_prefix(units[index].role, units[index].name, language)
            while index < len(units) and units[index].group == group:
                sentences.append(_terminated(units[index].text))
                index += 1
            lines.append(prefix + _join_sentences(sentences))
        return "\n".join(lines)

    def _fit(self, units: list[_Unit], cap: int | None, language: str) -> list[_Unit]:
        if cap is None or not units:
            return units

        def fits(kept: Sequence[_Unit]) -> bool:
            return self.counter.count_text(self._render(kept, language)) <= cap

        if fits(units):
            return units
        drop_order = sorted(units, key=lambda unit: (unit.value, unit.order))

        def without_lowest(count: int) -> list[_Unit]:
            dropped = {unit.order for unit in drop_order[:count]}
            return [unit for unit in units if unit.order not in dropped]

        # The fewest lowest-value sentences whose removal makes it fit; then
        # take back any dropped sentence, best first, that still fits.
        low, high = 1, len(units)
        while low < high:
            middle = (low + high) // 2
            if fits(without_lowest(middle)):
                high = middle
            else:
                low = middle + 1
        kept = without_lowest(low)
        room = cap - self.counter.count_text(self._render(kept, language))
        for unit in reversed(drop_order[:low]):
            if unit.value <= 0 or self.counter.count_text(unit.text) > room:
                continue
            trial = sorted([*kept, unit], key=lambda u: u.order)
            used = self.counter.count_text(self._render(trial, language))
            if used <= cap:
                kept, room = trial, cap - used
        return kept

"""Rolling summaries: turns that leave the recent window are folded into one
running summary of the session.

Summarizing is incremental. A summarizer receives the previous summary and
only the messages evicted since, never the whole log, and returns the new
summary; the caller keeps the watermark (the last seq the summary covers).

Two implementations:

- :class:`ExtractiveSummarizer` (the default) needs no model: it keeps the
  sentences that carry the most information, in their original order.
- :class:`LLMSummarizer` asks a language model through a plain
  ``complete(prompt) -> str`` callable (sync or async), which is what the
  LangChain and LlamaIndex wrappers adapt their models to.

Both keep a summary within ``max_tokens`` by dropping whole sentences, never
by cutting one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import math
import re
import string
import unicodedata
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Protocol, TypeVar, runtime_checkable

from ._errors import BudgetError, ConfigError
from ._language import (
    HAN,
    LABEL_SEPARATORS,
    LANGUAGES,
    check_language,
    detect_language,
    resolve_language,
    speaker_label,
    speaker_prefix,
    split_sentences,
)
from ._models import Message, Role
from ._salience import check_messages, conversation_messages, information_value
from ._tokens import TokenCounter, default_counter

__all__ = [
    "CompleteFn",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "Summarizer",
]

logger = logging.getLogger("convmem")

CompleteFn = Callable[[str], str | Awaitable[str]]
"""A prompt-to-text callable: ``def complete(prompt: str) -> str`` or an ``async def`` one.

Any model fits behind it, e.g. ``lambda prompt: chat_model.invoke(prompt).content``.
"""

_T = TypeVar("_T")


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
    ) -> str: ...

    async def asummarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str: ...


# --------------------------------------------------------------------------- inputs


def _check_max_tokens(max_tokens: object) -> int | None:
    if max_tokens is None:
        return None
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise BudgetError(f"max_tokens must be a positive int or None, got {max_tokens!r}")
    return max_tokens


def _check_previous(previous_summary: object) -> str | None:
    if previous_summary is None:
        return None
    if not isinstance(previous_summary, str):
        raise ConfigError(f"previous_summary must be a str or None, got {type(previous_summary).__name__}")
    return previous_summary if previous_summary.strip() else None


def _check_counter(counter: object) -> TokenCounter | None:
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


def transcript_lines(messages: Sequence[Message], language: str) -> str:
    """Messages as ``"User: ..."`` lines for a prompt."""
    return "\n".join(speaker_prefix(m.role, language) + m.text.strip() for m in messages)


# --------------------------------------------------------------------------- complete callables


def _is_async_callable(complete: object) -> bool:
    return inspect.iscoroutinefunction(complete) or inspect.iscoroutinefunction(
        getattr(complete, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


def _check_answer(answer: object) -> str:
    if not isinstance(answer, str):
        raise ConfigError(
            f"complete must return a str, got {type(answer).__name__}: {answer!r:.80} "
            "(for a chat model, return its text, e.g. lambda prompt: model.invoke(prompt).content)"
        )
    return answer


def check_complete(complete: object) -> CompleteFn:
    """Return `complete` if it is callable, else raise `ConfigError`."""
    if not callable(complete):
        raise ConfigError(f"complete must be a callable prompt -> text, got {type(complete).__name__}")
    return complete


def call_complete(complete: CompleteFn, prompt: str, *, async_method: str) -> str:
    """Call a sync `complete`; refuse an async one, pointing to `async_method`."""
    advice = (
        f"the complete callable is async; call {async_method}() instead, "
        "or pass a sync callable to use the sync method"
    )
    if _is_async_callable(complete):
        raise ConfigError(advice)
    answer = complete(prompt)
    if inspect.isawaitable(answer):
        if inspect.iscoroutine(answer):
            answer.close()  # never awaited: close it so Python does not warn about it
        raise ConfigError(advice)
    return _check_answer(answer)


async def acall_complete(complete: CompleteFn, prompt: str) -> str:
    """Call `complete` from async code: await an async one, run a sync one in a thread.

    A callable that also has an async ``acomplete(prompt)`` method (as the
    LangChain and LlamaIndex model adapters do) is awaited through it.
    """
    acomplete = getattr(complete, "acomplete", None)
    if acomplete is not None and inspect.iscoroutinefunction(acomplete):
        return _check_answer(await acomplete(prompt))
    if _is_async_callable(complete):
        answer = await complete(prompt)  # type: ignore[misc]
    else:
        # A blocking model call must not stall the event loop.
        answer = await asyncio.to_thread(complete, prompt)
        if inspect.isawaitable(answer):
            answer = await answer
    return _check_answer(answer)


# A conversation with a model, written once: the generator yields prompts,
# receives answers and returns the result; a sync and an async driver run it.
Dialogue = Generator[str, str, _T]


def run_dialogue(dialogue: Dialogue[_T], complete: CompleteFn, *, async_method: str) -> _T:
    try:
        prompt = next(dialogue)
        while True:
            prompt = dialogue.send(call_complete(complete, prompt, async_method=async_method))
    except StopIteration as stop:
        return stop.value


async def arun_dialogue(dialogue: Dialogue[_T], complete: CompleteFn) -> _T:
    try:
        prompt = next(dialogue)
        while True:
            prompt = dialogue.send(await acall_complete(complete, prompt))
    except StopIteration as stop:
        return stop.value


# Sentences longer than this many tokens are worth proportionally less per
# token, so one long explanation does not crowd out several short facts.
_LONG_SENTENCE_TOKENS = 60


# --------------------------------------------------------------------------- extractive summarizer


@dataclasses.dataclass(frozen=True)
class _Unit:
    """One sentence of a summary, with where it came from and what it is worth."""

    text: str
    role: Role | None
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


def _dedupe_key(text: str) -> str:
    return "".join(c for c in text.lower() if c.isalnum())


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
        self._counter = _check_counter(counter)
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

    @property
    def counter(self) -> TokenCounter:
        if self._counter is None:
            self._counter = default_counter()
        return self._counter

    def summarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        """Fold `messages` (only the newly evicted ones) into `previous_summary`."""
        previous = _check_previous(previous_summary)
        conversation = conversation_messages(check_messages(messages))
        cap = _check_max_tokens(max_tokens)
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
            _check_previous(summary)
            return ""
        previous = _check_previous(summary)
        cap = _check_max_tokens(max_tokens)
        if previous is None:
            return ""
        if cap is None or self.counter.count_text(previous) <= cap:
            return previous
        language = self._language_of(previous, [])
        units = self._dedupe(self._units_of_summary(previous))
        return self._render(self._fit(units, cap, language), language)

    # -- internals

    def _language_of(self, previous: str | None, conversation: Sequence[Message]) -> str:
        if self.language != "auto":
            return self.language
        text = "\n".join(m.text for m in conversation) or previous or ""
        return detect_language(text)

    def _units_of_summary(self, summary: str) -> list[_Unit]:
        units: list[_Unit] = []
        for line_number, line in enumerate(summary.splitlines()):
            line = line.strip()
            role: Role | None = None
            match = _LABEL_PREFIX.match(line)
            if match:
                role = _ROLE_BY_LABEL[match.group(1)]
                line = line[match.end() :]
            for sentence in split_sentences(line):
                value = information_value(sentence, role)
                units.append(_Unit(sentence, role, ("summary", line_number), len(units), value))
        return units

    def _units_of_messages(self, conversation: Sequence[Message], *, first_order: int) -> list[_Unit]:
        units: list[_Unit] = []
        order = first_order
        for index, message in enumerate(conversation):
            scored = []
            for sentence in split_sentences(message.text):
                value = information_value(sentence, message.role)
                if value <= 0 or value < self.min_value:
                    order += 1
                    continue
                tokens = self.counter.count_text(sentence)
                value /= max(1.0, tokens / _LONG_SENTENCE_TOKENS)
                scored.append(_Unit(sentence, message.role, ("message", index), order, value))
                order += 1
            best = sorted(scored, key=lambda unit: (-unit.value, unit.order))
            units.extend(sorted(best[: self.max_sentences_per_message], key=lambda unit: unit.order))
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
            role = units[index].role
            while index < len(units) and units[index].group == group:
                sentences.append(_terminated(units[index].text))
                index += 1
            prefix = speaker_prefix(role, language) if role is not None else ""
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


# --------------------------------------------------------------------------- LLM summarizer

_NO_SUMMARY = {"en": "(none yet)", "zh": "（暂无）"}
_LANGUAGE_NAMES = {"en": "English", "zh": "中文"}

SUMMARY_PROMPTS = {
    "en": """You maintain a running summary of a conversation between a user and an assistant.

Current summary (covers the earlier conversation):
{previous_summary}

New messages to fold into the summary:
{new_messages}

Write the updated summary.
- Keep every fact, decision, open task or unanswered question, number, date and name.
- Keep what the user said about themselves (name, where they live, preferences, plans).
- Use only information from the current summary and the new messages; do not invent, guess or add anything.
- When a new message contradicts the summary, keep the newer information.
- Write in English, in short plain sentences, without a title or preamble.{length_hint}

Updated summary:""",
    "zh": """你负责维护一段用户与助手对话的滚动摘要。

当前摘要（概括了之前的对话）：
{previous_summary}

需要并入摘要的新消息：
{new_messages}

请写出更新后的摘要：
- 保留所有事实、决定、待办事项和未解决的问题、数字、日期和名字。
- 保留用户关于自己的陈述（名字、住在哪里、喜好、计划等）。
- 只使用当前摘要和新消息中的信息，不要编造、猜测或添加任何内容。
- 新消息与摘要矛盾时，以新消息为准。
- 用中文书写，使用简短的句子，不要标题或开场白。{length_hint}

更新后的摘要：""",
}
_LENGTH_HINTS = {
    "en": "\n- Keep it under {max_tokens} tokens.",
    "zh": "\n- 长度控制在 {max_tokens} 个 token 以内。",
}
CONDENSE_PROMPTS = {
    "en": """Shorten this conversation summary to at most {max_tokens} tokens.
Keep facts, decisions, open tasks, numbers, dates and names; drop everything else.
Do not add anything that is not in the summary. Write in English, without a title or preamble.

Summary:
{summary}

Shorter summary:""",
    "zh": """请把下面的对话摘要压缩到 {max_tokens} 个 token 以内。
保留事实、决定、待办事项、数字、日期和名字，删去其余内容。
不要添加摘要中没有的内容。用中文书写，不要标题或开场白。

摘要：
{summary}

压缩后的摘要：""",
}
_TEMPLATE_FIELDS = frozenset({"previous_summary", "new_messages", "length_hint", "language"})
_ANSWER_PREFIX = re.compile(
    r"^\s*(?:\*\*)?(?:updated summary|summary|shorter summary|更新后的摘要|压缩后的摘要|摘要)"
    r"(?:\*\*)?\s*[:：]\s*",
    re.I,
)


def _clean_answer(answer: str) -> str:
    text = answer.strip()
    fence = re.fullmatch(r"```[\w-]*\n(.*?)\n?```", text, re.S)
    if fence:
        text = fence.group(1).strip()
    return _ANSWER_PREFIX.sub("", text, count=1).strip()


def _check_template(template: object) -> str | None:
    if template is None:
        return None
    if not isinstance(template, str):
        raise ConfigError(f"prompt_template must be a str or None, got {type(template).__name__}")
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        raise ConfigError(
            f"prompt_template is not a valid format string ({exc}); write literal braces as {{{{ and }}}}"
        ) from None
    missing = {"previous_summary", "new_messages"} - fields
    unknown = fields - _TEMPLATE_FIELDS
    if missing or unknown:
        raise ConfigError(
            "prompt_template must contain {previous_summary} and {new_messages} and may use "
            f"{{length_hint}} and {{language}}; missing {sorted(missing)}, unknown {sorted(unknown)} "
            "(double literal braces: {{ and }})"
        )
    return template


class LLMSummarizer:
    """A summarizer backed by any language model behind a ``complete(prompt) -> str`` callable.

    The prompt (English or Chinese, after the conversation's language; see
    :data:`SUMMARY_PROMPTS`) carries the previous summary and only the new
    messages, and asks to keep facts, decisions, open tasks, numbers and
    names, to invent nothing, and to answer in the conversation's language.
    When the answer is longer than ``max_tokens`` the model is asked once to
    condense it; if it is still too long, its least informative sentences are
    dropped (see :meth:`ExtractiveSummarizer.condense`). An empty answer falls
    back to the extractive summary, with a warning.

    ``complete`` may be sync or async. :meth:`asummarize` awaits an async one
    and runs a sync one in a worker thread; :meth:`summarize` calls a sync one
    and raises :class:`ConfigError` for an async one (use ``asummarize``).

    ``prompt_template`` replaces the built-in prompt; it must contain
    ``{previous_summary}`` and ``{new_messages}`` and may use
    ``{length_hint}`` and ``{language}``.

    >>> summarizer = LLMSummarizer(lambda prompt: model.invoke(prompt).content)  # doctest: +SKIP
    """

    def __init__(
        self,
        complete: CompleteFn,
        *,
        language: str = "auto",
        counter: TokenCounter | None = None,
        prompt_template: str | None = None,
    ) -> None:
        self.complete = check_complete(complete)
        self.language = check_language(language)
        self.prompt_template = _check_template(prompt_template)
        self._extractive = ExtractiveSummarizer(_check_counter(counter), language)

    @property
    def counter(self) -> TokenCounter:
        return self._extractive.counter

    def summarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        """Fold `messages` into `previous_summary` with one (or two) model calls."""
        dialogue = self._dialogue(previous_summary, messages, max_tokens)
        return run_dialogue(dialogue, self.complete, async_method="asummarize")

    async def asummarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        """Async :meth:`summarize`."""
        return await arun_dialogue(self._dialogue(previous_summary, messages, max_tokens), self.complete)

    def build_prompt(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        """The first prompt :meth:`summarize` sends for these inputs."""
        previous, _, conversation, cap, language = self._prepare(previous_summary, messages, max_tokens)
        return self._prompt(previous, conversation, language, cap)

    def _prompt(
        self, previous: str | None, conversation: Sequence[Message], language: str, cap: int | None
    ) -> str:
        template = self.prompt_template or SUMMARY_PROMPTS[language]
        return template.format(
            previous_summary=previous if previous is not None else _NO_SUMMARY[language],
            new_messages=transcript_lines(conversation, language),
            length_hint=_LENGTH_HINTS[language].format(max_tokens=cap) if cap is not None else "",
            language=_LANGUAGE_NAMES[language],
        )

    def _prepare(
        self, previous_summary: str | None, messages: Sequence[Message], max_tokens: int | None
    ) -> tuple[str | None, list[Message], list[Message], int | None, str]:
        previous = _check_previous(previous_summary)
        checked = check_messages(messages)
        conversation = conversation_messages(checked)
        cap = _check_max_tokens(max_tokens)
        language = resolve_language(self.language, "\n".join(m.text for m in conversation) or previous or "")
        return previous, checked, conversation, cap, language

    def _dialogue(
        self, previous_summary: str | None, messages: Sequence[Message], max_tokens: int | None
    ) -> Dialogue[str]:
        # Inputs are checked here, before the generator starts, so bad
        # arguments raise at the call rather than at the first prompt.
        return self._steps(*self._prepare(previous_summary, messages, max_tokens))

    def _steps(
        self,
        previous: str | None,
        messages: list[Message],
        conversation: list[Message],
        cap: int | None,
        language: str,
    ) -> Dialogue[str]:
        if conversation:
            summary = _clean_answer((yield self._prompt(previous, conversation, language, cap)))
            if not summary:
                logger.warning("the summarizing model returned an empty answer; using the extractive summary")
                return self._extractive.summarize(previous, messages, max_tokens=cap)
        elif previous is None:
            return ""
        else:
            summary = previous
        if cap is None or self.counter.count_text(summary) <= cap:
            return summary
        prompt = CONDENSE_PROMPTS[language].format(max_tokens=cap, summary=summary)
        shorter = _clean_answer((yield prompt))
        if shorter:
            if self.counter.count_text(shorter) <= cap:
                return shorter
            if self.counter.count_text(shorter) < self.counter.count_text(summary):
                summary = shorter
        return self._extractive.condense(summary, cap)

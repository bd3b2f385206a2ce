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

from ._errors import BudgetError, ConfigError, InvalidMessageError
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
from ._models import Message, Role, TurnStatus
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


def check_messages(messages: object) -> list[Message]:
    """Return `messages` as a list, or raise `InvalidMessageError` naming the bad item."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidMessageError(
            f"messages must be a sequence of Message objects, got {type(messages).__name__}"
        )
    for index, item in enumerate(messages):
        if not isinstance(item, Message):
            raise InvalidMessageError(
                f"messages[{index}] must be a Message (build one with Message.create), "
                f"got {type(item).__name__}: {item!r:.60}"
            )
    return list(messages)


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


def conversation_messages(messages: Sequence[Message]) -> list[Message]:
    """The messages worth summarizing: user, assistant and tool messages with text.

    System messages are instructions, not conversation. An assistant answer
    that did not complete (running, failed, cancelled) may be partial or
    wrong, so it is left out; the user's question always counts.
    """
    kept = []
    for message in messages:
        if message.role is Role.SYSTEM or not message.text.strip():
            continue
        if message.role is Role.ASSISTANT and message.status is not TurnStatus.COMPLETED:
            continue
        kept.append(message)
    return kept


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


# --------------------------------------------------------------------------- information value

_EN_FILLER_WORDS = frozenset(
    """
    hi hello hey hiya yo thanks thank thx ty tks cheers ok okay k kk sure great cool nice awesome
    perfect got it bye goodbye see ya later good morning afternoon evening night yes yeah yep yup
    no nope nah so much a lot very really alright right fine welcome you're youre you np problem
    lol haha hah hmm um uh oh ah wow i understood noted sounds that makes sense that's thats please
    appreciate appreciated all the best again too for help your of course absolutely definitely
    indeed glad to happy anytime there dear wonderful excellent
    """.split()  # noqa: SIM905 - a word list reads better as text
)
# Matched longest first; a sentence made only of these is small talk.
_ZH_FILLER_PIECES = tuple(
    sorted(
        """
        你好 您好 大家好 哈喽 嗨 谢谢 多谢 感谢 谢啦 辛苦了 辛苦 好的 好滴 好吧 好嘞 好 行 嗯 恩 哦 噢 喔
        啊 呀 哈 嘿 呵 了 的 啦 吧 呢 嘛 哇 收到 明白 知道 了解 懂 没问题 没事 不客气 不用谢 客气 再见
        拜拜 回头见 晚安 早安 早上好 下午好 晚上好 太棒 真棒 棒 太好 不错 可以 对 是 是的 没错 你 您
        非常 很 真 太 帮助 帮忙 我 也 们 一下
        """.split(),  # noqa: SIM905 - a word list reads better as text
        key=len,
        reverse=True,
    )
)
_BOILERPLATE = tuple(
    re.compile(pattern)
    for pattern in (
        r"(how|what) (else )?(can|may) i (help|assist|do for)( you)?( with)?( today)?",
        r"(is there )?anything else (i can (help|assist)( you)? with|you need|you'?d like( to know)?)",
        r"(i'?m |i am )?(happy|glad) (to|i could|i can) help( you)?( with (that|this))?",
        r"let me know if you (need|have|want) .*",
        r"feel free to .*",
        r"(i )?hope (this|that|it) helps.*",
        r"(that'?s a )?(great|good) question",
        r"((hmm|um|ok|okay|well) )*let me (think|see|check)( about it| again)?",
        r"(sure|certainly|of course|absolutely)( i can help( you)?( with (that|this))?| let me help( you)?)?",
        r"有什么(我)?(可以|能)(为你|为您|帮你|帮您|帮到你|帮到您)?(做|帮忙|效劳|帮助)?的?(吗)?",
        r"还有(什么|其他|别的)(问题|需要|需要帮忙|要帮忙|可以帮你)?的?(地方)?(吗)?",
        r"(很)?高兴(能)?(为你|为您|帮到你|帮到您|帮助你|帮助您|帮忙).*",
        r"希望(这|以上)(些)?(对你|对您)?有(所)?帮助.*",
        r"(当然|没问题)(可以)?",
        r"(嗯|好)?(让我|我)(再)?想想(看)?",
    )
)

_NUMBER = re.compile(
    r"\d|(?:[零一二两三四五六七八九十百千万亿]{2,}|[二两三四五六七八九十百千万亿])"
    r"(?=[个只条岁年月日号点块元天周次本张位名度%％]|分钟|小时|公里|米)"
)
_DATE = re.compile(
    r"\bMarch\b|\bMay\s+\d|\b\d{1,2}(?:st|nd|rd|th)?\s+May\b"
    r"|(?i:\b(?:jan(?:uary)?|feb(?:ruary)?|apr(?:il)?|june?|july?|aug(?:ust)?"
    r"|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|monday|tuesday|wednesday|thursday"
    r"|friday|saturday|sunday|today|tonight|tomorrow|yesterday|weekend|next (?:week|month|year)"
    r"|last (?:week|month|year)|o'clock|[ap]\.m\.?)\b)"
    r"|\d{1,2}:\d{2}|\d{4}-\d{1,2}-\d{1,2}"
    r"|今天|明天|后天|昨天|前天|今晚|明晚|周[一二三四五六日末]|星期[一二三四五六日天]|礼拜[一二三四五六日天]"
    r"|下周|上周|下个月|上个月|月底|月初|年底|年初|\d+月|\d+[日号]|上午|下午|晚上|早上|中午|凌晨"
)
_OPENING_MARKS = " \t\"'“‘(「-*•"
_CAPITALIZED = re.compile(r"\b[A-Z][A-Za-z0-9'’-]+")
_NOT_NAMES = frozenset(
    """
    I I'm I've I'll I'd OK Okay Ok Yes No Hi Hello Hey Thanks Sure The A An And But So It This That
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June
    July August September October November December User Assistant Tool
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_ZH_NAME_CUE = re.compile(r"叫|名叫|名字|姓|《[^》]+》|“[^”]+”")
_DECISION = re.compile(
    r"(?i:\b(?:decid\w*|agree[ds]?|plan(?:s|ned|ning)?|will|going to|let'?s|must|need(?:s)? to|have to"
    r"|should|deadline|due|schedul\w*|book(?:ed)?|remind\w*|todo|to-do|confirm\w*|promis\w*"
    r"|appointment|meeting|budget|cancel\w*|order(?:ed)?|reserv\w*|choose|chose|pick(?:ed)?)\b)"
    r"|决定|确定|定了|同意|计划|打算|准备|安排|预约|预订|订了|约了|会议|截止|期限|提醒|记得|必须|需要|一定要"
    r"|待办|任务|答应|承诺|取消|预算|下单|选了|选择"
)
_FACT_CUE = re.compile(
    r"(?i:\b(?:name[sd]?|live[sd]?|moved?|(?:i|we|don't|do not)\s+(?:really\s+)?(?:like|love|prefer|hate|enjoy)"
    r"|allerg\w*|work(?:s|ed|ing)?|job|born|birthday|years old|married|wife|husband|son|daughter|kids?"
    r"|children|dog|cat|pets?|vegetarian|vegan|favou?rite|address|email|phone)\b)"
    r"|叫|名字|住|搬|来自|喜欢|爱|讨厌|过敏|工作|职业|出生|生日|岁|结婚|老婆|老公|妻子|丈夫|儿子|女儿"
    r"|孩子|狗|猫|宠物|养了|柯基|金毛|泰迪|柴犬|素食|最爱|地址|电话|邮箱"
)
_SELF = re.compile(r"(?i:\b(?:i|i'm|i've|i'd|i'll|my|me|mine|we|our)\b)|我")
_QUESTION = re.compile(r"[?？]\W*$|[吗呢么]\W*$")
_LATIN_WORDS = re.compile(r"[A-Za-z0-9]+")

_ROLE_WEIGHT = {Role.USER: 1.0, Role.ASSISTANT: 0.7, Role.TOOL: 0.5}
_UNKNOWN_ROLE_WEIGHT = 0.9
# Sentences longer than this many tokens are worth proportionally less per
# token, so one long explanation does not crowd out several short facts.
_LONG_SENTENCE_TOKENS = 60


def is_filler(sentence: str) -> bool:
    """Whether `sentence` is a greeting, thanks, acknowledgement or assistant boilerplate."""
    flat = " ".join(re.sub(r"[^\w'\s]", " ", sentence.lower().replace("’", "'")).split())
    if any(pattern.fullmatch(flat) or pattern.fullmatch(flat.replace(" ", "")) for pattern in _BOILERPLATE):
        return True
    others: list[str] = []
    for token in re.findall(r"[a-z']+|[^a-z'\s]+", flat):
        if token[0] in "abcdefghijklmnopqrstuvwxyz'":
            if token.strip("'") not in _EN_FILLER_WORDS and token not in _EN_FILLER_WORDS:
                return False
        else:
            others.append(token)
    remaining = "".join(c for c in "".join(others) if unicodedata.category(c)[0] not in "PSZC")
    position = 0
    while position < len(remaining):
        for piece in _ZH_FILLER_PIECES:
            if remaining.startswith(piece, position):
                position += len(piece)
                break
        else:
            return False
    return True


def information_value(sentence: str, role: Role | None) -> float:
    """How much a sentence is worth keeping in a summary (0 for small talk).

    Counts what a later turn may need: numbers, dates and times, names,
    decisions and tasks, and what the user says about themselves. Users'
    sentences weigh more than the assistant's, which often restate or explain.
    """
    if is_filler(sentence):
        return 0.0
    value = 0.0
    if _NUMBER.search(sentence):
        value += 2.0
    if _DATE.search(sentence):
        value += 2.0
    opening = len(sentence) - len(sentence.lstrip(_OPENING_MARKS))
    names = [
        match.group()
        for match in _CAPITALIZED.finditer(sentence)
        if match.start() > opening and match.group() not in _NOT_NAMES
    ]
    value += 1.5 * min(len(names), 3)
    if _ZH_NAME_CUE.search(sentence):
        value += 1.5
    if _DECISION.search(sentence):
        value += 2.0
    about_facts = bool(_FACT_CUE.search(sentence))
    if about_facts:
        value += 2.0
    if role is Role.USER and _SELF.search(sentence):
        # What users say about themselves (name, home, pets, allergies) stays
        # true for the whole session; it outranks any one-off detail.
        value += 4.0 if about_facts else 2.0
    if role is Role.USER and _QUESTION.search(sentence):
        value += 1.0
    content_units = len(_LATIN_WORDS.findall(sentence)) + len(HAN.findall(sentence)) / 2
    value += min(content_units / 20, 1.0)
    weight = _ROLE_WEIGHT.get(role, _UNKNOWN_ROLE_WEIGHT) if role is not None else _UNKNOWN_ROLE_WEIGHT
    return value * weight


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

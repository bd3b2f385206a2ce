"""Asking a language model: the ``complete(prompt) -> str`` callable convmem
talks to, one dialogue driver for sync and async code, and the two jobs a
model can do, :class:`LLMSummarizer` and :class:`LLMFactExtractor`, with
their prompts.

A job is written once, as a :data:`Dialogue` generator that yields prompts,
receives answers and returns its result; :func:`run_dialogue` drives it with a
sync callable and :func:`arun_dialogue` from async code, so the summarizer
and the extractor never repeat their logic per I/O style. Everything that
needs no model (the extractive summarizer, the rule extractor, the small-talk
heuristics) lives elsewhere; every prompt the core sends is in this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import json
import logging
import re
import string
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from .._errors import ConfigError
from .._language import (
    LANGUAGE_NAMES,
    check_language,
    message_prefix,
    resolve_language,
    speaker_name,
)
from .._models import Message, Role
from .._salience import check_messages, conversation_messages
from .._sansio import Flow, arun, run
from .._tokens import TokenCounter
from .facts import Fact, normalize_key, source_quote
from .summarizer import (
    ExtractiveSummarizer,
    check_counter,
    check_max_tokens,
    check_previous_summary,
)

__all__ = [
    "CompleteFn",
    "Dialogue",
    "LLMFactExtractor",
    "LLMSummarizer",
    "acall_complete",
    "arun_dialogue",
    "call_complete",
    "check_complete",
    "run_dialogue",
]

logger = logging.getLogger("convmem")

CompleteFn = Callable[[str], str | Awaitable[str]]
"""A prompt-to-text callable: ``def complete(prompt: str) -> str`` or an ``async def`` one.

Any model fits behind it, e.g. ``lambda prompt: chat_model.invoke(prompt).content``.
"""

_T = TypeVar("_T")


# --------------------------------------------------------------------------- calling a model


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
        answer = await _in_own_thread(complete, prompt)
        if inspect.isawaitable(answer):
            answer = await answer
    return _check_answer(answer)


async def _in_own_thread(complete: CompleteFn, prompt: str) -> object:
    """``complete(prompt)`` in a daemon thread of its own, not the loop's executor: a model
    that hangs then holds its own thread, never one that the application's
    ``asyncio.to_thread`` calls (convmem's store reads among them) wait for."""
    loop = asyncio.get_running_loop()
    answered: asyncio.Future[object] = loop.create_future()
    context = contextvars.copy_context()  # as asyncio.to_thread does: tracing callbacks see it

    def deliver(ok: bool, value: Any) -> None:
        if answered.done():
            return  # the caller stopped waiting
        if ok:
            answered.set_result(value)
        else:
            answered.set_exception(value)

    def target() -> None:
        try:
            outcome: tuple[bool, Any] = (True, context.run(complete, prompt))
        except BaseException as exc:  # handed to the awaiting coroutine
            outcome = (False, exc)
        with contextlib.suppress(RuntimeError):  # a closed event loop: nobody waits for it
            loop.call_soon_threadsafe(deliver, *outcome)

    threading.Thread(target=target, name="convmem-model-call", daemon=True).start()
    return await answered


# A conversation with a model, written once: the generator yields prompts,
# receives answers and returns the result; `_sansio` runs it sync or async.
Dialogue = Flow[str, _T]


def run_dialogue(dialogue: Dialogue[_T], complete: CompleteFn, *, async_method: str) -> _T:
    """Run `dialogue` to its result with a sync `complete` (see :func:`call_complete`)."""
    return run(dialogue, functools.partial(call_complete, complete, async_method=async_method))


async def arun_dialogue(dialogue: Dialogue[_T], complete: CompleteFn) -> _T:
    """Run `dialogue` to its result from async code (see :func:`acall_complete`)."""
    return await arun(dialogue, functools.partial(acall_complete, complete))


# --------------------------------------------------------------------------- LLM summarizer

_NO_SUMMARY = {"en": "(none yet)", "zh": "（暂无）"}

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


def transcript_lines(messages: Sequence[Message], language: str) -> str:
    """Messages as ``"User: ..."`` lines for a prompt (``"Caroline: ..."`` for a named speaker)."""
    return "\n".join(message_prefix(m, language) + m.text.strip() for m in messages)


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
        self._extractive = ExtractiveSummarizer(check_counter(counter), language)

    @property
    def counter(self) -> TokenCounter:
        """The counter that measures summaries against ``max_tokens`` (the default if none was given)."""
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

    def _prompt(
        self, previous: str | None, conversation: Sequence[Message], language: str, cap: int | None
    ) -> str:
        template = self.prompt_template or SUMMARY_PROMPTS[language]
        return template.format(
            previous_summary=previous if previous is not None else _NO_SUMMARY[language],
            new_messages=transcript_lines(conversation, language),
            length_hint=_LENGTH_HINTS[language].format(max_tokens=cap) if cap is not None else "",
            language=LANGUAGE_NAMES[language],
        )

    def _prepare(
        self, previous_summary: str | None, messages: Sequence[Message], max_tokens: int | None
    ) -> tuple[str | None, list[Message], list[Message], int | None, str]:
        previous = check_previous_summary(previous_summary)
        checked = check_messages(messages)
        conversation = conversation_messages(checked)
        cap = check_max_tokens(max_tokens)
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


# --------------------------------------------------------------------------- LLM fact extractor

FACT_PROMPTS = {
    "en": """Extract facts that the user states about themselves from the conversation below.

Conversation (each message starts with its number in brackets):
{messages}

Answer with a JSON array only, no other text. Each item is an object {"key": ..., "value": ..., "seq": ...}:
- key: a short snake_case name. Use these keys when they fit: name, age, city (where the user lives now), \
hometown, job, employer, pet, pet_name, birthday. For likes and dislikes use "preference:<thing>" with the \
value "likes" or "dislikes".
- value: the fact, short, in the words of the conversation.
- seq: the number of the message the fact comes from.
Only include facts the user stated or confirmed about themselves. Do not guess or invent anything.
If there are none, answer [].""",
    "zh": """从下面的对话中提取用户关于自己陈述的事实。

对话（每条消息前的方括号里是它的编号）：
{messages}

只回答一个 JSON 数组，不要任何其他文字。每一项是一个对象 {"key": ..., "value": ..., "seq": ...}：
- key：简短的英文 snake_case 名称。合适时使用这些 key：name、age、city（用户现在住的城市）、hometown、job、\
employer、pet、pet_name、birthday。喜欢和不喜欢的东西用 "preference:<东西>"，value 为 "likes" 或 "dislikes"。
- value：事实本身，简短，使用对话中的原词。
- seq：事实所在消息的编号。
只包括用户陈述或确认的关于自己的事实。不要猜测或编造任何内容。
如果没有，回答 []。""",
}
STRICT_RETRY_SUFFIXES = {
    "en": "\n\nYour previous answer was not valid JSON. Answer again with ONLY the JSON array, starting with [ "
    'and ending with ], for example [{"key": "name", "value": "Alice", "seq": 3}]. No explanation, no code fence.',
    "zh": "\n\n你上一次的回答不是有效的 JSON。请重新回答，只输出 JSON 数组，以 [ 开头、以 ] 结尾，例如 "
    '[{"key": "name", "value": "小明", "seq": 3}]。不要解释，不要代码块。',
}
_KEY_SYNONYMS = {
    "user_name": "name",
    "username": "name",
    "first_name": "name",
    "location": "city",
    "current_city": "city",
    "residence": "city",
    "lives_in": "city",
    "home_city": "city",
    "occupation": "job",
    "profession": "job",
    "company": "employer",
    "dog_name": "pet_name",
    "cat_name": "pet_name",
    "pet_type": "pet",
}


def _parse_json_list(answer: str) -> list[Any] | None:
    text = answer.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)\s*```", text, re.S)
    if fence:
        text = fence.group(1)
    candidates = [text]
    if "[" in text and "]" in text:
        candidates.append(text[text.index("[") : text.rindex("]") + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("facts"), list):
            data = data["facts"]
        if isinstance(data, list):
            return data
    return None


class LLMFactExtractor:
    """Facts extracted by any language model behind a ``complete(prompt) -> str`` callable.

    The model sees the numbered messages (English or Chinese prompt, after the
    conversation's language; see :data:`FACT_PROMPTS`) and answers with a JSON
    array of ``{"key", "value", "seq"}`` objects; a fact belongs to the speaker of the
    message its ``seq`` names (`Fact.speaker`, in a chat of several people, whose
    lines the prompt shows by name). An answer that is not valid
    JSON is retried once with a stricter prompt; if that fails too, a warning
    is logged (logger ``"convmem"``) and no facts are returned. Items without a
    usable key or value are skipped.

    ``complete`` may be sync or async: :meth:`aextract` awaits an async one and
    runs a sync one in a worker thread; :meth:`extract` raises
    :class:`ConfigError` for an async one (use ``aextract``).
    """

    def __init__(self, complete: CompleteFn, *, language: str = "auto") -> None:
        self.complete = check_complete(complete)
        self.language = check_language(language)

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        """Facts the user states in `messages`; one model call (two if the first answer is not JSON)."""
        return run_dialogue(self._dialogue(messages), self.complete, async_method="aextract")

    async def aextract(self, messages: Sequence[Message]) -> list[Fact]:
        """Async :meth:`extract`."""
        return await arun_dialogue(self._dialogue(messages), self.complete)

    def _dialogue(self, messages: Sequence[Message]) -> Dialogue[list[Fact]]:
        conversation = conversation_messages(check_messages(messages))
        return self._steps(conversation)

    def _steps(self, conversation: list[Message]) -> Dialogue[list[Fact]]:
        if not any(m.role is Role.USER for m in conversation):
            return []
        language = resolve_language(self.language, "\n".join(m.text for m in conversation))
        numbered = {(m.seq if m.seq is not None else index + 1): m for index, m in enumerate(conversation)}
        # A named speaker is shown by name, so the facts of a chat of several people can be
        # told apart (each fact belongs to the speaker of the message it cites).
        transcript = "\n".join(
            f"[{number}] {message_prefix(m, language)}{m.text.strip()}" for number, m in numbered.items()
        )
        prompt = FACT_PROMPTS[language].replace("{messages}", transcript)
        items = _parse_json_list((yield prompt))
        if items is None:
            items = _parse_json_list((yield prompt + STRICT_RETRY_SUFFIXES[language]))
        if items is None:
            logger.warning(
                "the fact-extraction model answered with invalid JSON twice; skipping facts of "
                "%d messages (seqs %s..%s)",
                len(conversation),
                conversation[0].seq,
                conversation[-1].seq,
            )
            return []
        return self._facts(items, numbered)

    @staticmethod
    def _facts(items: list[Any], numbered: dict[int, Message]) -> list[Fact]:
        from .fact_rules import trim_value  # the rule tables load on first use

        user_messages = [m for m in numbered.values() if m.role is Role.USER]
        fallback = user_messages[-1]
        facts = []
        for item in items:
            if not isinstance(item, dict):
                continue
            key, value = item.get("key"), item.get("value")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = str(value)
            if not isinstance(key, str) or not isinstance(value, str) or not key.strip() or not value.strip():
                logger.debug("skipping fact item without a usable key and value: %r", item)
                continue
            key = normalize_key(key)
            key = _KEY_SYNONYMS.get(key, key)
            seq = item.get("seq")
            message = (
                numbered.get(seq, fallback)
                if isinstance(seq, int) and not isinstance(seq, bool)
                else fallback
            )
            facts.append(
                Fact(
                    key,
                    trim_value(value) or value.strip(),
                    seq=message.seq,
                    timestamp=message.timestamp,
                    source=source_quote(message.text),
                    speaker=speaker_name(message),
                )
            )
        return facts

"""What in a conversation is worth keeping: which messages are conversation at all,
which texts are small talk, and how much information a sentence carries.

The recent window asks :func:`is_low_information` before it prunes a turn; the
extractive summarizer asks :func:`information_value` of every sentence it might
keep (:func:`cue_value` first, and :func:`is_filler` only of a sentence worth
keeping otherwise). Both rest on one small-talk lexicon (English and Chinese) and one
:func:`is_filler`, which answers at the granularity each caller needs.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence

from ._errors import InvalidMessageError
from ._language import HAN, iter_sentences
from ._models import Message, Role, Turn, TurnStatus

__all__ = [
    "check_messages",
    "conversation_messages",
    "cue_value",
    "information_value",
    "is_filler",
    "is_low_information",
    "says_nothing",
]

# --------------------------------------------------------------------------- messages


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


# --------------------------------------------------------------------------- small talk

# Whole replies that carry nothing, compared after lowercasing and collapsing
# punctuation ("Thanks!!" is "thanks"); a reply made of several of them in a
# row ("ok, thanks") counts too.
_STOCK_REPLIES = frozenset(
    phrase.strip()
    for phrase in """
    hi | hello | hey | hiya | yo | thanks | thank you | thank you so much | thanks a lot | thx | ty | ok
    | okay | k | kk | ok thanks | okay thanks | got it | cool | great | nice | sure | yes | yep | yeah
    | no problem | np | bye | goodbye | see you | good morning | good night | good evening | lol | haha
    | alright | fine | perfect | awesome | sounds good | i see | understood | noted
    | 你好 | 您好 | 嗨 | 哈喽 | 早 | 早上好 | 晚上好 | 晚安 | 谢谢 | 谢谢你 | 谢谢您 | 多谢 | 感谢 | 好的
    | 好 | 好吧 | 嗯 | 嗯嗯 | 哦 | 噢 | 哈哈 | 哈哈哈 | 收到 | 明白 | 明白了 | 知道了 | 了解 | 没问题 | 可以
    | 行 | 再见 | 拜拜 | ok谢谢 | 好的谢谢 | 谢啦
    """.split("|")  # noqa: SIM905 - a phrase list reads better as text
)
# Words and pieces of small talk: a text made only of these says nothing.
_EN_SMALL_TALK_WORDS = frozenset(
    """
    hi hello hey hiya yo thanks thank thx ty tks cheers ok okay k kk sure great cool nice awesome
    perfect got it bye goodbye see ya later good morning afternoon evening night yes yeah yep yup
    no nope nah so much a lot very really alright right fine welcome you're youre you np problem
    lol haha hah hmm um uh oh ah wow i understood noted sounds that makes sense that's thats please
    appreciate appreciated all the best again too for help your of course absolutely definitely
    indeed glad to happy anytime there dear wonderful excellent
    """.split()  # noqa: SIM905 - a word list reads better as text
)
# Matched longest first; text made only of these (and English small-talk words) is small talk.
_ZH_SMALL_TALK_PIECES = tuple(
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
# One alternation: a sentence is matched against all of them in one pass.
_BOILERPLATE = re.compile(
    "|".join(
        f"(?:{pattern})"
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
)

_STRIP = re.compile(r"[\s\W_]+", re.UNICODE)


def is_filler(text: str, *, stock_phrases_only: bool = False) -> bool:
    """Whether `text` says nothing worth keeping: a greeting, thanks, an acknowledgement.

    By default `text` is filler when it is made only of small-talk words
    ("thanks so much for your help!", "好的，谢谢你") or is assistant boilerplate
    ("How can I help you today?", "希望这对你有帮助"); the summarizer asks this of
    each sentence, where dropping one costs little.

    With ``stock_phrases_only=True`` only whole stock replies count: "thanks",
    "ok", "好的，谢谢", or a few of them in a row. The window asks this of a
    whole message, because pruning drops the entire turn; "thank you very
    much", "no" or "对" are kept there, while the summarizer drops them.
    """
    return _is_stock_reply(text) if stock_phrases_only else _is_small_talk(text)


def _normalized(text: str) -> str:
    return _STRIP.sub(" ", text.lower()).strip()


# Longer than this, a message is never only stock replies; checking it would
# cost a regex pass per message in every window selection.
_STOCK_REPLY_MAX_CHARS = 64


@functools.lru_cache(maxsize=4096)
def _is_stock_reply(text: str) -> bool:
    if len(text) > _STOCK_REPLY_MAX_CHARS:
        return False
    normalized = _normalized(text)
    if not normalized:
        return True
    if normalized in _STOCK_REPLIES or normalized.replace(" ", "") in _STOCK_REPLIES:
        return True
    # "thanks!! ok" or "好的，谢谢": every piece is a stock reply.
    pieces = [p for p in re.split(r"[\s,，。.!！?？~～]+", text.lower()) if p]
    return bool(pieces) and all(_normalized(p).replace(" ", "") in _STOCK_REPLIES for p in pieces)


_MARKS = re.compile(r"[^\w'\s]")
_SMALL_TALK_TOKEN = re.compile(r"[a-z']+|[^a-z'\s]+")


def _is_small_talk(sentence: str) -> bool:
    flat = " ".join(_MARKS.sub(" ", sentence.lower().replace("’", "'")).split())
    if _BOILERPLATE.fullmatch(flat) or _BOILERPLATE.fullmatch(flat.replace(" ", "")):
        return True
    others: list[str] = []
    # Token by token: most sentences are over at their first word that is not small talk.
    for match in _SMALL_TALK_TOKEN.finditer(flat):
        token = match.group()
        if token[0] in "abcdefghijklmnopqrstuvwxyz'":
            if token.strip("'") not in _EN_SMALL_TALK_WORDS and token not in _EN_SMALL_TALK_WORDS:
                return False
        else:
            others.append(token)
    remaining = "".join(c for c in "".join(others) if unicodedata.category(c)[0] not in "PSZC")
    position = 0
    while position < len(remaining):
        for piece in _ZH_SMALL_TALK_PIECES:
            if remaining.startswith(piece, position):
                position += len(piece)
                break
        else:
            return False
    return True


def says_nothing(text: str) -> bool:
    """Whether a whole message is small talk: every sentence of it is filler.

    "You're welcome! Let me know if you need anything else.", "😊", "好的，谢谢"
    and "不客气！" say nothing; "Thanks! My dog is called Rex." does. Recall
    never brings such a message back: it costs tokens and answers nothing.
    """
    return all(is_filler(sentence) for sentence in iter_sentences(text))


# A stock question with an answer longer than this may hold something worth keeping.
_FILLER_ANSWER_CHARS = 80


def is_low_information(turn: Turn) -> bool:
    """A turn without content worth keeping: a greeting, thanks or "ok" with a short reply.

    Turns with tool calls, or without a user question, are never low-information.
    """
    question = turn.question
    if question is None or any(m.tool_calls or m.role is Role.TOOL for m in turn.messages):
        return False
    if not is_filler(question.text, stock_phrases_only=True):
        return False
    answer = turn.answer
    return (
        answer is None
        or len(answer.text) <= _FILLER_ANSWER_CHARS
        or is_filler(answer.text, stock_phrases_only=True)
    )


# --------------------------------------------------------------------------- information value

# Each cue is English words, matched in any case at word boundaries, and Chinese words.
# Most sentences are ASCII; in them the English words are looked for in the lowercased
# sentence without IGNORECASE (which makes the regex engine fold every character it
# tries), and the Chinese words, which cannot occur there, are not looked for. Other
# sentences are matched against the whole pattern, as written.
_NUMBER = re.compile(
    r"\d|(?:[零一二两三四五六七八九十百千万亿]{2,}|[二两三四五六七八九十百千万亿])"
    r"(?=[个只条岁年月日号点块元天周次本张位名度%％]|分钟|小时|公里|米)"
)
_ASCII_NUMBER = re.compile(r"[0-9]")
_CASED_DATE = r"\bMarch\b|\bMay\s+\d|\b\d{1,2}(?:st|nd|rd|th)?\s+May\b"  # "may" is mostly a verb
_DATE_WORDS = (
    r"jan(?:uary)?|feb(?:ruary)?|apr(?:il)?|june?|july?|aug(?:ust)?"
    r"|sept?(?:ember)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?|monday|tuesday|wednesday|thursday"
    r"|friday|saturday|sunday|today|tonight|tomorrow|yesterday|weekend|next (?:week|month|year)"
    r"|last (?:week|month|year)|o'clock|[ap]\.m\.?"
)
_NUMERIC_DATE = r"\d{1,2}:\d{2}|\d{4}-\d{1,2}-\d{1,2}"
_DATE = re.compile(
    rf"{_CASED_DATE}|(?i:\b(?:{_DATE_WORDS})\b)|{_NUMERIC_DATE}"
    r"|今天|明天|后天|昨天|前天|今晚|明晚|周[一二三四五六日末]|星期[一二三四五六日天]|礼拜[一二三四五六日天]"
    r"|下周|上周|下个月|上个月|月底|月初|年底|年初|\d+月|\d+[日号]|上午|下午|晚上|早上|中午|凌晨"
)
_ASCII_CASED_DATE = re.compile(_CASED_DATE)  # each of its words holds "Ma"
_ASCII_DATE_WORD = re.compile(rf"\b(?:{_DATE_WORDS})\b")
# `_NUMERIC_DATE` in ASCII, where \d is [0-9], spelled to start with a digit class: the
# engine then skips to the next digit instead of trying the pattern at every character.
_ASCII_NUMERIC_DATE = re.compile(r"[0-9](?:[0-9]?:[0-9]{2}|[0-9]{3}-[0-9]{1,2}-[0-9]{1,2})")
_OPENING_MARKS = " \t\"'“‘(「-*•"
_CAPITALIZED = re.compile(r"\b[A-Z][A-Za-z0-9'’-]+")
_NOT_NAMES = frozenset(
    """
    I I'm I've I'll I'd OK Okay Ok Yes No Hi Hello Hey Thanks Sure The A An And But So It This That
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June
    July August September October November December User Assistant Tool
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_ZH_NAME_CUE = re.compile(r"叫|名叫|名字|姓|《[^》]+》|“[^”]+”")  # nothing ASCII
_DECISION_WORDS = (
    r"decid\w*|agree[ds]?|plan(?:s|ned|ning)?|will|going to|let'?s|must|need(?:s)? to|have to"
    r"|should|deadline|due|schedul\w*|book(?:ed)?|remind\w*|todo|to-do|confirm\w*|promis\w*"
    r"|appointment|meeting|budget|cancel\w*|order(?:ed)?|reserv\w*|choose|chose|pick(?:ed)?"
)
_DECISION = re.compile(
    rf"(?i:\b(?:{_DECISION_WORDS})\b)"
    r"|决定|确定|定了|同意|计划|打算|准备|安排|预约|预订|订了|约了|会议|截止|期限|提醒|记得|必须|需要|一定要"
    r"|待办|任务|答应|承诺|取消|预算|下单|选了|选择"
)
_ASCII_DECISION = re.compile(rf"\b(?:{_DECISION_WORDS})\b")
_FACT_WORDS = (
    r"name[sd]?|live[sd]?|moved?|(?:i|we|don't|do not)\s+(?:really\s+)?(?:like|love|prefer|hate|enjoy)"
    r"|allerg\w*|work(?:s|ed|ing)?|job|born|birthday|years old|married|wife|husband|son|daughter|kids?"
    r"|children|dog|cat|pets?|vegetarian|vegan|favou?rite|address|email|phone"
)
_FACT_CUE = re.compile(
    rf"(?i:\b(?:{_FACT_WORDS})\b)"
    r"|叫|名字|住|搬|来自|喜欢|爱|讨厌|过敏|工作|职业|出生|生日|岁|结婚|老婆|老公|妻子|丈夫|儿子|女儿"
    r"|孩子|狗|猫|宠物|养了|柯基|金毛|泰迪|柴犬|素食|最爱|地址|电话|邮箱"
)
_ASCII_FACT_CUE = re.compile(rf"\b(?:{_FACT_WORDS})\b")
_SELF_WORDS = r"i|i'm|i've|i'd|i'll|my|me|mine|we|our"
_SELF = re.compile(rf"(?i:\b(?:{_SELF_WORDS})\b)|我")
_ASCII_SELF = re.compile(rf"\b(?:{_SELF_WORDS})\b")
_QUESTION = re.compile(r"[?？]\W*$|[吗呢么]\W*$")
_LATIN_WORDS = re.compile(r"[A-Za-z0-9]+")

_ROLE_WEIGHT = {Role.USER: 1.0, Role.ASSISTANT: 0.7, Role.TOOL: 0.5}
_UNKNOWN_ROLE_WEIGHT = 0.9


def information_value(sentence: str, role: Role | None) -> float:
    """How much a sentence is worth keeping in a summary (0 for small talk).

    Counts what a later turn may need: numbers, dates and times, names,
    decisions and tasks, and what the user says about themselves. Users'
    sentences weigh more than the assistant's, which often restate or explain.
    """
    return 0.0 if is_filler(sentence) else cue_value(sentence, role)


def cue_value(sentence: str, role: Role | None) -> float:
    """`information_value` of `sentence` as if it were not small talk: what its cues
    are worth. A caller that keeps only sentences worth more than some value asks this
    first, and `is_filler` only of the sentences that pass."""
    if sentence.isascii():
        lowered = sentence.lower()
        number = _ASCII_NUMBER.search(sentence) is not None
        date = (
            _ASCII_DATE_WORD.search(lowered) is not None
            or (number and _ASCII_NUMERIC_DATE.search(sentence) is not None)
            or ("Ma" in sentence and _ASCII_CASED_DATE.search(sentence) is not None)
        )
        name_cue = False
        decision = _ASCII_DECISION.search(lowered) is not None
        about_facts = _ASCII_FACT_CUE.search(lowered) is not None
        about_self = role is Role.USER and _ASCII_SELF.search(lowered) is not None
        han = 0
    else:
        number = _NUMBER.search(sentence) is not None
        date = _DATE.search(sentence) is not None
        name_cue = _ZH_NAME_CUE.search(sentence) is not None
        decision = _DECISION.search(sentence) is not None
        about_facts = _FACT_CUE.search(sentence) is not None
        about_self = role is Role.USER and _SELF.search(sentence) is not None
        han = len(HAN.findall(sentence))
    value = 0.0
    if number:
        value += 2.0
    if date:
        value += 2.0
    opening = len(sentence) - len(sentence.lstrip(_OPENING_MARKS))
    names = [
        match.group()
        for match in _CAPITALIZED.finditer(sentence)
        if match.start() > opening and match.group() not in _NOT_NAMES
    ]
    value += 1.5 * min(len(names), 3)
    if name_cue:
        value += 1.5
    if decision:
        value += 2.0
    if about_facts:
        value += 2.0
    if about_self:
        # What users say about themselves (name, home, pets, allergies) stays
        # true for the whole session; it outranks any one-off detail.
        value += 4.0 if about_facts else 2.0
    if role is Role.USER and _QUESTION.search(sentence):
        value += 1.0
    content_units = len(_LATIN_WORDS.findall(sentence)) + han / 2
    value += min(content_units / 20, 1.0)
    weight = _ROLE_WEIGHT.get(role, _UNKNOWN_ROLE_WEIGHT) if role is not None else _UNKNOWN_ROLE_WEIGHT
    return value * weight

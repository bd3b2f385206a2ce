"""Core facts about the user: small key/value statements that outlive the window.

A :class:`FactExtractor` turns messages into :class:`Fact` objects
(``name = Alice``, ``city = Beijing``, ``preference:coffee = likes``); a
:class:`FactBook` holds a session's facts. A newer value for a key supersedes
the older one (a user who moved from Hangzhou to Beijing lives in Beijing) and
every value stays in the key's history.

Two extractors: :class:`RuleFactExtractor` (the offline default, English and
Chinese patterns over the user's own messages, precision over recall) and
:class:`LLMFactExtractor` (any model behind a ``complete(prompt) -> str``
callable, answering in JSON).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

from ._errors import InvalidMessageError, StoreError
from ._language import check_language, resolve_language, speaker_prefix, split_sentences
from ._models import Message, Role
from ._summarizer import (
    CompleteFn,
    Dialogue,
    arun_dialogue,
    check_complete,
    check_messages,
    conversation_messages,
    run_dialogue,
)

__all__ = [
    "Fact",
    "FactBook",
    "FactExtractor",
    "LLMFactExtractor",
    "RuleFactExtractor",
]

logger = logging.getLogger("convmem")

_SOURCE_CHARS = 160
# The rule extractor reads only this much of each message. The rules cost time
# in proportion to the text (a 10 MB paste took seconds inside `add`), while
# facts about the user are stated in conversation, not deep inside a pasted
# document or log.
_RULE_SCAN_CHARS = 20_000
_TRIM = " \t\r\n.,!?;:，。！？；：、…\"'“”‘’()（）[]【】「」『』《》~～"


def _normalize_key(key: str) -> str:
    """``"Pet Name"`` -> ``"pet_name"``; ``"Preference: Green Tea"`` -> ``"preference:green tea"``."""
    key = key.strip().lower()
    if ":" in key:
        head, tail = key.split(":", 1)
        return re.sub(r"[\s\-]+", "_", head.strip()) + ":" + " ".join(tail.split())
    return re.sub(r"[\s\-]+", "_", key)


def _same_value(first: str, second: str) -> bool:
    return " ".join(first.casefold().split()).strip(_TRIM) == " ".join(second.casefold().split()).strip(_TRIM)


@dataclasses.dataclass(frozen=True)
class Fact:
    """One thing known about the user, and where it came from.

    ``key`` is normalized (lowercase, snake_case before a ``:``), e.g.
    ``"name"``, ``"city"``, ``"pet_name"``, ``"preference:coffee"``; free keys
    are allowed. ``seq`` is the seq of the message that stated it, ``source``
    a short quote of that message.

    >>> Fact("Pet Name", "Duoduo", seq=12).key
    'pet_name'
    """

    key: str
    value: str
    seq: int | None = None
    timestamp: float = dataclasses.field(default_factory=time.time)
    source: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not _normalize_key(self.key).strip(":_"):
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
        object.__setattr__(self, "key", _normalize_key(self.key))
        object.__setattr__(self, "value", self.value.strip())
        object.__setattr__(self, "timestamp", float(self.timestamp))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

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


def _source_of(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _SOURCE_CHARS else flat[: _SOURCE_CHARS - 1] + "…"


def _facts_from(message: Message, pairs: Iterable[tuple[str, str]], source: str) -> list[Fact]:
    return [
        Fact(key, value, seq=message.seq, timestamp=message.timestamp, source=_source_of(source))
        for key, value in pairs
    ]


# --------------------------------------------------------------------------- rule patterns

Pairs = list[tuple[str, str]]
_Rule = tuple[re.Pattern[str], Callable[[re.Match[str]], Pairs]]

_QUESTION_END = re.compile(r"(?:[?？]|[吗么嘛][\W_]*)\s*$")
_HYPOTHETICAL = re.compile(
    r"(?i:\b(?:if|suppose|imagine|pretend|would|wish)\b)|如果|假如|要是|假设|假使|想象|但愿|希望"
)
_CAP_WORDS = r"[A-Z][A-Za-z'’-]*(?:\s+[A-Z][A-Za-z'’-]*){0,2}"
_ANY_WORDS = r"[A-Za-z][A-Za-z'’-]*(?:\s+[A-Za-z][A-Za-z'’-]*){0,2}"
_PLACE = r"(?:the\s+)?[A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|of|de|la|upon))*"
# Capitalized words that follow "I'm" without being a name.
_NOT_A_NAME = frozenset(
    """
    not so very just really also still here there back home done fine good ok okay sorry sure glad happy
    afraid tired busy ready new free single married pregnant vegan vegetarian american british english
    chinese canadian french german japanese korean indian australian italian spanish mexican russian
    brazilian dutch swiss irish scottish welsh christian muslim jewish catholic buddhist hindu atheist
    gay straight monday tuesday wednesday thursday friday saturday sunday today tomorrow tonight
    from in at on with going trying looking working living thinking planning the a an
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_NOT_A_PLACE = frozenset(
    ["a", "an", "my", "our", "his", "her", "their", "this", "that", "here", "there", "home", "i", "it"]
)
_NAME_TAIL_WORDS = frozenset(
    ["and", "but", "or", "so", "by", "from", "btw", "though", "too", "also", "now", "here"]
)
_EN_PRONOUN_OBJECTS = frozenset(
    """
    it that this these those you him her them us me what how when where why who which whom your his their
    our its there here one ones something anything everything nothing being having doing myself yourself
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_EN_OBJECT_STOP = re.compile(
    r"(?i)\s*(?:[.!?;:]|\b(?:but|because|since|though|although|when|whenever|if|while|so|as|than|over|more"
    r"|better|rather|very much|a lot|too|anymore|any more|nowadays|these days|lately"
    r"|especially|particularly|mostly|usually|often|sometimes|always|every)\b)"
)
_EN_ARTICLES = re.compile(r"(?i)^(?:a|an|the|my|some|all|most|good|to)\s+")
_SPECIES_EN = (
    r"dog|puppy|cat|kitten|rabbit|bunny|hamster|parrot|bird|fish|turtle|tortoise|guinea pig|snake|lizard"
    r"|horse|ferret|hedgehog|corgi|husky|poodle|labrador|golden retriever|beagle|bulldog|pug|chihuahua"
    r"|shiba inu|dachshund|terrier"
)
_SPECIES_CANONICAL = {"puppy": "dog", "kitten": "cat", "bunny": "rabbit"}
_PROFESSIONS_EN = (
    r"engineer|developer|programmer|designer|teacher|doctor|nurse|lawyer|student|manager|accountant|scientist"
    r"|researcher|writer|artist|chef|cook|pilot|architect|consultant|analyst|professor|dentist|pharmacist"
    r"|photographer|musician|driver|farmer|firefighter|police officer|journalist|editor|translator"
    r"|entrepreneur|founder|intern|nurse|therapist|librarian|mechanic|electrician|plumber|veterinarian"
)


def _trim(value: str) -> str:
    return value.strip(_TRIM)


def _cut_name_tail(value: str) -> str:
    words = value.split()
    for index, word in enumerate(words):
        if word.lower() in _NAME_TAIL_WORDS:
            words = words[:index]
            break
    return _trim(" ".join(words))


def _en_name(match: re.Match[str], *, check_common_words: bool = True) -> Pairs:
    name = _cut_name_tail(match.group(1))
    if not name or (check_common_words and name.split()[0].lower() in _NOT_A_NAME):
        return []
    if name.split()[0].lower() in ("not", "a", "an", "the", "secret", "irrelevant", "unknown"):
        return []
    return [("name", name)]


def _en_place(key: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        place = re.sub(r"^the\s+", "", _trim(match.group(1)))
        place = re.sub(r"\s+(?:of|de|la|upon)$", "", place)
        if not place or place.split()[0].lower() in _NOT_A_PLACE:
            return []
        return [(key, place)]

    return handle


def _en_objects(text: str) -> list[str]:
    stop = _EN_OBJECT_STOP.search(text)
    text = text[: stop.start()] if stop else text
    objects = []
    for item in re.split(r"\s*,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|\s*&\s*", text):
        item = _EN_ARTICLES.sub("", _trim(item)).strip()
        words = item.lower().split()
        if not words or len(words) > 4 or any(word in _EN_PRONOUN_OBJECTS for word in words):
            continue
        objects.append(" ".join(words))
    return objects


def _en_preference(value: str) -> Callable[[re.Match[str]], Pairs]:
    canonical = {
        "like": "likes",
        "enjoy": "likes",
        "love": "loves",
        "adore": "loves",
        "prefer": "prefers",
        "hate": "hates",
        "detest": "hates",
    }

    def handle(match: re.Match[str]) -> Pairs:
        verb = (match.groupdict().get("verb") or "").lower()
        said = canonical.get(verb, value) if value != "dislikes" else value
        wanted = match.group("object")
        if said == "prefers":  # "prefer tea to coffee": the preference is tea
            wanted = re.split(r"\s+to\s+", wanted, maxsplit=1)[0]
        return [(f"preference:{thing}", said) for thing in _en_objects(wanted)]

    return handle


def _en_pet(match: re.Match[str]) -> Pairs:
    species = match.group("species").lower()
    pairs = [("pet", _SPECIES_CANONICAL.get(species, species))]
    name = match.groupdict().get("name")
    if name:
        name = _cut_name_tail(name)
        if name and name.split()[0].lower() not in _NOT_A_NAME:
            pairs.append(("pet_name", name))
    return pairs


def _age(match: re.Match[str]) -> Pairs:
    age = _number(match.group(1))
    return [("age", str(age))] if age is not None and 0 < age < 130 else []


def _single(key: str, *, max_words: int = 6) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        value = _trim(match.group(1))
        if not value or len(value.split()) > max_words:
            return []
        return [(key, value)]

    return handle


_EN_RULES: list[_Rule] = [
    (
        re.compile(r"(?i:\bmy\s+name(?:'s|\s+is)\s+)(" + _ANY_WORDS + ")"),
        lambda m: _en_name(m, check_common_words=False),
    ),
    (
        re.compile(
            r"(?i:\b(?:you\s+can\s+|please\s+|just\s+)?call\s+me\s+)(" + _CAP_WORDS + r")(?=\s*(?:$|[,.!;]))"
        ),
        _en_name,
    ),
    (
        re.compile(
            r"(?:^|(?<=[\s,]))(?i:i(?:'m|\s+am)\s+)([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)"
            r"(?=\s*(?:$|[,.!;]|\band\b|\bfrom\b|\bby the way\b))"
        ),
        _en_name,
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:now\s+|currently\s+|still\s+|also\s+|actually\s+)?live\s+in\s+"
            r"|\bi(?:'m|\s+am)\s+(?:now\s+|currently\s+)?living\s+in\s+"
            r"|\bi(?:'ve|\s+have)?\s+(?:just\s+|recently\s+|finally\s+)?moved\s+to\s+)(" + _PLACE + ")"
        ),
        _en_place("city"),
    ),
    (
        re.compile(
            r"(?i:\bi(?:'m|\s+am)\s+(?:originally\s+)?from\s+|\bi\s+(?:originally\s+)?come\s+from\s+"
            r"|\bi\s+was\s+born\s+in\s+)(" + _PLACE + ")"
        ),
        _en_place("hometown"),
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:really\s+|also\s+|just\s+|absolutely\s+|do\s+|totally\s+|especially\s+)*"
            r"(?P<verb>like|love|adore|enjoy|prefer)\s+)(?P<object>[^.!?;]+)"
        ),
        _en_preference("likes"),
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:really\s+|just\s+|also\s+)*(?:don't|do\s+not|dont)\s+(?:really\s+)?"
            r"(?:like|love|enjoy)\s+)(?P<object>[^.!?;]+)"
        ),
        _en_preference("dislikes"),
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:really\s+|just\s+|absolutely\s+)*(?P<verb>hate|detest|can't\s+stand"
            r"|cannot\s+stand)\s+)(?P<object>[^.!?;]+)"
        ),
        _en_preference("hates"),
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:have|'ve\s+got|have\s+got|got|own|adopted)\s+(?:a|an|one)\s+"
            r"(?:little\s+|cute\s+|new\s+|young\s+|old\s+|big\s+|small\s+)?)"
            r"(?P<species>(?i:"
            + _SPECIES_EN
            + r"))(?:\s*,?\s*(?i:named|called)\s+(?P<name>"
            + _CAP_WORDS
            + "))?"
            r"(?=\W|$)"
        ),
        _en_pet,
    ),
    (
        re.compile(
            r"(?i:\bmy\s+(?:little\s+|new\s+|old\s+)?)(?P<species>(?i:" + _SPECIES_EN + r"))"
            r"(?i:(?:'s|’s)\s+name\s+is|\s+is\s+(?:named|called))\s+(?P<name>[A-Za-z][A-Za-z'’-]*)"
        ),
        _en_pet,
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:currently\s+|now\s+)?work\s+as\s+(?:an?\s+)?)([A-Za-z][A-Za-z -]{1,40}?)"
            r"(?=\s*(?:$|[,.!?;]|\b(?:at|in|for|and|but|since|now)\b))"
        ),
        _single("job", max_words=4),
    ),
    (
        re.compile(
            r"(?i:\bi(?:'m|\s+am)\s+(?:an?\s+)?)((?:[A-Za-z-]+\s+){0,2}(?i:" + _PROFESSIONS_EN + r"))"
            r"(?=\s*(?:$|[,.!?;]|\b(?:at|in|for|and|but|from)\b))"
        ),
        _single("job", max_words=4),
    ),
    (
        re.compile(
            r"(?i:\bi\s+(?:currently\s+|now\s+)?work\s+(?:at|for)\s+)((?:the\s+)?[A-Z][\w&.'’-]*"
            r"(?:\s+[A-Z][\w&.'’-]*){0,3})"
        ),
        _single("employer"),
    ),
    (re.compile(r"(?i:\bi(?:'m|\s+am)\s+)(\d{1,3})(?i:\s*(?:years?|yrs?)[\s-]*old\b|\s*y/?o\b)"), _age),
    (re.compile(r"(?i:\bi\s+(?:just\s+)?turned\s+)(\d{1,3})\b"), _age),
    (re.compile(r"(?i:\bmy\s+birthday\s+is\s+(?:on\s+)?)([^,.!?;]{3,30})"), _single("birthday")),
]

# --- Chinese

_ZH_VALUE = r"([^\s，,。.！!？?；;：:、“”\"'‘’（）()【】《》~～]{1,24})"
_ZH_DIGITS = "零〇一二两三四五六七八九十百"
_ZH_NUMBER_VALUE = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}


def _number(text: str) -> int | None:
    """``"25"`` or ``"二十五"`` -> 25 (Chinese numerals up to 999)."""
    if text.isdigit():
        return int(text)
    total, current = 0, 0
    for char in text:
        if char in _ZH_NUMBER_VALUE:
            current = _ZH_NUMBER_VALUE[char]
        elif char == "十":
            total += (current or 1) * 10
            current = 0
        elif char == "百":
            total += (current or 1) * 100
            current = 0
        else:
            return None
    return total + current


def _cut_at(value: str, stops: Sequence[str], *, min_index: int = 1) -> str:
    """`value` up to the first stop phrase found at or after `min_index`."""
    end = len(value)
    for stop in stops:
        found = value.find(stop, min_index)
        if found != -1:
            end = min(end, found)
    for index, char in enumerate(value[:end]):
        if index >= min_index and char.isdigit():
            end = index
            break
    return value[:end]


_ZH_NAME_STOPS = (
    "今年",
    "来自",
    "住在",
    "目前",
    "现在",
    "喜欢",
    "是",
    "我",
    "的",
    "呢",
    "啊",
    "吧",
    "了",
    "哦",
    "啦",
    "在",
    "就",
    "也",
    "和",
    "岁",
    "今",
    "好了",
    "即可",
    "，",
)
_ZH_PLACE_STOPS = (
    "了",
    "去",
    "来",
    "工作",
    "生活",
    "上学",
    "读书",
    "已经",
    "好几",
    "快",
    "有",
    "的",
    "这边",
    "那边",
    "附近",
    "啦",
    "呢",
    "吧",
    "啊",
    "呀",
    "吗",
    "住",
    "跟",
    "一",
    "两",
    "三",
    "四",
    "五",
    "六",
    "七",
    "八",
    "九",
    "十",
    "几",
    "半",
    "以后",
    "之后",
    "这里",
    "那里",
    "定居",
    "发展",
    "打工",
    "上班",
)
_ZH_NOT_PLACES = (
    "家",
    "学校",
    "宿舍",
    "公司",
    "酒店",
    "宾馆",
    "这",
    "那",
    "附近",
    "隔壁",
    "楼",
    "一",
    "个",
    "哪",
    "外地",
    "本地",
    "当地",
    "什么",
    "乡下",
    "城里",
    "市区",
    "郊区",
    "国外",
    "海外",
    "老家",
    "同一",
)
_ZH_PREFERENCE_STOPS = (
    "了",
    "呢",
    "啊",
    "吧",
    "呀",
    "啦",
    "哦",
    "因为",
    "所以",
    "但是",
    "但",
    "不过",
    "而且",
    "也",
    "的时候",
    "得很",
    "得不得了",
    "得要命",
    "极了",
    "死了",
)
_ZH_NOT_OBJECTS = (
    "你",
    "您",
    "他",
    "她",
    "它",
    "这",
    "那",
    "什么",
    "哪",
    "的",
    "上",
    "死",
    "自己",
    "大家",
    "谁",
    "怎么",
    "着",
    "过",
)
_ZH_ANIMALS = (
    "狗",
    "犬",
    "猫",
    "兔",
    "鼠",
    "鹦鹉",
    "鸟",
    "鱼",
    "龟",
    "柯基",
    "金毛",
    "哈士奇",
    "泰迪",
    "柴犬",
    "布偶",
    "英短",
    "美短",
    "拉布拉多",
    "萨摩耶",
    "边牧",
    "比熊",
    "博美",
    "蛇",
    "蜥蜴",
    "刺猬",
    "貂",
)
_ZH_PET_CANONICAL = {
    "小狗": "狗",
    "狗狗": "狗",
    "小狗狗": "狗",
    "小猫": "猫",
    "猫咪": "猫",
    "小猫咪": "猫",
    "猫猫": "猫",
    "小兔子": "兔子",
    "兔兔": "兔子",
}
_ZH_JOB_SUFFIXES = (
    "师",
    "员",
    "生",
    "家",
    "工",
    "手",
    "长",
    "医生",
    "护士",
    "会计",
    "司机",
    "记者",
    "编辑",
    "警察",
    "经理",
    "总监",
    "老板",
    "创始人",
    "销售",
    "主播",
    "演员",
    "歌手",
    "翻译",
    "运营",
    "开发",
    "博士",
    "研究生",
    "律师",
    "老师",
    "教授",
    "厨师",
    "作家",
    "画家",
)
_ZH_NOT_JOBS = ("好", "坏", "新", "大", "小", "个", "一", "普通", "学", "男", "女", "老", "人")


def _zh_name(match: re.Match[str]) -> Pairs:
    name = _trim(_cut_at(match.group(1), _ZH_NAME_STOPS, min_index=2))
    if re.fullmatch(r"[A-Za-z][A-Za-z'’.-]{0,30}", name):
        return [("name", name)]
    if not re.fullmatch(r"[\u4e00-\u9fff·]{2,4}", name) or name in ("什么", "啥名字", "名字"):
        return []
    return [("name", name)]


def _zh_place(key: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        place = _trim(_cut_at(match.group(1), _ZH_PLACE_STOPS))
        if len(place) < 2 or place.startswith(_ZH_NOT_PLACES) or len(place) > 12:
            return []
        return [(key, place)]

    return handle


def _zh_preference(value: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        text = _cut_at(match.group(1), _ZH_PREFERENCE_STOPS)
        pairs = []
        for item in re.split(r"和|、|还有|以及|跟|与", text):
            item = _trim(item)
            if not item or len(item) > 10 or item.startswith(_ZH_NOT_OBJECTS):
                continue
            pairs.append((f"preference:{item.lower()}", value))
        return pairs

    return handle


def _zh_species(text: str) -> str | None:
    species = _trim(re.split(r"[，,。！？叫名它她他的]", text, maxsplit=1)[0])
    if not species or len(species) > 6 or not any(animal in species for animal in _ZH_ANIMALS):
        return None
    return _ZH_PET_CANONICAL.get(species, species)


def _zh_pet_name(text: str) -> str | None:
    name = _trim(
        _cut_at(
            text, ("了", "呢", "啊", "吧", "哦", "啦", "，", "是", "今年", "很", "特别", "非常"), min_index=1
        )
    )
    if re.fullmatch(r"[\u4e00-\u9fff]{1,4}|[A-Za-z][A-Za-z'’-]{0,20}", name):
        return name
    return None


_ZH_PET_NAME_AFTER = re.compile(
    r"^[，,]?(?:它|牠|她|他)?(?:的名字)?(?:叫做|叫|名叫|名字叫|名字是)" + _ZH_VALUE
)
# A pet's name in the sentence after the one that introduced the pet.
_PET_NAME_FOLLOWING = re.compile(
    r"^(?:(?:它|牠|她|他)(?:的名字)?(?:叫做|叫|名叫|名字叫|名字是)" + _ZH_VALUE + ")"
    r"|^(?i:(?:its|his|her)\s+name\s+is\s+|(?:it|he|she)(?:'s|\s+is)\s+(?:called|named)\s+)([A-Za-z][A-Za-z'-]*)"
)


def _zh_pet_owned(match: re.Match[str]) -> Pairs:
    text = match.group(1)
    species = _zh_species(text)
    if species is None:
        return []
    pairs = [("pet", species)]
    species_end = len(re.split(r"[，,。！？叫名它她他的]", text, maxsplit=1)[0])
    name_match = _ZH_PET_NAME_AFTER.match(match.string[match.start(1) + species_end :])
    if name_match:
        name = _zh_pet_name(name_match.group(1))
        if name:
            pairs.append(("pet_name", name))
    return pairs


def _zh_pet_named(match: re.Match[str]) -> Pairs:
    species = _zh_species(match.group(1))
    name = _zh_pet_name(match.group(2))
    if species is None or name is None:
        return []
    return [("pet", species), ("pet_name", name)]


def _zh_job(match: re.Match[str]) -> Pairs:
    job = _trim(match.group(1))
    if not (2 <= len(job) <= 10) or not job.endswith(_ZH_JOB_SUFFIXES) or job.startswith(_ZH_NOT_JOBS):
        return []
    return [("job", job)]


def _zh_workplace(match: re.Match[str]) -> Pairs:
    place = _trim(match.group(1))
    if not (2 <= len(place) <= 15) or place.startswith(_ZH_NOT_PLACES):
        return []
    return [("workplace", place)]


_ZH_ADVERBS = "(?:也|还|很|最|特别|非常|真的|超|挺|比较|更|一直|都|蛮|好)*"
_ZH_RULES: list[_Rule] = [
    (
        re.compile(
            r"我叫(?!了|过|车|外卖|醒|人|他|她|你|它|一|个|出租|滴滴|快递|救护|什么|啥|做)" + _ZH_VALUE
        ),
        _zh_name,
    ),
    (re.compile(r"我(?:的名字|的中文名字?|的英文名字?)(?:是|叫)" + _ZH_VALUE), _zh_name),
    (re.compile(r"我名叫" + _ZH_VALUE), _zh_name),
    (re.compile(r"(?:^|[，,])(?:你|您|大家)?(?:可以|就)?叫我(?!一声|起床|去|来)" + _ZH_VALUE), _zh_name),
    (
        re.compile(r"我(?:现在|目前|如今|已经|一直|还|暂时)?(?:住在|居住在|生活在|定居在)" + _ZH_VALUE),
        _zh_place("city"),
    ),
    (
        re.compile(
            r"我(?:最近|刚刚|刚|已经|上个月|去年|今年|前不久)?搬(?:家)?(?:到了|到|去了|去)" + _ZH_VALUE
        ),
        _zh_place("city"),
    ),
    (re.compile(r"我(?:是|也是)?(?:来自|从)(?!哪)" + _ZH_VALUE + r"(?:来的)?"), _zh_place("hometown")),
    (re.compile(r"我(?:的)?老家(?:是|在)" + _ZH_VALUE), _zh_place("hometown")),
    (re.compile(r"我是([\u4e00-\u9fff]{2,6}?)人(?=[，,。.！!\s]|$)"), _zh_place("hometown")),
    (re.compile(r"我最喜欢的[^，。！？,.!?]{0,6}?是" + _ZH_VALUE), _zh_preference("likes")),
    (
        re.compile(r"我" + _ZH_ADVERBS + r"(?:喜欢|爱|热爱|偏爱)(?!上|过)" + _ZH_VALUE),
        _zh_preference("likes"),
    ),
    (re.compile(r"我" + _ZH_ADVERBS + r"(?:不喜欢|不爱|不太喜欢)" + _ZH_VALUE), _zh_preference("dislikes")),
    (re.compile(r"我" + _ZH_ADVERBS + r"(?:讨厌|受不了)" + _ZH_VALUE), _zh_preference("hates")),
    (
        re.compile(r"我(?:家)?(?:养了|养着|还养了|家里有|有)(?:一|两|三|几|\d)?(?:只|条|头|匹)" + _ZH_VALUE),
        _zh_pet_owned,
    ),
    (
        re.compile(
            r"我(?:的|家的|家)((?:小)?[\u4e00-\u9fff]{1,5}?)(?:的名字)?(?:叫做|叫|名叫|名字叫|名字是)"
            + _ZH_VALUE
        ),
        _zh_pet_named,
    ),
    (
        re.compile(
            r"我(?:今年|已经|才|都|现在)?([0-9]{1,3}|["
            + _ZH_DIGITS
            + r"]{1,4})(?:周)?岁(?!的时候|那年|时|之前|以前|以后)"
        ),
        _age,
    ),
    # "我叫小明，今年25岁": the age clause drops its subject, which is still the user.
    (
        re.compile(
            r"^我(?:叫|是|的名字是)[^，,。；;]{1,10}[，,]\s*(?:今年|已经|现在)?([0-9]{1,3}|["
            + _ZH_DIGITS
            + r"]{1,4})(?:周)?岁(?!的时候|那年|时|之前|以前|以后)"
        ),
        _age,
    ),
    (
        re.compile(r"我(?:现在|目前|一直)?在([^\s，,。.！!？?；;：:、]{2,15}?)(?:工作|上班|实习|任职)"),
        _zh_workplace,
    ),
    (
        re.compile(
            r"我(?:是一名|是一个|是个|是名|的职业是|的工作是|是做|是当)([\u4e00-\u9fffA-Za-z]{2,10}?)(?:的)?"
            r"(?=[，,。.！!\s]|$)"
        ),
        _zh_job,
    ),
    (re.compile(r"我的生日是" + _ZH_VALUE), _single("birthday")),
]


def _sentences_to_scan(text: str) -> list[str]:
    """The sentences of the first `_RULE_SCAN_CHARS` characters of `text`."""
    sentences = split_sentences(text[:_RULE_SCAN_CHARS].replace("’", "'"))
    if len(text) > _RULE_SCAN_CHARS and sentences:
        # The cut may fall inside a sentence; half a sentence can state a wrong fact ("I live in New").
        sentences.pop()
    return sentences


def _rule_pairs(sentence: str, rules: Sequence[_Rule]) -> Pairs:
    pairs: Pairs = []
    for pattern, handle in rules:
        for match in pattern.finditer(sentence):
            if _HYPOTHETICAL.search(sentence[: match.start()]):
                continue
            pairs.extend(handle(match))
    return pairs


class RuleFactExtractor:
    """The offline default: English and Chinese patterns over the user's own messages.

    Recognizes names (``my name is``, ``call me``, ``I'm Alice``, 我叫, 我的名字是),
    where the user lives (``I live in``, ``I moved to``, 我住在, 我搬到了) and comes
    from (``I'm from``, 我来自), likes and dislikes (``I like/love/prefer``,
    ``I don't like/hate``, 我喜欢, 我不喜欢), pets (``I have a dog named X``,
    ``my dog's name is X``, 我养了一只狗…叫X, 我的狗叫X), work (``I work as/at``,
    我在X工作, 我是一名X), age (``I'm 30 years old``, 我今年30岁) and birthday.

    Precision over recall: questions, hypotheticals ("if I lived in Paris"),
    past states ("I used to live in") and other people ("my sister is called
    Anna") are not facts about the user and are ignored. Only user messages
    are read, and of each only the first 20,000 characters.
    """

    def __init__(self, language: str = "auto") -> None:
        self.language = check_language(language)
        self._rules: list[_Rule] = []
        if self.language in ("auto", "en"):
            self._rules += _EN_RULES
        if self.language in ("auto", "zh"):
            self._rules += _ZH_RULES

    def extract(self, messages: Sequence[Message]) -> list[Fact]:
        """Facts stated in the user messages of `messages`, in the order stated."""
        facts: list[Fact] = []
        for message in check_messages(messages):
            if message.role is not Role.USER:
                continue
            pet_without_name = False
            for sentence in _sentences_to_scan(message.text):
                if _QUESTION_END.search(sentence):
                    continue
                pairs = _rule_pairs(sentence, self._rules)
                keys = {key for key, _ in pairs}
                if pet_without_name and not keys:
                    following = _PET_NAME_FOLLOWING.match(sentence)
                    name = following and _zh_pet_name(following.group(1) or following.group(2))
                    if name:
                        pairs = [("pet_name", name)]
                        keys = {"pet_name"}
                if keys:
                    pet_without_name = "pet" in keys and "pet_name" not in keys
                facts.extend(_facts_from(message, pairs, sentence))
        return facts

    async def aextract(self, messages: Sequence[Message]) -> list[Fact]:
        """Same as :meth:`extract`; it does no I/O, so it runs inline."""
        return self.extract(messages)


# --------------------------------------------------------------------------- LLM extractor

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
    array of ``{"key", "value", "seq"}`` objects. An answer that is not valid
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
        transcript = "\n".join(
            f"[{number}] {speaker_prefix(m.role, language)}{m.text.strip()}" for number, m in numbered.items()
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
            key = _normalize_key(key)
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
                    _trim(value) or value.strip(),
                    seq=message.seq,
                    timestamp=message.timestamp,
                    source=_source_of(message.text),
                )
            )
        return facts


# --------------------------------------------------------------------------- fact book

_KEY_LABELS = {
    "name": ("name", "名字"),
    "city": ("city", "所在城市"),
    "hometown": ("hometown", "家乡"),
    "age": ("age", "年龄"),
    "job": ("job", "职业"),
    "employer": ("employer", "工作单位"),
    "workplace": ("workplace", "工作地点"),
    "pet": ("pet", "宠物"),
    "pet_name": ("pet name", "宠物名字"),
    "birthday": ("birthday", "生日"),
}
_PREFERENCE_LABELS = {
    "likes": ("likes", "喜欢"),
    "loves": ("loves", "喜爱"),
    "prefers": ("prefers", "偏好"),
    "dislikes": ("dislikes", "不喜欢"),
    "hates": ("hates", "讨厌"),
}
_FACTBOOK_FORMAT = 1


class FactBook:
    """A session's facts: the current value of each key, newest first, with history.

    Thread-safe. ``apply`` folds in extracted facts: a new value for a key
    supersedes the current one and joins its history; the same value again
    (ignoring case, spacing and end punctuation) changes nothing; a fact from
    an older message than the current value's (a late or repeated extraction)
    joins the history without superseding. ``forget(key)`` removes a key and
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

    def apply(self, facts: Iterable[Fact]) -> list[Fact]:
        """Fold `facts` (oldest first) in; return those that became a key's current value."""
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
                history = self._history.setdefault(fact.key, [])
                current = history[-1] if history else None
                if current is not None and _same_value(current.value, fact.value):
                    continue
                if (
                    current is not None
                    and fact.seq is not None
                    and current.seq is not None
                    and fact.seq < current.seq
                ):
                    self._insert_older(history, fact)
                    continue
                history.append(fact)
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
        if position > 0 and _same_value(history[position - 1].value, fact.value):
            return  # the value it would repeat is already there
        if position < len(history) and _same_value(history[position].value, fact.value):
            return
        history.insert(position, fact)

    def current(self) -> list[Fact]:
        """The current value of every key, newest first (by time stated, then seq)."""
        with self._lock:
            latest = [(history[-1], self._updated[key]) for key, history in self._history.items() if history]
        latest.sort(
            key=lambda pair: (pair[0].timestamp, pair[0].seq if pair[0].seq is not None else -1, pair[1]),
            reverse=True,
        )
        return [fact for fact, _ in latest]

    def get(self, key: str) -> Fact | None:
        """The current fact for `key`, or ``None``."""
        with self._lock:
            history = self._history.get(_normalize_key(key))
            return history[-1] if history else None

    def history(self, key: str) -> list[Fact]:
        """Every value `key` has had, oldest first (empty for an unknown key)."""
        with self._lock:
            return list(self._history.get(_normalize_key(key), ()))

    def forget(self, key: str) -> bool:
        """Remove `key` and its history; ``False`` when there was no such key."""
        key = _normalize_key(key)
        with self._lock:
            history = self._history.pop(key, None)
            self._updated.pop(key, None)
            if not history:
                return False
            seqs = [fact.seq for fact in history if fact.seq is not None]
            if seqs:
                self._forgotten[key] = max(max(seqs), self._forgotten.get(key, -1))
            return True

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for history in self._history.values() if history)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None

    def render_lines(self, language: str) -> list[str]:
        """Current facts as readable lines, newest first: ``"name: Alice"`` / ``"名字：小明"``,
        ``"likes: coffee"`` / ``"喜欢：咖啡"``. `language` is ``"en"`` or ``"zh"``."""
        language = check_language(language, allow_auto=False)
        zh = language == "zh"
        separator = "：" if zh else ": "
        lines = []
        for fact in self.current():
            if fact.key.startswith("preference:"):
                thing = fact.key.split(":", 1)[1]
                labels = _PREFERENCE_LABELS.get(fact.value.lower())
                if labels:
                    lines.append(labels[zh] + separator + thing)
                else:
                    lines.append(thing + separator + fact.value)
                continue
            labels = _KEY_LABELS.get(fact.key)
            label = labels[zh] if labels else (fact.key if zh else fact.key.replace("_", " "))
            lines.append(label + separator + fact.value)
        return lines

    def to_json(self) -> str:
        """The whole book (current values, history, forgotten keys) as JSON text."""
        with self._lock:
            keys = sorted(self._history, key=lambda key: self._updated.get(key, 0))
            data = {
                "format": _FACTBOOK_FORMAT,
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
        if not isinstance(data, dict) or found_format != _FACTBOOK_FORMAT:
            raise StoreError(
                f"the stored fact book has an unknown layout (format {found_format!r}, expected "
                f"{_FACTBOOK_FORMAT}); delete or rebuild it"
            )
        history, forgotten = data.get("history"), data.get("forgotten", {})
        if not isinstance(history, dict) or not isinstance(forgotten, dict):
            raise StoreError("the stored fact book needs a 'history' object and a 'forgotten' object")
        book = cls()
        try:
            for key, entries in history.items():
                if not isinstance(entries, list):
                    raise InvalidMessageError(f"history of {key!r} must be a list")
                facts = [Fact.from_dict(entry) for entry in entries]
                if facts:
                    book._history[_normalize_key(key)] = facts
                    book._clock += 1
                    book._updated[_normalize_key(key)] = book._clock
            for key, seq in forgotten.items():
                if isinstance(seq, bool) or not isinstance(seq, int):
                    raise InvalidMessageError(f"forgotten seq of {key!r} must be an int, got {seq!r}")
                book._forgotten[_normalize_key(key)] = seq
        except InvalidMessageError as exc:
            raise StoreError(f"the stored fact book holds a malformed fact: {exc}") from None
        return book

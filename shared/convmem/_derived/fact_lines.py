"""How facts read in a prompt: one line each, a readable label and the value.

``name: Alice`` / ``名字：小明``, ``likes: coffee`` / ``喜欢：咖啡``, ``favourite
colour: teal`` / ``最喜欢的颜色：蓝色``. Each part is kept to one line and capped:
an LLM extractor may return anything, and a fact must not grow into a section
of its own.
"""

from __future__ import annotations

import unicodedata

from .._language import LABEL_SEPARATORS

__all__ = ["FACT_KEY_MAX_CHARS", "FACT_VALUE_MAX_CHARS", "fact_line"]

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

FACT_KEY_MAX_CHARS = 60
FACT_VALUE_MAX_CHARS = 200
"""A rendered fact line is ``label: value`` on one line, each part capped."""


def fact_line(key: str, value: str, language: str) -> str:
    """The fact `key` = `value` as one readable line in `language` (``"en"`` or ``"zh"``)."""
    zh = language == "zh"
    separator = LABEL_SEPARATORS[language]
    prefix, colon, thing = key.partition(":")
    thing_line = _one_line(thing, FACT_KEY_MAX_CHARS)
    value_line = _one_line(value, FACT_VALUE_MAX_CHARS)
    if colon and prefix in _THING_LABELS:
        return _THING_LABELS[prefix][zh].format(thing_line) + separator + value_line
    if colon and prefix in _VALUE_LABELS:
        labels = _VALUE_LABELS[prefix].get(value.lower())
        return (labels[zh] + separator + thing_line) if labels else (thing_line + separator + value_line)
    key_labels = _KEY_LABELS.get(key)
    label = key_labels[zh] if key_labels else (key if zh else key.replace("_", " "))
    return _one_line(label, FACT_KEY_MAX_CHARS) + separator + value_line


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

"""What recall knows about language: CJK text, speaker labels, date lines and its header.

Kept in one module so that it can join `_language` whole. `_language.detect_language`
is not a drop-in here: it weighs Han characters against Latin words, while recall
calls a query Chinese as soon as it holds one CJK character (kana and hangul
included) and a section Chinese when its lines are more than 30% CJK letters.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from datetime import datetime, tzinfo

from .._language import display_name
from .._models import MAX_TIMESTAMP, MIN_TIMESTAMP, Message

__all__ = [
    "ROLE_LABELS",
    "SECTION_HEADERS",
    "choose_language",
    "count_cjk",
    "date_label",
    "has_cjk",
    "is_cjk_text",
    "render_line",
]

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
ROLE_LABELS = {
    "en": {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"},
    "zh": {"user": "用户", "assistant": "助手", "system": "系统", "tool": "工具"},
}
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
# The builder titles the section itself; these name `RecallResult.section_text`'s header.
SECTION_HEADERS = {"zh": "【相关背景信息】", "en": "Relevant earlier conversation:"}


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None


def count_cjk(text: str) -> int:
    return len(_CJK.findall(text))


def is_cjk_text(text: str) -> bool:
    """Whether `text` is mostly Chinese, Japanese or Korean: more than 30% of its letters."""
    cjk = count_cjk(text)
    if not cjk:
        return False
    return cjk / (sum(ch.isalpha() for ch in text) or 1) > 0.3


def choose_language(configured: str, query: str, sample_lines: Iterable[str]) -> str:
    """`configured` unless ``"auto"``: then Chinese when the query has CJK or the sample is mostly CJK."""
    if configured != "auto":
        return configured
    if has_cjk(query):
        return "zh"
    sample = " ".join(sample_lines)
    cjk = count_cjk(sample)
    if not cjk:  # most samples: no need to count the letters
        return "en"
    letters = sum(ch.isalpha() for ch in sample) or 1
    return "zh" if cjk / letters > 0.3 else "en"


def render_line(message: Message, language: str) -> str:
    """``Speaker: text``: the message's name, or its role's label in `language`."""
    speaker = display_name(message.name or "") or ROLE_LABELS[language][message.role.value]
    separator = "：" if language == "zh" else ": "
    return f"{speaker}{separator}{message.text.strip()}"


def date_label(timestamp: float, language: str, time_zone: tzinfo) -> str:
    """``[8 May 2023]`` or ``[2023年5月8日]``."""
    # Clamped: a log written before timestamps were checked may hold one no date is made of.
    moment = datetime.fromtimestamp(min(max(timestamp, MIN_TIMESTAMP), MAX_TIMESTAMP), tz=time_zone)
    # Interned: the lines a process keeps (thousands) share their few dates.
    if language == "zh":
        return sys.intern(f"[{moment.year}年{moment.month}月{moment.day}日]")
    return sys.intern(f"[{moment.day} {_MONTHS[moment.month - 1]} {moment.year}]")

"""What a query asks of memory: how much of the budget recall should get for it.

A query that points to the past (names, dates, "when did", 之前, 上次, ...)
wants old turns; a short follow-up ("and why?", "为什么？") wants the recent
window. `choose_recall_share` turns those cues into a share of the budget and
a reason for ``explain()``.
"""

from __future__ import annotations

import re

from ._recall_config import RecallConfig
from ._recall_language import count_cjk

__all__ = ["choose_recall_share", "points_to_past"]

_PAST_EN = re.compile(
    r"\b(?:when (?:did|was|were|is|have|had|do)|what (?:was|were|did|had)|who (?:was|did|were)"
    r"|where (?:did|was|were)|how (?:did|long ago)|which \w+ did"
    r"|remember|recall|remind me|earlier|previously|before|last (?:time|week|month|year|night|session)"
    r"|ago|yesterday|back then|the other day|you (?:said|told|mentioned|suggested)"
    r"|i (?:said|told|mentioned|asked)|(?:did|have|had) (?:i|you|we) (?:ever )?"
    r"(?:say|tell|mention|talk|ask|discuss|told|said|mentioned|talked)"
    r"|january|february|march|april|june|july|august|september|october|november|december"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_PAST_ZH = re.compile(
    r"之前|以前|上次|上回|还记得|记得|刚才|那天|当时|曾经|说过|提过|提到过|讲过|告诉过|聊过"
    r"|什么时候|哪天|哪一天|几号|几月|去年|上个月|上周|上星期|昨天|前天|叫什么|是谁|多少|哪里|哪儿"
)
_FOLLOWUP_EN = re.compile(
    r"^(?:and|but|so|why|how come|really|then|what about|how about|ok(?:ay)?|or|huh|wait|go on|more)\b",
    re.IGNORECASE,
)
_FOLLOWUP_ZH = re.compile(r"^(?:为什么|为啥|那|然后|还有|所以|怎么|真的|那么|继续|接着|嗯|好的)")
_NAME_IN_SENTENCE = re.compile(r"(?<=[a-z,;:'\"] )[A-Z][\w'-]+")


def _past_cue(query: str) -> str | None:
    match = _PAST_EN.search(query) or _PAST_ZH.search(query)
    if match:
        return match.group(0)
    name = _NAME_IN_SENTENCE.search(query)
    if name and name.group(0) not in ("I", "I'm", "I've", "I'd", "I'll"):
        return name.group(0)
    return None


def _is_followup(query: str) -> bool:
    stripped = query.strip()
    cjk = count_cjk(stripped)
    if cjk:
        return cjk <= 8 and bool(_FOLLOWUP_ZH.match(stripped))
    words = stripped.split()
    return len(words) <= 4 and bool(_FOLLOWUP_EN.match(stripped))


def choose_recall_share(
    query: str, *, base_share: float, config: RecallConfig | None = None
) -> tuple[float, str]:
    """Decide how much of the flexible budget recall gets for this query.

    A query that points to the past (names, dates, "when did", "what was",
    "remember", 之前, 上次, 还记得, ...) gets ``config.past_share``; a short
    follow-up ("and why?", "为什么？") gets ``config.followup_share`` so the
    recent window keeps the thread. Otherwise `base_share` stands. Returns the
    share and a reason for ``explain()``.

    >>> choose_recall_share("When did I adopt the dog?", base_share=0.25)[0]
    0.9
    """
    cfg = config or RecallConfig()
    if _is_followup(query):
        share = min(base_share, cfg.followup_share)
        return share, f"short follow-up: the recent window keeps more ({share:.0%} to recall)"
    cue = _past_cue(query)
    if cue is not None:
        share = max(base_share, cfg.past_share)
        return share, f"query points to the past ({cue!r}): {share:.0%} to recall"
    return base_share, f"default split: {base_share:.0%} to recall"


def points_to_past(query: str) -> bool:
    """Whether `query` asks about earlier conversation (and is not a short follow-up):
    the queries `choose_recall_share` gives ``past_share``.

    >>> points_to_past("When did I adopt the dog?"), points_to_past("Write a haiku")
    (True, False)
    """
    return not _is_followup(query) and _past_cue(query) is not None

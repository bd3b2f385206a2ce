"""What a query asks of memory: how much of the budget recall should get for it,
and whether it asks for one thing or for several.

A query that points to the past (names, dates, "when did", 之前, 上次, ...)
wants old turns; a short follow-up ("and why?", "为什么？") wants the recent
window. `choose_recall_share` turns those cues into a share of the budget and
a reason for ``explain()``. A question that asks for several things ("What
books has Tim read?", "how many", "both", 哪些) has its answer spread over
turns that each match it less than the best one does: `asks_for_several`
tells recall to cut less of them (`_recall_rank.relevance_floor`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .config import RecallConfig
from .language import count_cjk

__all__ = [
    "asks_about_user",
    "asks_for_several",
    "choose_recall_share",
    "points_to_past",
    "refers_to_history",
]

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
# "What books has Tim read?", "Which cities have they visited?": a plural noun asked
# about, then the verb; and the words that ask for a count, for the rest, or for what two share.
_SEVERAL_EN = re.compile(
    r"^(?:what|which|who)\s+(?:\S+\s+){0,2}?[\w+/-]*[^\W_s]s\s+(?:has|have|does|do|did|are|were|had)\b"
    r"|^(?:what|which|who) are\b|\bhow many\b|\bboth\b|\bin what ways\b|\b(?:what|who) else\b",
    re.IGNORECASE,
)
# 几/多少 with a counting word asks for a count (几只狗, 多少本书); 几岁, 几点, 几号 do not.
_SEVERAL_ZH = re.compile(r"哪些|哪几|(?:几|多少)[个只次种本位家件条部首门场]|都有|都做|都去|都喜欢")
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


def asks_for_several(query: str) -> bool:
    """Whether `query` asks for several things rather than one: a plural noun asked
    about ("What books has Tim read?"), a count ("how many", 几次), which ones (哪些,
    "what else"), or what two people share ("both", 都有).

    >>> asks_for_several("What books has Tim read?"), asks_for_several("What is my dog's name?")
    (True, False)
    >>> asks_for_several("我去过哪些城市？"), asks_for_several("我的狗叫什么名字？")
    (True, False)
    """
    stripped = query.strip()
    return bool(_SEVERAL_EN.search(stripped) or _SEVERAL_ZH.search(stripped))


# "How many bikes do I own?", "my", 我的: the question is about the user.
_FIRST_PERSON_EN = re.compile(r"\b(?:i|i'm|i've|i'd|my|mine|myself)\b", re.IGNORECASE)
_FIRST_PERSON_ZH = re.compile(r"我")
# "You suggested...", "what did you recommend", 你说过: about what the assistant said.
_ASSISTANT_SAID_EN = re.compile(
    r"\byou(?:'ve| have| had)? (?:\w+ )?(?:said|told|mentioned|suggested|recommended|gave|listed|provided"
    r"|created|wrote|shared|explained|described|named|proposed|offered|came up with)\b"
    r"|\b(?:did|do) you (?:say|tell|mention|suggest|recommend|give|list|provide|write|explain|name)\b",
    re.IGNORECASE,
)
_ASSISTANT_SAID_ZH = re.compile(r"你(?:说过|提到|建议|推荐|告诉|给我|写的|讲过)")


def asks_about_user(query: str) -> bool:
    """Whether `query` asks about the user (first person: "I", "my", 我), not about what
    the assistant said ("you suggested...", 你推荐的): the user's own statements then
    weigh more than the assistant's explanations.

    >>> asks_about_user("How many bikes do I own?"), asks_about_user("What did you recommend I read?")
    (True, False)
    """
    if _ASSISTANT_SAID_EN.search(query) or _ASSISTANT_SAID_ZH.search(query):
        return False
    return bool(_FIRST_PERSON_EN.search(query) or _FIRST_PERSON_ZH.search(query))


def refers_to_history(query: str, speakers: Iterable[str] = ()) -> bool:
    """Whether `query` is about the user or their history rather than a request that stands
    on its own: first person ("my", 我), what the assistant said ("you suggested"), a
    past-pointing phrase ("last time", 上次, a month or year), or one of `speakers` (the
    history's named speakers, lowercased). A capitalised word alone does not count:
    "Translate 'good morning' into French." names a language, not a person of the history.

    >>> refers_to_history("How many bikes do I own?"), refers_to_history("What is the capital of Peru?")
    (True, False)
    """
    if _FIRST_PERSON_EN.search(query) or _FIRST_PERSON_ZH.search(query):
        return True
    if _ASSISTANT_SAID_EN.search(query) or _ASSISTANT_SAID_ZH.search(query):
        return True
    if _PAST_EN.search(query) or _PAST_ZH.search(query):
        return True
    lowered = query.lower()
    return any(re.search(rf"(?<!\w){re.escape(name)}(?!\w)", lowered) for name in speakers if name)

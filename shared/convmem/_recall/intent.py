"""What a query asks of memory: how much of the budget recall should get for it,
and whether it asks for one thing or for several.

A query points to the past when a good answer needs earlier conversation, and
`past_cue` says why, in one of four ways:

- it refers to that conversation: "the recipe you gave me", "remind me",
  "did I tell you", 上次, 之前说过, 还记得;
- it asks about the user's own life: "How many bikes do I own?", "What's my
  dog's name?", 我住在哪个城市？ A question in the first person, unless it asks
  for advice or instructions ("How do I reset my router?", 我应该先学什么？);
- it asks about someone or something the conversation was about: "When did
  Caroline go to the support group?" (a name in the question, not after "the" or
  a preposition of place), "What did she paint?", "What did the charity race
  raise?" (a finished event of a common noun: "the Berlin Wall" is the world's),
  她上个夏天画了什么？, 老陈为什么把店关了？;
- it asks about a time gone by: "What happened in May 2023?", "yesterday",
  去年 — in a question or in the first person, not in a request that merely
  names a date.

Everything else is read as needing no old turns: requests ("Translate 'good
morning' into French."), general questions ("What is the capital of
Australia?") and short follow-ups ("and why?", 为什么？), which want the recent
window. `choose_recall_share` turns this into a share of the budget and a reason
for ``explain()``. `tests/past_queries.py` is the labelled table the detector is
measured on.

A question that asks for several things ("What books has Tim read?", "how many",
"both", 哪些) has its answer spread over turns that each match it less than the
best one does: `asks_for_several` tells recall to cut less of them.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from .config import RecallConfig
from .language import count_cjk

__all__ = [
    "ASKS_ABOUT_A_PERSON",
    "ROMAN_ONE_NOT_AFTER",
    "WHY_MY_EN",
    "WRITING_TASK_ASKED_EN",
    "PastCue",
    "asks_for_several",
    "choose_recall_share",
    "past_cue",
    "points_to_past",
]


ASKS_ABOUT_A_PERSON = "asks about a person"
"""`PastCue.reason` of a question about someone named in it ("When did Caroline go...")."""


class PastCue(NamedTuple):
    """Why a query points to the past: the kind of reason, and the words that say so."""

    reason: str
    words: str

    def __str__(self) -> str:
        return f"{self.reason}: {self.words!r}"


# --------------------------------------------------------------------------- English

_MONTHS = "january|february|march|april|june|july|august|september|october|november|december"
_EN_CONVERSATION = re.compile(
    r"\b(?:remember|recall|remind\s+me|earlier|previously|so\s+far|back\s+then|the\s+other\s+day"
    r"|go\s+back\s+to|again\s+(?:what|who|where|when|which|how)|before(?=\s*(?:[?.!,;]|$))"
    r"|last\s+(?:time|session|chat|conversation)|(?:what|everything|all)\s+you\s+know\s+about\s+me"
    r"|you(?:'ve|\s+have|\s+had)?\s+(?:already\s+)?(?:said|told|mentioned|suggested|recommended|gave|showed"
    r"|sent|wrote|promised|listed|described|explained|asked)"
    r"|we(?:'ve|\s+have|\s+had)?\s+(?:already\s+)?(?:talked|discussed|decided|agreed|concluded|chose|planned"
    r"|said|spoke|went\s+over|settled)"
    r"|i(?:'ve|\s+have|\s+had)?\s+(?:already\s+)?(?:said|mentioned|shared|told\s+you)"
    r"|(?:did|have|had)\s+(?:i|you|we)\s+(?:ever\s+|already\s+)?(?:say|tell|mention|talk|ask|discuss"
    r"|share|decide|agree))\b",
    re.IGNORECASE,
)
_EN_PAST_TIME = re.compile(
    r"\b(?:yesterday|ago|last\s+(?:week|weekend|month|year|night|summer|winter|spring|fall|autumn)"
    r"|" + _MONTHS + r"|may\s+\d+|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_EN_WH = r"(?:what(?:'s)?|which|who(?:'s)?|whom|whose|where(?:'s)?|when(?:'s)?|why|how(?:'s)?)"
_EN_AUX = (
    r"(?:am|is|are|was|were|do|does|did|have|has|had|can|could|will|would|should|shall|may|might|must"
    r"|isn't|aren't|wasn't|weren't|don't|doesn't|didn't|haven't|hasn't)"
)
# Where a question starts inside a query: its first word, after a clause break, or
# after "tell me"/"remind me" ("Tell me again what my sister's name is"). "Do" and
# "have" ask only before their subject ("Do I...", not "Have a look at...").
_EN_QUESTION_START = re.compile(
    r"(?:^|[,;:—–(]\s*|\s-\s|\b(?:and|but|so|then|tell\s+me(?:\s+again)?|remind\s+me|you\s+know)\s+)"
    r"(?:" + _EN_WH + r"|(?!do\b|have\b)" + _EN_AUX + r"|(?:do|have)(?=\s+(?:i|you|we|he|she|they|it|there|my"
    r"|your|(?-i:[A-Z]))))\b",
    re.IGNORECASE,
)
# A question that asks how to do something, or what to do, is a request for advice.
_EN_ADVICE = re.compile(
    r"^(?:how\s+(?:do|does|can|could|would|might|shall)\s+(?:i|you|we|one)\b|how\s+to\b"
    r"|is\s+it\s+(?:ok|okay|safe|possible|better|worth|a\s+good\s+idea)\b"
    r"|what(?:'s|\s+is)\s+the\s+best\s+way\b)"
    r"|\b(?:should|can|could|shall|must|might|may|ought\s+to)\s+(?:i|we)\b|\bdo\s+i\s+need\b",
    re.IGNORECASE,
)
_EN_CLAUSE_BREAK = re.compile(r"[,;:—–]|\s-\s")
# "World War I", "Type I diabetes", "Part I": a numeral after a noun that numbers things,
# not the user (lookbehinds before the first person, case-sensitive in an IGNORECASE pattern).
ROMAN_ONE_NOT_AFTER = "".join(
    rf"(?-i:(?<!{noun}\s))"
    for noun in ("War", "Type", "Part", "Phase", "Chapter", "Act", "Class", "Level", "Stage", "Grade", "Title",
                 "Article", "Section", "Volume", "Book", "Season", "Round", "Schedule", "Appendix")
)  # fmt: skip
_EN_FIRST_PERSON = re.compile(
    ROMAN_ONE_NOT_AFTER + r"\b(?:i|i'm|i've|i'd|my|me|mine|myself)\b", re.IGNORECASE
)
# "Can you draft a toast for my sister's wedding?": a piece of writing asked for as a question,
# whose first person is in the brief of what it is to say.
WRITING_TASK_ASKED_EN = re.compile(
    r"^\s*(?:can|could|would|will)\s+you\s+(?:please\s+)?(?:help\s+me\s+)?(?:write|draft|compose)\b",
    re.IGNORECASE,
)
# "Why didn't my dough rise?", "How come my laptop is so slow?": the cause of what a thing of
# the user's does, asked of what the model knows, not a fact about the user ("Why did I
# quit?" is). The words up to "my", taken out before the first person is looked for.
WHY_MY_EN = re.compile(
    r"\b(?:why|how\s+come)\s+(?:(?:is|are|was|were|does|do|did|has|have|had|would|will|won't|can|can't"
    r"|could)(?:n't|\s+not)?\s+)?my\b",
    re.IGNORECASE,
)
# A person's name in a question ("When did Caroline go...", "What did Jon's brother
# say?", "What was grandma's gift to Caroline?"), or he/she after its verb ("what did
# she paint?"). A capitalized word after "the", a/an or a preposition of place names a
# thing or a place ("the Titanic", "the capital of Australia", "in Paris"), and three or
# more in a row a title ("One Hundred Years of Solitude").
_EN_NAME = re.compile(r"(?<![\w'’-])[A-Z][a-z]+(?:['’]s)?(?:\s+[A-Z][a-z]+(?:['’]s)?)*(?![\w-])")
_EN_CAPITALIZED_RUN = re.compile(r"[A-Z][\w'’-]*(?:\s+(?:of\s+|the\s+|and\s+)?[A-Z][\w'’-]*){2,}")
_EN_THING_BEFORE = re.compile(
    r"(?i:\b(?:the|a|an|in|into|at|of|near|on|across|around|than|from|like|via|per)\s+)$"
)
_EN_HE_SHE = re.compile(r"\b(?i:" + _EN_AUX + r")\s+(?:he|she)\b")
_NOT_A_PERSON = frozenset(["I", "I'm", "I've", "I'd", "I'll", "It", "It's", "That", "This", "There", "What"])
# "that restaurant?", "those shoes you liked": something known from before; "what
# does that mean?", "is that right?" point at the sentence just said.
_EN_KNOWN_THING = re.compile(
    r"\b(?:that|those)\s+(?!(?:is|was|are|were|does|do|did|will|would|can|could|should|means?|works?"
    r"|sounds?|helps?|happens?|matters?|looks?|still|right|ok|okay|one|ones)\b)(?P<thing>[a-z]+)"
    r"(?=\s*[?.!]*\s*$|\s+(?:i|you|we)\b)",
    re.IGNORECASE,
)
# A finished event asked about by a definite, common noun ("What did the charity race
# raise?", "What was discussed in the workshop?"): something the conversation told,
# where a capitalized name after "the" is the world's ("When did the Berlin Wall fall?").
_EN_FINISHED_VERB = re.compile(r"(?i:\b(?:did|was|were|had|happened)\b)")
_EN_THE = re.compile(r"\b(?i:the)\b")
_EN_THE_THING = re.compile(r"\b(?i:the)\s+(?P<thing>(?:[A-Z0-9+]{2,}\s+)?[a-z][a-z-]*(?:\s+[a-z][a-z-]*)?)")
_FOLLOWUP_EN = re.compile(
    r"^(?:and|but|so|why|how come|really|then|what about|how about|ok(?:ay)?|or|huh|wait|go on|more)\b",
    re.IGNORECASE,
)

# --------------------------------------------------------------------------- Chinese

_ZH_CONVERSATION = re.compile(
    r"之前|以前|上次|上回|那次|那天|当时|曾经|刚才|还记得|你记得|记不记得|记得吗"
    r"|说过|提过|提到过|讲过|告诉过|聊过|问过|谈过|讨论过|你对我的了解|了解我"
)
_ZH_PAST_TIME = re.compile(r"去年|前年|上个月|上个|上周|上星期|上礼拜|昨天|前天|前几天|小时候")
_ZH_WH = re.compile(r"什么|啥|哪|谁|几|多少|多久|多大|为什么|为啥|怎么|怎样|如何|是否|有没有|是不是")
_ZH_QUESTION_END = re.compile(r"(?:[?？]|[吗呢么][\W_]*)\s*$")
_ZH_ADVICE = re.compile(
    r"我(?:应该|应当|该|要怎么|怎么|怎样|如何|能不能|能否|可以|可不可以|需要|得)|怎么(?:办|做|弄|才)|如何|怎样才"
)
# A finished event asked about ("老陈为什么把店关了？", "王芳今年读了哪些书？"): what a
# conversation about people tells, where a Chinese name cannot be told by its letters.
_ZH_FINISHED = re.compile(r"(?<![除为算对好太])了(?![解不])|过(?![来去年节日])")
_ZH_PERSON = re.compile(r"[他她](?!们)")
_ZH_KNOWN_THING = re.compile(r"那(?:个|家|本|部|只|条|位|首|件|篇|款|张|间|辆|次)")
_ZH_CLAUSE_BREAK = re.compile(r"[，,；;：:]")
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


def _question_start(query: str) -> int | None:
    """Where the question in `query` starts (it runs to the end), or None when it asks nothing."""
    first = _EN_QUESTION_START.search(query)
    if first:
        return first.end() - len(first.group(0).split()[-1])
    if query.rstrip().endswith("?"):
        breaks = list(_EN_CLAUSE_BREAK.finditer(query))
        return breaks[-1].end() if breaks else 0
    return None


# Words that open a sentence with a capital: after "Hi!" or "Thanks.", "How are you?" names nobody.
_SENTENCE_OPENERS = frozenset(
    """
    how what which who whom whose where when why is are was were do does did can could will would
    should shall may might must have has had am hi hello hey thanks thank please yes no ok okay so and
    but then also just now well sure great nice cool good i you he she it we they this that there
    here let tell give show help write make explain
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_SENTENCE_END = re.compile(r"[.!?。！？]\s*$")


def _opens_sentence(query: str, at: int) -> bool:
    return bool(_SENTENCE_END.search(query, 0, at))


def _person_named(query: str, start: int) -> str | None:
    """A person's name (or he/she) in the question of `query` that begins at `start`."""
    first_word = re.match(r"\s*\S+", query)
    after_first = first_word.end() if first_word else 0
    titles = [match.span() for match in _EN_CAPITALIZED_RUN.finditer(query, after_first)]
    for name in _EN_NAME.finditer(query, max(start, after_first)):
        words = name.group(0)  # a name of several words ("the Berlin Wall") is judged whole
        if words.split()[0] in _NOT_A_PERSON:
            continue
        if _opens_sentence(query, name.start()) and words.split()[0].lower() in _SENTENCE_OPENERS:
            continue  # "Hi! How are you?": a capital that opens a sentence, not a name
        if not words.endswith(("'s", "’s")) and _EN_THING_BEFORE.search(query, 0, name.start()):
            continue
        if any(title_start <= name.start() < title_end for title_start, title_end in titles):
            continue
        return words
    pronoun = _EN_HE_SHE.search(query, start)
    return pronoun.group(0).split()[-1] if pronoun else None


def _english_cue(query: str) -> PastCue | None:
    said = _EN_CONVERSATION.search(query)
    if said:
        return PastCue("refers to earlier conversation", said.group(0))
    start = _question_start(query)
    if start is None:
        time = _EN_PAST_TIME.search(query) if _EN_FIRST_PERSON.search(query) else None
        return PastCue("names a time gone by", time.group(0)) if time else None
    question = query[start:]
    if _EN_ADVICE.search(question):
        return None
    self_ = (
        None
        if WRITING_TASK_ASKED_EN.search(question)
        else _EN_FIRST_PERSON.search(WHY_MY_EN.sub(" ", question))
    )
    if self_:
        return PastCue("asks about the user", self_.group(0))
    person = _person_named(query, start)
    if person:
        return PastCue(ASKS_ABOUT_A_PERSON, person)
    known = _known_thing(question)
    if known:
        return PastCue("refers to earlier conversation", known.group(0))
    time = _EN_PAST_TIME.search(question)
    if time:
        return PastCue("names a time gone by", time.group(0))
    event = _finished_event(question)
    return PastCue("asks about a finished event", "the " + event) if event else None


# "Is that serious?", "..., was that normal?": a yes-no question that opens with a copula has
# "that" as its subject, the sentence just said, and the word after it says what is asked.
_COPULAS = frozenset(["is", "was", "are", "were", "isn't", "wasn't", "aren't", "weren't"])
_CLAUSE_JOINERS = frozenset(["and", "but", "so", "or"])


def _known_thing(question: str) -> re.Match[str] | None:
    """The first "that restaurant?"-like phrase of `question` (`_EN_KNOWN_THING`) that is not
    the subject of a yes-no question ("is that serious?")."""
    for known in _EN_KNOWN_THING.finditer(question):
        words = question[max(0, known.start() - 40) : known.start()].split()
        if not words or words[-1].lower() not in _COPULAS:
            return known
        if len(words) == 1:
            if known.start() <= 40:
                continue  # the copula opens the question
            return known
        if not (words[-2].endswith((",", ";", ":", ".", "!", "?")) or words[-2].lower() in _CLAUSE_JOINERS):
            return known
    return None


def _finished_event(question: str) -> str | None:
    """The thing of the first line with a past verb followed by "the" and a common noun
    (which may go on past the line's end): each "the" of the line after its first past
    verb is tried once, where "did .*? the" rescans the rest of a long line from every
    "did" of it."""
    start = 0
    for line in question.split("\n"):
        end = start + len(line)
        verb = _EN_FINISHED_VERB.search(question, start, end)
        if verb:
            for the in _EN_THE.finditer(question, verb.end(), end):
                thing = _EN_THE_THING.match(question, the.start())
                if thing:
                    return thing.group("thing")
        start = end + 1
    return None


def _chinese_cue(query: str) -> PastCue | None:
    said = _ZH_CONVERSATION.search(query)
    if said:
        return PastCue("refers to earlier conversation", said.group(0))
    clauses = [clause for clause in _ZH_CLAUSE_BREAK.split(query) if clause.strip()]
    asking = [clause for clause in clauses if _ZH_WH.search(clause) or _ZH_QUESTION_END.search(clause)]
    if not asking:
        time = _ZH_PAST_TIME.search(query) if "我" in query else None
        return PastCue("names a time gone by", time.group(0)) if time else None
    question = asking[-1]
    advice = _ZH_ADVICE.search(question)
    if advice:
        return None
    if "我" in question:
        return PastCue("asks about the user", "我")
    for pattern, reason in (
        (_ZH_PAST_TIME, "names a time gone by"),
        (_ZH_PERSON, ASKS_ABOUT_A_PERSON),
        (_ZH_KNOWN_THING, "refers to earlier conversation"),
        (_ZH_FINISHED, "asks about a finished event"),
    ):
        found = pattern.search(question)
        if found:
            return PastCue(reason, found.group(0))
    return None


@functools.lru_cache(maxsize=256)  # a build reads its query two or three times
def past_cue(query: str) -> PastCue | None:
    """Why `query` points to the past, or None when it does not (see the module's docstring).

    >>> str(past_cue("How many bikes do I own?"))
    "asks about the user: 'I'"
    >>> past_cue("Translate 'good morning' into French.") is None
    True
    """
    if count_cjk(query):
        return _chinese_cue(query) or _english_cue(query)
    return _english_cue(query)


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

    A query that points to the past (`past_cue`: it refers to earlier
    conversation, asks about the user or a person they spoke of, or about a time
    gone by) gets ``config.past_share``; a short follow-up ("and why?", "为什么？")
    gets ``config.followup_share`` so the recent window keeps the thread.
    Otherwise `base_share` stands. Returns the share and a reason for ``explain()``.

    >>> choose_recall_share("When did I adopt the dog?", base_share=0.25)[0]
    0.9
    """
    cfg = config or RecallConfig()
    if _is_followup(query):
        share = min(base_share, cfg.followup_share)
        return share, f"short follow-up: the recent window keeps more ({share:.0%} to recall)"
    cue = past_cue(query)
    if cue is not None:
        share = max(base_share, cfg.past_share)
        return share, f"query points to the past ({cue}): {share:.0%} to recall"
    return base_share, f"default split: {base_share:.0%} to recall"


def points_to_past(query: str) -> bool:
    """Whether `query` needs earlier conversation (and is not a short follow-up):
    the queries `choose_recall_share` gives ``past_share``.

    >>> points_to_past("When did I adopt the dog?"), points_to_past("Write a haiku")
    (True, False)
    """
    return not _is_followup(query) and past_cue(query) is not None


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

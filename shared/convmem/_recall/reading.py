"""Whom a query is about, for the evidence gate and the composer: the user ("How many
bikes do I own?", 我的狗叫什么？), the history ("What did you suggest last time?"), or
nothing of theirs — a request that stands on its own ("Translate 'good morning' into
French."), small talk ("Hope you're doing well."), or a request that speaks of the user
only in passing ("I have a job interview tomorrow, any tips?"). `intent` says how much of
the budget recall gets; this module says what recall may bring.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from .._salience import is_filler
from .intent import ROMAN_ONE_NOT_AFTER, WHY_MY_EN, WRITING_TASK_ASKED_EN, past_cue
from .language import count_cjk

__all__ = [
    "asks_about_user",
    "asks_for_advice",
    "asks_for_suggestions",
    "is_small_talk",
    "personal_reading",
    "points_at_history",
    "refers_to_history",
    "speaks_for_us",
    "without_material",
]


# "How many bikes do I own?", "my", 我的: the question is about the user.
_FIRST_PERSON_EN = re.compile(ROMAN_ONE_NOT_AFTER + r"\b(?:i|i'm|i've|i'd|my|mine|myself)\b", re.IGNORECASE)
_FIRST_PERSON_ZH = re.compile(r"我")
# "You suggested...", "what did you recommend", 你说过: about what the assistant said.
_ASSISTANT_SAID_EN = re.compile(
    r"\byou(?:'ve| have| had)? (?:\w+ )?(?:said|told|mentioned|suggested|recommended|gave|listed|provided"
    r"|created|wrote|shared|explained|described|named|proposed|offered|came up with)\b"
    r"|\bdid you (?:say|tell|mention|suggest|recommend|give|list|provide|write|explain|name)\b",
    re.IGNORECASE,
)
_ASSISTANT_SAID_ZH = re.compile(r"你(?:说过|提到|建议|推荐|告诉|给我|写的|讲过)")


# "I need a regex...", "I'd like a summary of...", 帮我写..., 给我讲个笑话: the first person of a
# request's frame is the one asking, not what the request is about; nor is the asker of
# advice ("How long should I boil an egg?", "Do I need a visa?") or of instructions ("How
# do I make cold brew?", "I want to learn to knit, where do I begin?", 我想学游泳), the first
# person of a simile ("Explain it like I'm five"), or a short aside before the request
# ("I'm bored, tell me a riddle.").
_REQUEST_FRAME_EN = re.compile(
    r"\bi(?:'d|\s+would)?(?:\s+(?:really|just|also|now))?\s+(?:need|want|like|am\s+looking\s+for)"
    r"(?=\s+(?:a|an|some|help)\b)|\bi'm(?:\s+(?:really|just|also|now))?\s+looking\s+for(?=\s+(?:a|an|some|help)\b)"
    r"|(?<!do\s)(?<!did\s)\bi(?:'d|\s+would)?(?:\s+(?:really|just|also|now))?\s+(?:want|like|love|need|wish|hope)\s+to"
    r"(?=\s+(?:learn|know|understand|try|start|begin|pick\s+up|get\s+into)\b)"
    r"|\bi(?:'m|\s+am)\s+trying\s+to(?=\s+(?:learn|understand|figure\s+out)\b)"
    r"|(?<!do\s)(?<!did\s)\bi(?:'d|\s+would)\s+(?:really\s+)?(?:love|appreciate|enjoy)"
    r"(?=\s+(?:a|an|some|help|more|any|to\s+(?:hear|see|read|get|have))\b)"
    r"|\bi(?:\s+was|\s+am|'m)\s+wondering\b|\bi\s+wonder\b|\bi(?:'m|\s+am)\s+curious\b"
    r"|(?<=how\sdo\s)i\b|(?<=where\sdo\s)i(?=\s+(?:start|begin)\b)"
    r"|\b(?:like|as\s+if|as\s+though)\s+i(?:'m|\s+am|\s+was|\s+were)?\b"
    r"|(?:(?<=should\s)|(?<=can\s)|(?<=could\s)|(?<=shall\s)|(?<=must\s)|(?<=might\s)|(?<=may\s))i\b"
    r"|\bdo\s+i\s+need\b|\bought\s+i\b"
    r"|^\s*(?:i'm|i\s+am|i\s+feel|feeling|just)\s+[a-z]+(?:\s+[a-z]+)?\s*[,;:.!—–-]+\s*(?=\w)",
    re.IGNORECASE,
)
_REQUEST_FRAME_ZH = re.compile(
    r"(?:^|(?<=[，,。！？!?；;：:\s请]))(?:(?:帮|给|替|为)我|我(?:想要|需要|要)(?=一)|我(?:很)?想(?=学|了解|知道|试))"
)
# The text a request works on ("Translate 'I love you' into French", "翻译成日语：我明天有空"):
# quoted, or after the colon of a request to translate, correct or rewrite it.
_QUOTED = re.compile(r"(?<!\w)'[^']+'(?!\w)|\"[^\"]*\"|“[^”]*”|‘[^’]*’|「[^」]*」|『[^』]*』")
_MATERIAL = re.compile(
    r"(?i:\b(?:translate|proofread|correct|rewrite|rephrase|paraphrase|summari[sz]e|fix)\b)"
    r"|翻译|润色|改写|修改|纠正|校对|总结|改一下"
)


def _cut_at_material(text: str) -> str:
    """`text` without the material of a request to work on it: from the first such verb
    that a colon follows, to the end. One search, where "translate[^:]*:" rescans the rest
    of a long text from every "translate" of it when no colon follows."""
    verb = _MATERIAL.search(text)
    if verb is None or max(text.rfind(":"), text.rfind("：")) < verb.end():
        return text
    return text[: verb.start()] + " "


def without_material(query: str) -> str:
    """`query` without the text it asks to have worked on: what it quotes, and what follows
    the colon of a request to translate, correct or rewrite, with that request. That text
    is not what the request is about.

    >>> without_material("Translate 'good morning' into French."), without_material("翻译成英文：我明天有空")
    ('Translate   into French.', ' ')
    """
    return _cut_at_material(_QUOTED.sub(" ", query))


def _without_request_frame(query: str) -> str:
    unquoted = without_material(query)
    return _REQUEST_FRAME_ZH.sub(" ", _REQUEST_FRAME_EN.sub(" ", unquoted))


# What people say to open a chat or to acknowledge an answer, beyond greetings and thanks
# (`is_filler`): "How are you today?", "Hope you're doing well.", "Have a great evening!",
# "That was really helpful", 最近怎么样？, 好久不见, 很有帮助.
_PHATIC_EN = re.compile(
    r"(?:how\s+(?:are|r)\s+(?:you|u|ya)(?:\s+doing)?|how(?:'s|\s+is)\s+(?:it\s+going|your\s+day|everything|life)"
    r"|how\s+have\s+you\s+been|what'?s\s+up|(?:i\s+)?hope\s+(?:you(?:'re|\s+are)|all\s+is|everything\s+is"
    r"|your\s+(?:day|week|weekend|morning|afternoon|evening)\s+is)"
    r"(?:\s+(?:doing|going))?\s+(?:well|good|great|fine|ok|okay)|nice\s+to\s+(?:meet|see)\s+you"
    r"|have\s+a\s+(?:great|good|nice|lovely|wonderful)\s+(?:day|morning|afternoon|evening|night|weekend|one)"
    r"|long\s+time\s+no\s+see|(?:are\s+)?you\s+there"
    r"|(?:that|this|it)(?:\s+was|'s|\s+is)\s+(?:(?:really|very|so|super)\s+)?(?:helpful|useful|great|perfect)"
    r"|(?:that|this)\s+helps(?:\s+a\s+lot)?|(?:that\s+)?makes\s+sense|sounds\s+good|got\s+it)"
    r"(?:\s+(?:today|tonight|this\s+(?:morning|evening)))?",
    re.IGNORECASE,
)
_PHATIC_ZH = re.compile(
    r"(?:你|您)?(?:最近)?(?:怎么样|好吗|还好吗|过得(?:怎么样|好吗|如何))|好久不见|在吗|忙吗"
    r"|(?:这|那)?(?:真|很|非常|太)?(?:有帮助|有用)了?|明白了|懂了"
)
# The pieces of a query between sentence ends and commas: "Hi", " how are you today".
_PIECES = re.compile(r"[^.!?。！？~～,，、]+")


def is_small_talk(query: str) -> bool:
    """Whether every sentence of `query` is a greeting, thanks or a question asked to be
    polite ("Good evening! Hope you're doing well.", 你好，最近怎么样？): the user's name
    answers it, not their old messages.

    >>> is_small_talk("Hi! How are you today?"), is_small_talk("Hi! How do I reset my router?")
    (True, False)
    """
    pieces = [piece.strip() for piece in _PIECES.findall(query) if piece.strip()]
    return bool(pieces) and all(
        is_filler(piece) or _PHATIC_EN.fullmatch(piece) or _PHATIC_ZH.fullmatch(piece) for piece in pieces
    )


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


# How questions about a history are put, more broadly than the past-pointing cues: which
# questions the evidence gate reads as about the history (`refers_to_history`), where
# a question phrased in the past tense is worth a looser dense margin.
_PAST_QUESTION_EN = re.compile(
    r"\b(?:when (?:did|was|were|is|have|had|do)|what (?:was|were|did|had)|who (?:was|did|were)"
    r"|where (?:did|was|were)|how (?:did|long ago)|which \w+ did)\b",
    re.IGNORECASE,
)
# Someone of the conversation: a question put in the past with none of them in it ("When
# was the printing press invented?") may ask about the world.
_CONVERSANT_EN = re.compile(
    ROMAN_ONE_NOT_AFTER + r"\b(?:i|i'm|i've|i'd|me|my|mine|myself|we|us|our|you|your)\b", re.IGNORECASE
)
# "before" followed by a clause in the past ("before I moved") is earlier; by one to come
# ("before we get one", "before I drive alone") it orders what the user will do.
_PAST_VERB = (
    r"\w+ed|was|were|had|did|saw|went|got|made|took|came|left|bought|began|met|found|gave|knew|thought"
    r"|told|said|ran|wrote|felt|became|kept|heard|paid|sold|spent|lost|won|ate|drove|flew|grew|chose"
    r"|broke|fell|forgot|threw|wore|sat|slept|stood|swam|taught|brought|caught|built|sent|meant"
)
# "before" is "earlier" where it ends a clause ("Have we talked about this before?"), before
# "that", "then" or "now", or before a clause in the past, unless that clause tells, in the
# passive, of a thing of the world ("before it was invented", "before they were banned"); before
# anything else it orders two things ("a warm-up before lifting weights", "before the exam",
# "before refrigerators").
_HISTORY_EN = re.compile(
    r"\b(?:remember|recall|remind me|earlier|previously"
    r"|before(?=\s*(?:$|[^\w\s']|(?:that|then|now)\b|(?:i|we|you|he|she|they|it)\s+(?:"
    + _PAST_VERB
    + r")\b))(?!\s+(?:it|they)\s+(?:was|were)\s+[^\W\d_]+(?:ed|en)\b)"
    r"|last (?:time|week|month|year|night|session)"
    r"|ago|yesterday|back then|the other day|you (?:said|told|mentioned|suggested)"
    r"|i (?:said|told|mentioned|asked)|(?:did|have|had) (?:i|you|we) (?:ever )?"
    r"(?:say|tell|mention|talk|ask|discuss|told|said|mentioned|talked))\b",
    re.IGNORECASE,
)
# A year: the history's ("the trip we took in 2019") or the world's ("the 2008 financial
# crisis"); like a question put in the past, it points at the history with someone of the
# conversation in it (`points_at_history`'s `by_tense`).
_YEAR_EN = re.compile(r"\b(?:19|20)\d\d\b")
_HISTORY_ZH = re.compile(
    r"之前|以前|上次|上回|那次|还记得|记得|刚才|那天|当时|曾经|说过|提过|提到过|讲过|告诉过|聊过"
    r"|什么时候|哪天|哪一天|几号|几月|去年|上个月|上周|上星期|昨天|前天|叫什么|是谁"
)
# A month or a day named, unless as one to come: "next Friday", "due Monday", "by June", or
# in a clause that tells a plan ("I'm hosting a dinner party on Saturday", "we'll fly in
# June"); "I ran a race on Sunday" names one gone by.
_NAMED_DAY_EN = re.compile(
    r"(?<!next\s)(?<!this\s)(?<!coming\s)(?<!upcoming\s)(?<!due\s)(?<!by\s)(?<!until\s)(?<!till\s)"
    r"\b(?:january|february|march|april|june|july|august|september|october|november|december"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    re.IGNORECASE,
)
_PLAN_EN = re.compile(
    r"\b(?:(?:i'm|i\s+am|we're|we\s+are|they're|they\s+are|he's|she's)\s+(?:\w+\s+)?\w+ing"
    r"|will|i'll|we'll|going\s+to|gonna|planning\s+to|about\s+to)\b",
    re.IGNORECASE,
)
_CLAUSE_END = re.compile(r"[,;:.!?，。！？；：]")


def _names_a_day_gone_by(query: str) -> bool:
    """Whether `query` names a month or a day (`_NAMED_DAY_EN`) outside a clause that tells a
    plan (`_PLAN_EN`, read from the clause's start to the day)."""
    for day in _NAMED_DAY_EN.finditer(query):
        ends = [end.end() for end in _CLAUSE_END.finditer(query, max(0, day.start() - 200), day.start())]
        start = ends[-1] if ends else max(0, day.start() - 200)
        if not _PLAN_EN.search(query, start, day.start()):
            return True
    return False


_WE_EN = re.compile(r"\b(?:we|us|our|ours|ourselves|let's)\b", re.IGNORECASE)
_WE_ZH = re.compile(r"我们|咱们|咱")


def speaks_for_us(query: str) -> bool:
    """Whether `query` speaks for the user and the assistant together ("Where should we go
    on Sunday?", 我们去哪儿): a plan of theirs, which what the user has said bears on.

    >>> speaks_for_us("Where should we go on Sunday?"), speaks_for_us("Write a haiku.")
    (True, False)
    """
    return bool(_WE_EN.search(query) or _WE_ZH.search(query))


# What fits the user's taste: a recommendation, a suggestion or ideas, not how to do or fix
# something. Advice asks for these and more.
_SUGGESTION_WORDS_EN = r"recommend\w*|suggest\w*|ideas?"
_SUGGESTION_WORDS_ZH = r"推荐"
_SUGGESTION_EN = re.compile(rf"\b(?:{_SUGGESTION_WORDS_EN})\b", re.IGNORECASE)
_SUGGESTION_ZH = re.compile(_SUGGESTION_WORDS_ZH)
_ADVICE_EN = re.compile(
    rf"\b(?:{_SUGGESTION_WORDS_EN}|advice|advise|tips?|should\s+i|what\s+to\s+(?:eat|cook|wear|read"
    r"|watch|buy|do|visit|try)|where\s+to\s+(?:go|eat|stay))\b",
    re.IGNORECASE,
)
_ADVICE_ZH = re.compile(rf"{_SUGGESTION_WORDS_ZH}|建议|有什么好|吃什么|去哪|买什么|看什么|该怎么|应该")


def asks_for_suggestions(query: str) -> bool:
    """Whether `query` asks for a recommendation, a suggestion or ideas ("Recommend a book I
    might like.", 给我推荐一本书): what fits the user, which what they have told of their
    tastes answers, unlike how to do or fix something ("how often should it eat?").

    >>> asks_for_suggestions("Suggest a restaurant I would enjoy."), asks_for_suggestions("Any tips?")
    (True, False)
    """
    return bool(_SUGGESTION_EN.search(query) or _SUGGESTION_ZH.search(query))


def asks_for_advice(query: str) -> bool:
    """Whether `query` asks for advice: a suggestion (`asks_for_suggestions`: "dinner
    ideas?", 推荐一部电影), tips, or what the user should do: what the user likes, lives
    with or cannot eat bears on the answer.

    >>> asks_for_advice("dinner ideas?"), asks_for_advice("Explain how a hash table works.")
    (True, False)
    """
    return bool(_ADVICE_EN.search(query) or _ADVICE_ZH.search(query))


_NAME_LIKE = re.compile(r"(?<=\w[ ,])[A-Z][a-z]{2,}(?!\w)")


def refers_to_history(query: str, speakers: Iterable[str] = ()) -> bool:
    """Whether `query` is about the user or their history rather than a request that stands
    on its own: first person ("my", 我), what the assistant said ("you suggested"), a
    past-pointing phrase ("last time", 上次, a month or year), or one of `speakers` (the
    history's named speakers, lowercased). The first person of a request's frame is the
    one asking ("I need a regex...", 帮我写...), not what it is about. A capitalised word
    alone does not count:
    "Translate 'good morning' into French." names a language, not a person of the history.

    >>> refers_to_history("How many bikes do I own?"), refers_to_history("What is the capital of Peru?")
    (True, False)
    """
    return personal_reading(query, speakers)[0]


# "What food do I like best?", "Where is my passport?", "What is the playlist I made?", 我的狗
# 叫什么？: a question about the user (the first person asked about, something of theirs, or a
# question for a fact with the user in it), not a request that says something of them in passing.
_ABOUT_SELF_EN = re.compile(
    r"\b(?:do|did|does|am|was|were|have|had|can|could|will|would|shall)\s+i\b|\b(?:my|mine|myself)\b",
    re.IGNORECASE,
)
# "...phrases I should learn", "...what I can do": the one who will act on the answer, not a fact
# about them asked for (as "...the playlist I made" is).
_MODAL_SUBJECT_EN = re.compile(
    r"\bi\s+(?:should|can|could|might|may|ought\s+to|need\s+to|want\s+to|would\s+like\s+to)\b", re.IGNORECASE
)
# "...before I go for a long ride", "...when I run": what the user will do, the circumstance
# of what is asked, not what is asked ("...before I saw the goldfinches" is).
_CIRCUMSTANCE_EN = re.compile(
    r"\b(?:before|after|when|whenever|while|if|until|once)\s+i\b(?!\s+(?:" + _PAST_VERB + r")\b)[^.!?]*",
    re.IGNORECASE,
)
_ASKS_FOR_A_FACT_EN = re.compile(
    r"\b(?:what|which|who|whom|whose|where|when|how\s+(?:many|much|long|often))\b", re.IGNORECASE
)


def personal_reading(query: str, speakers: Iterable[str] = ()) -> tuple[bool, bool]:
    """`refers_to_history(query, speakers)`, and whether `query` is about the user only
    because it speaks of them in the first person ("I have a job interview tomorrow, any
    tips?", "I just got a puppy, how often should it eat?", "My sister turns 30, what's a
    fun party theme?"): it asks nothing about them ("What do I...", "my", "What is the
    playlist I made?", 我上次买的书叫什么？: the first person in what a question asks, not in
    the situation it tells first, nor as the one who will act on the answer: "...phrases I
    should learn?", nor in the brief of what a request asks for: "Help me name my new
    bakery.", "Can you draft a toast for my sister's wedding?"), and nothing in it points
    at the history (`points_at_history`; for a request, `intent.past_cue` too: "Tell me
    again what my sister's name is."). Weaker evidence that their old messages are
    wanted: what they said themselves is. One unframing of the query, at most one
    `points_at_history`.

    >>> personal_reading("I have a cold, any tips?"), personal_reading("What food do I like best?")
    ((True, True), (True, False))
    """
    return _personal_reading(query, frozenset(speakers))


@functools.lru_cache(maxsize=256)  # a build reads its query twice
def _personal_reading(query: str, speakers: frozenset[str]) -> tuple[bool, bool]:
    unframed = _without_request_frame(query)
    if not (_FIRST_PERSON_EN.search(unframed) or _FIRST_PERSON_ZH.search(unframed)):
        return points_at_history(query, speakers), False
    questions = _question_clauses(unframed)
    if not questions or WRITING_TASK_ASKED_EN.search(unframed):
        return True, not (points_at_history(query, speakers) or past_cue(query) is not None)
    asking = _CIRCUMSTANCE_EN.sub(" ", WHY_MY_EN.sub(" ", _asking_part(questions)))
    if _ABOUT_SELF_EN.search(asking) or "我的" in asking:
        return True, False
    if any(
        _FIRST_PERSON_EN.search(_MODAL_SUBJECT_EN.sub(" ", _CIRCUMSTANCE_EN.sub(" ", clause)))
        or "我" in clause
        for clause in _asked_clauses(questions)
    ):
        return True, False
    return True, not points_at_history(query, speakers)


# A clause that opens a question or a request: "what's a fun party theme", "any tips",
# "do you have ideas", "can you suggest".
_ASKING_OPENER_EN = re.compile(
    r"^\s*(?:what|which|who|whom|whose|where|when|why|how|any|can|could|would|will|should|shall"
    r"|do|does|did|is|are|was|were|am|have|has|had|may|might)\b",
    re.IGNORECASE,
)


def _asking_part(questions: list[tuple[list[str], bool]]) -> str:
    """What a text asks, without the situation it first tells: in each of its question
    sentences (`questions`, `_question_clauses`), the clauses from the first that opens a
    question ("My sister is turning 30, what's a fun party theme?": "what's a fun party
    theme"; the whole sentence when none opens one; a Chinese one's last clause), and
    nothing of the sentences that only tell ("I've been stuck with my paintings. Any
    ideas?": "Any ideas")."""
    asked = []
    for clauses, chinese in questions:
        if chinese:
            asked += clauses[-1:]
            continue
        asked += clauses[_opening(clauses) :]
    return " ".join(asked)


def _opening(clauses: list[str]) -> int:
    """Where an English question sentence's question opens: its first clause that opens one,
    or its first clause."""
    return next((i for i, c in enumerate(clauses) if _ASKING_OPENER_EN.search(c)), 0)


# A sentence and its end, and a sentence's clauses. Question sentences ("..., how often
# should it eat?", "……，有什么建议吗？") are the sentences that end with a question mark:
# one pass over the text, where a search for "[^.!?]*[?]" rescans a long run of text
# without a question mark from each of its characters.
_SENTENCE = re.compile(r"[^.!?。！？]*[.!?。！？]?")
_CLAUSES = re.compile(r"[^,;:，、；：]+")


def _question_sentences(text: str) -> list[str]:
    return [sentence for sentence in _SENTENCE.findall(text) if sentence.endswith(("?", "？"))]


def _question_clauses(text: str) -> list[tuple[list[str], bool]]:
    """Each question sentence of `text` as its clauses (the last keeps the question mark),
    and whether it is Chinese (it ends with what it asks)."""
    return [
        (
            [c for c in _CLAUSES.findall(sentence) if c.strip()],
            sentence.endswith("？") or bool(count_cjk(sentence)),
        )
        for sentence in _question_sentences(text)
    ]


def _asked_clauses(questions: list[tuple[list[str], bool]]) -> list[str]:
    """The clauses that ask, of question sentences' clauses (`_question_clauses`), without
    the question mark: an English clause with a question word, from where the question
    opens (`_opening`: "My car squeaks when I brake, is that serious?" tells its "when"),
    and the last clause of a Chinese sentence. "I just got a puppy, how often should it
    eat?" asks nothing of the user; "What is the playlist I made?" and 我上次买的书叫什么？ do."""
    asked = []
    for marked, chinese in questions:
        last = marked[-1].rstrip("?？")
        clauses = [*marked[:-1], last] if last.strip() else marked[:-1]
        asked += [c for c in clauses[_opening(clauses) :] if _ASKS_FOR_A_FACT_EN.search(c)]
        if chinese:
            asked += clauses[-1:]
    return asked


def points_at_history(query: str, speakers: Iterable[str] = (), *, by_tense: bool = True) -> bool:
    """Whether `query` refers to the history by more than its first person: what the
    assistant said, a past-pointing phrase, a question put in the past or a year, or one
    of `speakers` (see `refers_to_history`). Without `by_tense`, a question put in the past
    or a year counts only with someone of the conversation in it ("When did I...", "What
    was the hotel you...", "the trip we took in 2019"): "When was the printing press
    invented?" and "What caused the 2008 financial crisis?" ask about the world as readily
    as about the history.

    >>> points_at_history("What did you suggest last time?"), points_at_history("I have a cold, any tips?")
    (True, False)
    """
    return _points_at_history(query, frozenset(speakers), by_tense)


@functools.lru_cache(maxsize=256)
def _points_at_history(query: str, speakers: frozenset[str], by_tense: bool) -> bool:
    if _ASSISTANT_SAID_EN.search(query) or _ASSISTANT_SAID_ZH.search(query):
        return True
    if _HISTORY_EN.search(query) or _HISTORY_ZH.search(query) or _names_a_day_gone_by(query):
        return True
    if (_PAST_QUESTION_EN.search(query) or _YEAR_EN.search(query)) and (
        by_tense or _CONVERSANT_EN.search(query)
    ):
        return True
    lowered = query.lower()
    names = [name for name in speakers if name]
    if any(re.search(rf"(?<!\w){re.escape(name)}(?!\w)", lowered) for name in names):
        return True
    # A short form of a speaker's name written as a name ("Mel" for Melanie): a capitalised
    # word of three letters or more, not the first of the query, that begins a name.
    return any(
        name.startswith(short) and name != short
        for short in (word.lower() for word in _NAME_LIKE.findall(query))
        for name in names
    )

"""The rule fact extractor's patterns, English and Chinese.

Each rule is a regex over one sentence and a small handler that turns a match
into ``(key, value)`` pairs, or into nothing when the match is not a fact
about the user ("I'm not sure", 我叫了外卖). Negation rules ("I no longer live
in Berlin", 我不再吃素了) have the same shape; what they find is a value that
no longer holds. The tables favour precision over recall:
:class:`~convmem._derived.rule_extractor.RuleFactExtractor` runs them over the user's sentences
through a :class:`RuleTable`, which also skips what is asked, imagined,
reported or quoted rather than stated, and refuses values that could carry
instructions into the prompt. A like or love counts only for plain things
("hiking", "spicy food"), not for the ideas and options a chat just offered.

Keys: ``name``, ``city``, ``hometown``, ``age``, ``birthday``, ``birth_year``,
``job``, ``employer``, ``workplace``, ``diet``, ``pet``, ``pet_name``, family
roles (``mother``, ``older_sister``, ``husband``, ... = their name), and
``favourite:<thing>`` = value, ``preference:<thing>`` = likes / loves /
prefers / dislikes / hates, ``allergy:<thing>`` = allergic,
``language:<language>`` = speaks / native / learning.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

from .._language import TRIM_CHARS

__all__ = [
    "EN_NEGATIONS",
    "EN_RULES",
    "ZH_NEGATIONS",
    "ZH_RULES",
    "Pairs",
    "Rule",
    "RuleTable",
    "Said",
    "carries_instructions",
    "handed_over_at",
    "is_question",
    "pet_name_following",
    "strip_quoted_speech",
    "trim_value",
]

Pairs = list[tuple[str, str]]


class Rule(NamedTuple):
    """A pattern, the handler that turns its match into pairs, and cues: words
    (lowercase) one of which any match contains, so a sentence without them
    skips the pattern. Cues keep the extractor cheap enough to run on every ``add``."""

    pattern: re.Pattern[str]
    handle: Callable[[re.Match[str]], Pairs]
    cues: tuple[str, ...] = ()


Said = tuple[str, str, bool]
"""``(key, value, negated)``: what one sentence says about the user."""

# --------------------------------------------------------------------------- what is not a statement

_QUESTION_END = re.compile(r"(?:[?？]|[吗么嘛][\W_]*)\s*$")
# Before a match, these make the rest of the sentence something other than a
# statement about the user: a condition or wish, a story or role play, a plan,
# a translation exercise, or what someone else said or believes.
_NOT_ASSERTED = re.compile(
    r"(?i:\b(?:if|suppose|supposing|assume|assuming|asume|imagine|pretend|would|wish|maybe|perhaps|might|story"
    r"|novel|fiction|let's\s+say"
    r"|role[- ]?play|scenario|translate|translation|sentence|example)\b"
    r"|\b(?!(?:i|we)\b)[a-z]+\s+(?:(?:just|always|once|also|then|never)\s+)?(?:said|says|told|tells|claims?"
    r"|claimed|wrote|writes|thinks?|thought|asked|asks|believes?|insists?)\b"
    r"|\baccording\s+to\b|\bheard\s+that\b)"
    r"|如果|假如|要是|假设|假使|想象|但愿|希望|梦见|梦到|故事|假装|扮演|翻译|造句|例句"
    r"|听说|据说|以为|打算|计划|准备|可能|也许|或许|说不定"
    r"|(?:他|她|它|人家|别人|朋友|同事|老板|医生|老师|妈|爸)们?(?:都|也|还|总|老)?(?:说|讲|告诉|认为|觉得|问)"
)
# A request that hands over text to work on ("Reply to this review and thank them:
# I'm 43 and...", "Give me 10 bullet points on this<newline><article>", 把下面这段话
# 翻译成英文：...): what follows is that text, someone else's words, not the user
# speaking of themselves. The user's own text ("Improve my bio: I'm a nurse...") is
# not handed over this way.
_HANDED_OVER = re.compile(
    r"(?im:^\s*(?:(?:please|pls|can\s+you|could\s+you|would\s+you)\s+)*(?:write|rewrite|reply|respond|answer"
    r"|translate|summari[sz]e|paraphrase|proofread|edit|correct|improve|fix|check|review|analy[sz]e|give\s+me"
    r"|make|turn|convert|format|generate|draft|compose|create|read|rate|grade|critique|shorten|expand|polish"
    r"|explain|list|extract|classify|categori[sz]e|tell\s+me|help\s+me)\b[^\n:]{0,200}?"
    r"\b(?:this|these|the\s+following|following|below|above)\b[^\n:]{0,120}?(?::|\n))"
    r"|(?:下面|以下|下列)[^\n:：]{0,30}?[：:\n]"
)
# Text that tries to steer the model. A message holding it yields no fact at
# all: memory is data, and this is not data about the user.
_INSTRUCTIONS = re.compile(
    r"(?i:\b(?:ignor\w*|disregard\w*|forget\w*|overrid\w*|bypass\w*)\b[^.!?\n]{0,40}?"
    r"\b(?:instructions?|prompts?|rules|guidelines|directives|guardrails)\b"
    r"|\bsystem\s+prompt|\byou\s+are\s+now\b|\bjailbreak|\bdeveloper\s+mode\b|\bnew\s+instructions?\b)"
    r"|(?:忽略|无视|忘记|忘掉|不要理会|别管|绕过)[^。！？\n]{0,20}?(?:指令|提示|规则|设定|要求|限制)"
    r"|系统提示|提示词|越狱|你现在是"
)
# Words one of which every match of _INSTRUCTIONS holds (once spaces are collapsed);
# most messages have none and skip the regex.
_INSTRUCTION_CUES = re.compile(
    "ignor|disregard|forget|overrid|bypass|system|you are now|jailbreak|developer mode|instruction"
    "|忽略|无视|忘记|忘掉|不要理会|别管|绕过|系统提示|提示词|越狱|你现在是"
)
# A quoted span holding a first-person statement is somebody's words, not the
# user's statement: He said "I live in Rome", 请用“我住在北京”造句.
_QUOTED = re.compile(
    r"“[^”\n]*”|「[^」\n]*」|『[^』\n]*』|\"[^\"\n]*\"|‘[^’\n]*’"
    r"|(?<![A-Za-z])'(?:[^'\n]|(?<=[A-Za-z])'(?=[A-Za-z]))*'(?![A-Za-z])"
)
_FIRST_PERSON = re.compile(r"(?i:\b(?:i|i'm|i've|i'd|i'll|my|me|mine|we|our)\b)|我")
# Values that name a role in the conversation rather than a person ("call me Admin").
_ROLE_NAMES = frozenset(
    """
    admin administrator root system sudo superuser assistant ai bot chatbot user developer dev moderator mod
    operator god master owner 管理员 超级管理员 系统 超级用户 开发者 助手 主人 上帝
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_NAME_KEYS = frozenset(
    """
    name pet_name mother father sister older_sister younger_sister brother older_brother younger_brother
    wife husband spouse partner boyfriend girlfriend son daughter grandmother grandfather
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_UNSAFE_CHARS = re.compile(r"[<>{}\[\]`|\\]|://")
_MAX_VALUE_CHARS = 40


def handed_over_at(text: str) -> int | None:
    """Where text handed over for a task begins in `text` (see `_HANDED_OVER`), or None."""
    found = _HANDED_OVER.search(text)
    return found.end() if found else None


def is_question(sentence: str) -> bool:
    """Whether `sentence` asks rather than states ("Do I live in Paris?", 你知道我住在哪里吗)."""
    return bool(_QUESTION_END.search(sentence))


def carries_instructions(text: str) -> bool:
    """Whether `text` tries to instruct the model ("ignore all previous instructions", 忽略之前的指令)."""
    return bool(_INSTRUCTION_CUES.search(" ".join(text.lower().split())) and _INSTRUCTIONS.search(text))


def strip_quoted_speech(text: str) -> str:
    """`text` with quoted first-person statements emptied: ``He said "I live in Rome"`` -> ``He said ""``."""

    def empty(match: re.Match[str]) -> str:
        quote = match.group(0)
        return quote[0] + quote[-1] if _FIRST_PERSON.search(quote[1:-1]) else quote

    return _QUOTED.sub(empty, text) if any(mark in text for mark in "\"'“「『‘") else text


def _safe(key: str, value: str) -> bool:
    """A value short enough, on one line, without control characters, markup or instructions."""
    if not value or len(value) > _MAX_VALUE_CHARS or len(key) > _MAX_VALUE_CHARS + 20:
        return False
    if not value.isprintable():  # control and format characters, line and paragraph separators
        return False
    if _UNSAFE_CHARS.search(value) or _INSTRUCTIONS.search(value):
        return False
    return not (key in _NAME_KEYS and value.casefold() in _ROLE_NAMES)


# --------------------------------------------------------------------------- English

_CAP_WORDS = r"[A-Z][A-Za-z'’-]*(?:\s+[A-Z][A-Za-z'’-]*){0,2}"
_TITLED_CAP_WORDS = r"(?:(?:Dr|Mr|Mrs|Ms|Miss|Prof)\.?\s+)?" + _CAP_WORDS
_ANY_WORDS = r"[A-Za-z][A-Za-z'’-]*(?:\s+[A-Za-z][A-Za-z'’-]*){0,2}"
_PLACE = r"(?:the\s+)?[A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|of|de|la|upon))*"
_ORG = r"(?:the\s+)?[A-Z][\w&.'’-]*(?:\s+[A-Z][\w&.'’-]*){0,3}"
_MONTHS = (
    "january february march april may june july august september october november december"
    " jan feb mar apr jun jul aug sep sept oct nov dec"
)
# Capitalized words that follow "I'm" without being a name.
_NOT_A_NAME = frozenset(
    """
    not so very just really also still here there back home done fine good ok okay sorry sure glad happy
    afraid tired busy ready new free single married pregnant vegan vegetarian american british english
    chinese canadian french german japanese korean indian australian italian spanish mexican russian
    brazilian dutch swiss irish scottish welsh christian muslim jewish catholic buddhist hindu atheist
    gay straight monday tuesday wednesday thursday friday saturday sunday today tomorrow tonight
    from in at on with going trying looking working living thinking planning the a an i is was and but
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_NOT_A_PLACE = frozenset(
    "a an my our his her their this that here there home i it".split()  # noqa: SIM905 - reads better as text
) | frozenset(_MONTHS.split())
# Capitalized fields of work and tools: "I work in IT", "I work in Python" name no place.
_NOT_A_WORKPLACE = frozenset(
    """
    it hr sales marketing finance tech engineering healthcare education retail construction hospitality
    research management software design operations support accounting legal python java javascript
    typescript go rust ruby php swift kotlin scala excel react sql
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_NAME_TAIL_WORDS = frozenset(
    ["and", "but", "or", "so", "by", "from", "btw", "though", "too", "also", "now", "here"]
)
_EN_PRONOUN_OBJECTS = frozenset(
    """
    it that this these those you him her them us me what how when where why who which whom your his their
    our its there here one ones something anything everything nothing being having doing myself yourself
    i
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_EN_OBJECT_STOP = re.compile(
    r"(?i)\s*(?:[.!?;:]|,\s*(?:i|we|it|but|so|not)\b|\b(?:but|because|since|though|although|when|whenever|if"
    r"|while|so|as|than|over|more|better|rather|very much|a lot|too|anymore|any more|nowadays|these days"
    r"|lately|especially|particularly|mostly|usually|often|sometimes|always|every)\b)"
)
_EN_ARTICLES = re.compile(r"(?i)^(?:a|an|the|my|some|all|most|good|to)\s+")
_SPECIES_EN = (
    r"dog|puppy|cat|kitten|rabbit|bunny|hamster|parrot|bird|fish|turtle|tortoise|guinea pig|snake|lizard"
    r"|horse|ferret|hedgehog|corgi|husky|poodle|labrador|golden retriever|beagle|bulldog|pug|chihuahua"
    r"|shiba inu|dachshund|terrier|gecko|budgie|cockatiel|chinchilla|rat|mouse"
)
_SPECIES_CANONICAL = {"puppy": "dog", "kitten": "cat", "bunny": "rabbit"}
# "I have a cat allergy", "we have a dog bed": the animal names something else.
_NOT_A_PET_AFTER = (
    r"(?i:allerg\w*|food|toy|bed|sitter|walker|tank|cage|hair|person|lover|owner|show|video|meme|flap|door"
    r"|tree|litter|treat|collar|leash|plant)\b"
)
_PET_ADJECTIVES = (
    r"(?:(?:little|cute|new|young|old|big|small|sweet|lovely|tiny|fat|lazy|black|white|grey|gray|orange"
    r"|ginger|rescue|senior|adorable)\s+){0,2}"
)
_PROFESSIONS_EN = (
    r"engineer|developer|programmer|designer|teacher|doctor|nurse|lawyer|student|manager|accountant|scientist"
    r"|researcher|writer|artist|chef|cook|pilot|architect|consultant|analyst|professor|dentist|pharmacist"
    r"|photographer|musician|driver|farmer|firefighter|police officer|journalist|editor|translator"
    r"|entrepreneur|founder|intern|therapist|librarian|mechanic|electrician|plumber|veterinarian|vet"
    r"|paramedic|barista|waiter|waitress|cashier|receptionist|secretary|freelancer|contractor|tutor|coach"
    r"|surgeon|physician|carpenter|baker|recruiter|banker|economist|technician|marketer|officer|soldier"
)
_NOT_A_JOB_START = frozenset(
    ["the", "not", "best", "worst", "good", "bad", "such", "so", "also", "still", "no", "former", "ex"]
)
_KIN_EN = {
    "mom": "mother",
    "mum": "mother",
    "mother": "mother",
    "dad": "father",
    "father": "father",
    "sister": "sister",
    "brother": "brother",
    "wife": "wife",
    "husband": "husband",
    "son": "son",
    "daughter": "daughter",
    "partner": "partner",
    "boyfriend": "boyfriend",
    "girlfriend": "girlfriend",
    "grandma": "grandmother",
    "grandmother": "grandmother",
    "granny": "grandmother",
    "grandpa": "grandfather",
    "grandfather": "grandfather",
}
_KIN_AGE_EN = {"older": "older", "elder": "older", "big": "older", "younger": "younger", "little": "younger"}
_DIETS_EN = (
    r"vegetarian|vegan|pescatarian|pescetarian|keto|gluten[- ]free|dairy[- ]free|lactose[- ]free|halal"
    r"|kosher|paleo|plant[- ]based"
)
_LANGUAGES_EN = (
    r"english|spanish|french|german|italian|portuguese|russian|mandarin|chinese|cantonese|japanese|korean"
    r"|arabic|hindi|urdu|bengali|punjabi|dutch|swedish|norwegian|danish|finnish|polish|czech|greek|turkish"
    r"|hebrew|persian|farsi|vietnamese|thai|indonesian|malay|tagalog|swahili|ukrainian|romanian|hungarian"
    r"|catalan|tamil|telugu|sign language"
)
_LANGUAGE_ITEM_EN = re.compile(
    r"(?i)(?:(?:a\s+)?(?:bit|little|lot)\s+of\s+|a\s+little\s+|some\s+|fluent\s+|basic\s+|conversational\s+"
    r"|broken\s+|native\s+|passable\s+)*(" + _LANGUAGES_EN + r")"
)
_THING_SPELLING = {"color": "colour", "colors": "colour", "colours": "colour", "flavor": "flavour"}
_DATE_WORD = re.compile(r"\d|(?i:\b(?:" + _MONTHS.replace(" ", "|") + r")\b)")


def trim_value(value: str) -> str:
    """`value` without the spaces, punctuation and quotes around it."""
    return value.strip(TRIM_CHARS)


def _cut_name_tail(value: str) -> str:
    words = value.split()
    for index, word in enumerate(words):
        if word.lower() in _NAME_TAIL_WORDS:
            words = words[:index]
            break
    return trim_value(" ".join(words))


def _en_name(match: re.Match[str], *, check_common_words: bool = True) -> Pairs:
    name = _cut_name_tail(match.group(1))
    if not name or (check_common_words and name.split()[0].lower() in _NOT_A_NAME):
        return []
    if name.split()[0].lower() in ("not", "a", "an", "the", "secret", "irrelevant", "unknown"):
        return []
    return [("name", name)]


def _en_place(key: str, group: int | str = 1) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        place = re.sub(r"^the\s+", "", trim_value(match.group(group)))
        place = re.sub(r"\s+(?:of|de|la|upon)$", "", place)
        if not place or place.split()[0].lower() in _NOT_A_PLACE:
            return []
        if key == "workplace" and place.lower() in _NOT_A_WORKPLACE:
            return []
        return [(key, place)]

    return handle


def _en_objects(text: str) -> list[str]:
    stop = _EN_OBJECT_STOP.search(text)
    text = text[: stop.start()] if stop else text
    objects = []
    for item in re.split(r"\s*,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|\s*&\s*", text):
        item = _EN_ARTICLES.sub("", trim_value(item)).strip()
        words = item.lower().split()
        if not words or len(words) > 4 or any(word in _EN_PRONOUN_OBJECTS for word in words):
            continue
        objects.append(" ".join(words))
    return objects


# A preference is something the user likes beyond the moment. Liking what the chat
# just offered or spoke of is not one: "I like the idea of X", "I love the third
# option", "I like the sound of it", "I love how the show ends". So the things
# liked are read as a list, and the list ends at the first that is not a plain
# thing: one that points back ("the", "that", "your"), names an offer (idea,
# option, suggestion), holds a clause ("noodles sounds amazing"), a number, a
# quote inside it, or ends on a little word ("podcasts with a"). When the first
# is not a plain thing, nothing is a preference. A list also ends where its next
# item is more likely part of the one before: a noun after an "-ing" phrase with
# an object ("buying household items, toiletries") or after a phrase with a
# preposition ("scrambled eggs with spinach and feta").
_EN_REACTION_WORDS = frozenset(
    """
    idea ideas suggestion suggestions option options sound sounds tip tips plan plans template templates theme
    themes recommendation recommendations list lists choice choices layout concept combination approach
    version look way fact aspect part example examples one ones thought thoughts
    """.split()  # noqa: SIM905 - a word list reads better as text
)
_EN_POINTING_WORDS = frozenset("the this that these those your his her their its our".split())  # noqa: SIM905
_EN_CLAUSE_WORDS = frozenset(
    """
    is are was were sounds looks seems makes brings gets goes it's that's they're there's i'd i'm i've he's
    she's we're you're
    """.split()  # noqa: SIM905 - a word list reads better as text
)
# "I like to have control", "I love to help": these verbs say too little without what follows.
_EN_LIGHT_VERBS = frozenset("have be get make do keep go help see hear know".split())  # noqa: SIM905
_EN_PREPOSITIONS = frozenset("with of for in on at from about to into by".split())  # noqa: SIM905
_EN_LITTLE_WORDS = frozenset(
    "a an the and or but to of in on at for with by from together lol haha thanks best most".split()  # noqa: SIM905
)
_EN_PREFERENCE_END = re.compile(
    r"(?i)\s*(?:[.!?;:]|\s[-–—]\s|,\s*(?:i|we|it|but|so|not)\b|\b(?:but|because|since|though|although|when"
    r"|whenever|if|while|so|as|than|over|more|better|rather|very much|a lot|too|anymore|any more|nowadays"
    r"|these days|lately|especially|particularly|mostly|usually|often|sometimes|always|every|'cause|cause|cuz|given|due"
    r"|which|who|whereas|and\s+(?:i|i'd|i'm|i've|it|it's|that|this|they|we|he|she|so|then))\b)"
)
_EN_LIST_BREAK = re.compile(r"(\s*,\s*(?:and\s+|or\s+)?|\s+and\s+|\s+or\s+|\s*&\s*)")
_EN_QUANTIFIERS = re.compile(r"(?i)^(?:(?:all|most|some)\s+)+")
_EN_PREFERENCE_ARTICLES = re.compile(r"(?i)^(?:a|an|my|good|to)\s+")
# Words before "I" that leave it opening its clause ("...and I love", "honestly, I
# like", "that's why I love"); any other word makes "I like" a relative clause
# about something else ("the one I like best", "something I love is...").
_EN_CLAUSE_OPENERS = frozenset(
    """
    and but so because since as cause 'cause cuz plus also though although yeah yes yep oh well honestly
    personally really actually definitely just still think guess know mean admit say must too now lol haha
    hey anyway anyways why much then tbh sure ok okay wow frankly
    """.split()  # noqa: SIM905 - a word list reads better as text
)


def _opens_clause(text: str, at: int) -> bool:
    """Whether the word at `at` in `text` begins a clause rather than continuing a noun's."""
    before = text[:at].rstrip()
    if not before or before[-1] in ",;:—–-(\"“'‘":
        return True
    return before.split()[-1].lower().strip("\"“”'‘’") in _EN_CLAUSE_OPENERS


def _plain_thing(item: str) -> str | None:
    """`item` of a list of things liked, as a preference's thing, or None when it is not a plain thing."""
    raw = item.strip()
    if any(mark in trim_value(raw) for mark in '"“”[]()') or re.search(r"\d", raw):
        return None
    words = _EN_QUANTIFIERS.sub("", trim_value(raw)).lower().split()
    if not words or words[0] in _EN_POINTING_WORDS or "my" in words[1:]:
        return None
    if words[0] == "to" and len(words) > 1 and words[1] in _EN_LIGHT_VERBS:
        return None
    if any(word in _EN_REACTION_WORDS or word in _EN_PRONOUN_OBJECTS for word in words):
        return None
    thing = _EN_PREFERENCE_ARTICLES.sub("", " ".join(words))
    words = thing.split()
    if not words or len(words) > 4 or words[-1] in _EN_LITTLE_WORDS:
        return None
    return thing


def _en_liked_things(text: str) -> list[str]:
    """The plain things of the list `text` begins with ("hiking and photography, and I..." -> both)."""
    end = _EN_PREFERENCE_END.search(text)
    listed = (text[: end.start()] if end else text).strip()
    if any(mark in listed[1:-1] for mark in '"“”'):
        return []  # a quoted title with more around it, or a quote that ends elsewhere
    pieces = _EN_LIST_BREAK.split(listed)
    things: list[str] = []
    for index in range(0, len(pieces), 2):
        if not pieces[index].strip() and index == len(pieces) - 1 and things:
            break  # the list ended on "and" or a comma
        if any(word.lower() in _EN_CLAUSE_WORDS for word in pieces[index].split()):
            break  # "spicy food and shrimp is my favourite": a new clause
        thing = _plain_thing(pieces[index])
        if thing is None:
            break
        if things:
            before = things[-1].split()
            if (before[0].endswith("ing") and len(before) > 1 and not thing.split()[0].endswith("ing")) or (
                _EN_PREPOSITIONS & set(before[1:])
            ):
                break
        things.append(thing)
    return things


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
        if not _opens_clause(match.string, match.start()):
            return []
        return [(f"preference:{thing}", said) for thing in _en_liked_things(wanted)]

    return handle


def _singular(thing: str) -> str:
    """``"peanuts"`` -> ``"peanut"``, ``"strawberries"`` -> ``"strawberry"``: one key per allergen."""
    head, _, last = thing.rpartition(" ")
    if last.endswith("ies") and len(last) > 4:
        last = last[:-3] + "y"
    elif last.endswith(("oes", "ches", "shes", "xes", "sses", "zes")) and len(last) > 4:
        last = last[:-2]
    elif last.endswith("s") and not last.endswith(("ss", "us", "is")) and len(last) > 3:
        last = last[:-1]
    return f"{head} {last}" if head else last


def _en_allergies(match: re.Match[str]) -> Pairs:
    return [(f"allergy:{_singular(thing)}", "allergic") for thing in _en_objects(match.group("object"))]


def _en_languages(value: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        pairs = []
        for item in _en_objects(match.group("object")):
            item = re.split(r"\s+(?:at|for|since|with|in|on|from|right|these|this|every|now)\b", item)[0]
            language = _LANGUAGE_ITEM_EN.fullmatch(item)
            if language:
                pairs.append((f"language:{language.group(1).lower()}", value))
        return pairs

    return handle


def _en_diet(match: re.Match[str]) -> Pairs:
    diet = re.sub(r"\s+", "-", match.group("diet").lower()).replace("pescetarian", "pescatarian")
    return [("diet", diet)]


def _en_pet(match: re.Match[str]) -> Pairs:
    species = match.group("species").lower()
    pairs = [("pet", _SPECIES_CANONICAL.get(species, species))]
    groups = match.groupdict()
    name = groups.get("name") or groups.get("later_name")
    if name:
        name = _cut_name_tail(name)
        if name and name.split()[0].lower() not in _NOT_A_NAME:
            pairs.append(("pet_name", name))
    return pairs


def _en_family(match: re.Match[str]) -> Pairs:
    role = _KIN_EN[match.group("kin").lower()]
    age = _KIN_AGE_EN.get((match.group("age") or "").lower())
    if age and role in ("sister", "brother"):
        role = f"{age}_{role}"
    name = _cut_name_tail(match.group("name"))
    if len(name) < 2 or name.split()[0].lower() in _NOT_A_NAME:
        return []
    return [(role, name)]


_FAVOURITE_VALUE_END = re.compile(
    r"(?i)\s+(?:but|because|since|though|by the way|btw|and (?:i|my|for|it|that|this|so|he|she|they)\b|lol|now"
    r"|these days|at the moment|lately"
    r"|anymore)\b"
)
_NOT_IN_A_THING = frozenset(["and", "or", "but", "is", "are", "was", "were", "part", "thing", "one"])


def _en_favourite(match: re.Match[str]) -> Pairs:
    thing = " ".join(match.group("thing").lower().split())
    thing = _THING_SPELLING.get(thing, thing)
    value = trim_value(_FAVOURITE_VALUE_END.split(match.group("value"), maxsplit=1)[0])
    if not value or len(value.split()) > 5 or set(thing.split()) & _NOT_IN_A_THING:
        return []
    if value.split()[0].lower() in _EN_PRONOUN_OBJECTS | {"my", "your", "his", "her", "our", "their"}:
        return []
    if thing == "name":
        return [("name", value)] if value[0].isupper() else []
    return [(f"favourite:{thing}", value)]


def _en_date(key: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        value = trim_value(re.split(r"(?i)\s+(?:and|but|so|which|btw)\b", match.group(1))[0])
        value = re.sub(r"(?i)^the\s+", "", value)
        if not value or len(value.split()) > 5 or not _DATE_WORD.search(value):
            return []
        return [(key, value)]

    return handle


def _age(match: re.Match[str]) -> Pairs:
    age = _number(match.group(1))
    return [("age", str(age))] if age is not None and 0 < age < 130 else []


def _bare_age(match: re.Match[str]) -> Pairs:
    """ "I'm 34.": only a plausible adult age, since a bare number could count anything."""
    age = int(match.group(1))
    return [("age", str(age))] if 5 <= age < 100 else []


def _single(key: str, *, max_words: int = 6) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        value = trim_value(match.group(1))
        if not value or len(value.split()) > max_words:
            return []
        return [(key, value)]

    return handle


def _employer(value: str) -> str:
    return re.sub(r"^the\s+", "", trim_value(value))


def _en_job(job: str) -> str | None:
    job = trim_value(job)
    words = job.lower().split()
    if not words or len(words) > 4 or words[0] in _NOT_A_JOB_START:
        return None
    return job


def _en_work(match: re.Match[str]) -> Pairs:
    """Age, job, employer and hometown, in the order said: "I work at Acme as a data
    engineer", "I'm a software engineer at Google", "I'm a 27 year old nurse from Ohio"."""
    groups = match.groupdict()
    pairs: Pairs = []
    if groups.get("age") and 0 < int(groups["age"]) < 130:
        pairs.append(("age", str(int(groups["age"]))))
    job = _en_job(groups["job"]) if groups.get("job") else None
    employer = _employer(groups["org"]) if groups.get("org") else None
    if groups.get("org_first") and employer:
        pairs.append(("employer", employer))
    if job:
        pairs.append(("job", job))
    if employer and not groups.get("org_first"):
        pairs.append(("employer", employer))
    if groups.get("place"):
        pairs += _en_place("hometown", "place")(match)
    return pairs


def _negated_employer(match: re.Match[str]) -> Pairs:
    employer = _employer(match.group(1))
    return [("employer", employer)] if employer else []


_I_AM = r"(?i:\bi(?:'m|\s+am)\s+)"
_WE_ARE = r"(?i:\b(?:i|we)(?:'m|'re|\s+am|\s+are)\s+)"

EN_RULES: list[Rule] = [
    Rule(
        re.compile(r"(?i:\bmy\s+name(?:'s|\s+is)\s+)(" + _ANY_WORDS + ")"),
        lambda m: _en_name(m, check_common_words=False),
        ("name",),
    ),
    Rule(
        re.compile(
            r"(?<![Nn]ot )(?<!n't )(?<![Nn]ever )(?i:\b(?:you\s+can\s+|please\s+|just\s+|simply\s+)?call\s+me\s+)"
            r"(" + _TITLED_CAP_WORDS + r")(?=\s*(?:$|[,.!;]))"
        ),
        _en_name,
        ("call",),
    ),
    Rule(
        re.compile(
            r"(?i:\b(?:everyone|everybody|people|friends|my\s+friends|most\s+people|they\s+all|folks)\s+calls?"
            r"\s+me\s+)(" + _CAP_WORDS + r")(?=\s*(?:$|[,.!;]))"
        ),
        _en_name,
        ("call",),
    ),
    Rule(
        re.compile(
            r"(?:^|(?<=[\s,]))(?i:i(?:'m|\s+am)\s+)([A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)"
            r"(?=\s*(?:$|[,.!;]|\band\b|\bfrom\b|\bby the way\b))"
        ),
        _en_name,
        ("'m", "am"),
    ),
    # where the user lives, and where from
    Rule(
        re.compile(
            r"(?i:\b(?:i|we)\s+(?:now\s+|currently\s+|still\s+|also\s+|actually\s+)?live\s+in\s+"
            r"|" + _WE_ARE + r"(?:now\s+|currently\s+)?(?:living|based|settled)\s+(?:in|out\s+of)\s+"
            r"|\b(?:i|we)(?:'ve|\s+have)?\s+(?:just\s+|recently\s+|finally\s+)?(?:moved|relocated)\s+"
            r"(?:back\s+|over\s+)?(?:from\s+(?-i:" + _PLACE + r")\s+)?to\s+)(" + _PLACE + ")"
        ),
        _en_place("city"),
        ("live", "living", "based", "settled", "moved", "relocated"),
    ),
    Rule(
        re.compile(
            r"(?i:\bi(?:'m|\s+am)\s+(?:originally\s+)?from\s+|\bi\s+(?:originally\s+)?come\s+from\s+"
            r"|\bi\s+was\s+born\s+in\s+)(" + _PLACE + ")"
        ),
        _en_place("hometown"),
        ("from", "born"),
    ),
    # likes and dislikes
    Rule(
        re.compile(
            r"(?i:\bi\s+(?:really\s+|also\s+|just\s+|absolutely\s+|do\s+|totally\s+|especially\s+)*"
            r"(?P<verb>like|love|adore|enjoy|prefer)\s+)(?P<object>[^.!?;]+)"
        ),
        _en_preference("likes"),
        ("like", "love", "adore", "enjoy", "prefer"),
    ),
    Rule(
        re.compile(
            r"(?i:\bi\s+(?:really\s+|just\s+|also\s+)*(?:don't|do\s+not|dont)\s+(?:really\s+)?"
            r"(?:like|love|enjoy)\s+|\bi\s+(?:really\s+|just\s+|kind\s+of\s+|kinda\s+|also\s+)*dislike\s+"
            r"|" + _I_AM + r"not\s+(?:a\s+)?(?:big\s+|huge\s+|great\s+|massive\s+)?fan\s+of\s+)"
            r"(?P<object>[^.!?;]+)"
        ),
        _en_preference("dislikes"),
        ("like", "love", "enjoy", "dislike", "fan"),
    ),
    Rule(
        re.compile(_I_AM + r"(?i:(?:a\s+)?(?:big|huge|massive|great)\s+fan\s+of\s+)(?P<object>[^.!?;]+)"),
        _en_preference("likes"),
        ("fan",),
    ),
    Rule(
        re.compile(
            r"(?i:\bi\s+(?:really\s+|just\s+|absolutely\s+)*(?P<verb>hate|detest|can't\s+stand"
            r"|cannot\s+stand)\s+)(?P<object>[^.!?;]+)"
        ),
        _en_preference("hates"),
        ("hate", "detest", "stand"),
    ),
    # favourites
    Rule(
        re.compile(
            r"(?i:\bmy\s+(?:all[- ]time\s+|absolute\s+|current\s+|very\s+|new\s+)?(?:favou?rite|fav|fave"
            r"|preferred)\s+(?P<thing>[a-z][a-z-]*(?:\s+[a-z][a-z-]*){0,2}?)(?:\s+(?:is|are)|'s)"
            r"\s+(?:definitely\s+|probably\s+|still\s+)?)(?P<value>(?:(?!\s+and\s+my\b)[^,.!?;])+)"
        ),
        _en_favourite,
        ("fav", "preferred"),
    ),
    Rule(
        re.compile(
            r"^(?i:(?:honestly|well|oh|so|and)\W+)?(?P<value>[A-Za-z][\w'-]*(?:\s+[\w'-]+){0,3}?)"
            r"(?i:\s+(?:is|are)\s+(?:definitely\s+|still\s+)?my\s+(?:all[- ]time\s+|absolute\s+)?"
            r"(?:favou?rite|fav|fave)\s+(?P<thing>[a-z]+(?:\s+[a-z]+)?))(?=\s*(?:$|[,.!;]|\band\b|\bbut\b))"
        ),
        _en_favourite,
        ("fav",),
    ),
    # pets
    Rule(
        re.compile(
            r"(?i:\b(?:i|we)(?:'ve|\s+have)?\s+(?:also\s+|just\s+|recently\s+|finally\s+)?"
            r"(?:got|have|own|adopted|rescued)\s+(?:(?:my|our)sel(?:f|ves)\s+)?(?:a|an|one)\s+"
            + _PET_ADJECTIVES
            + r")(?P<species>(?i:"
            + _SPECIES_EN
            + r"))(?!\s*"
            + _NOT_A_PET_AFTER
            + r")(?:\s*,?\s*(?i:named|called)\s+(?P<name>"
            + _CAP_WORDS
            + r")|(?:\s+[a-z]+){0,4}\s*,\s*(?i:her|his|its|whose)\s+name(?:'s|\s+is)\s+(?P<later_name>"
            + _CAP_WORDS
            + r"))?(?=\W|$)"
        ),
        _en_pet,
        ("got", "have", "own", "adopted", "rescued"),
    ),
    Rule(
        re.compile(
            r"(?i:\bmy\s+" + _PET_ADJECTIVES + r")(?P<species>(?i:" + _SPECIES_EN + r"))"
            r"(?i:(?:'s|’s)\s+name\s+is|\s+is\s+(?:named|called))\s+(?P<name>[A-Za-z][A-Za-z'’-]*)"
        ),
        _en_pet,
        ("my",),
    ),
    Rule(
        re.compile(
            r"(?i:\bmy\s+" + _PET_ADJECTIVES + r")(?P<species>(?i:" + _SPECIES_EN + r"))\s*,?\s+"
            r"(?P<name>[A-Z][a-z]+)\b"
        ),
        _en_pet,
        ("my",),
    ),
    # family
    Rule(
        re.compile(
            r"(?i:\bmy\s+(?:(?P<age>older|elder|big|younger|little)\s+)?(?P<kin>"
            + "|".join(_KIN_EN)
            + r")(?!-in-law)(?:'s\s+name\s+is\s+|\s+is\s+(?:called|named)\s+|\s*,\s*|\s+))"
            r"(?P<name>[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?)\b"
        ),
        _en_family,
        ("my",),
    ),
    # work
    Rule(
        re.compile(
            r"(?i:\bi\s+(?:currently\s+|now\s+)?work\s+as\s+(?:an?\s+)?)([A-Za-z][A-Za-z -]{1,40}?)"
            r"(?=\s*(?:$|[,.!?;]|\b(?:at|in|for|and|but|since|now)\b))"
        ),
        _single("job", max_words=4),
        ("work",),
    ),
    Rule(
        re.compile(
            _I_AM
            + r"(?i:(?:currently\s+|now\s+)?(?:an?\s+)?(?:(?P<age>\d{1,3})[\s-]*(?:years?|yrs?)[\s-]*old\s+)?)"
            r"(?P<job>(?:[A-Za-z-]+\s+){0,2}(?i:" + _PROFESSIONS_EN + r"))"
            r"(?:\s+(?i:at|for)\s+(?P<org>" + _ORG + r"))?(?:\s+(?i:from)\s+(?P<place>" + _PLACE + r"))?"
            r"(?=\s*(?:$|[,.!?;]|\b(?i:at|in|for|and|but|from|with)\b))"
        ),
        _en_work,
        ("'m", "am"),
    ),
    Rule(
        re.compile(
            r"(?i:\bi\s+(?:currently\s+|now\s+)?work\s+(?:at|for)\s+)(?P<org_first>(?P<org>" + _ORG + r"))"
            r"(?:\s+(?i:as)\s+(?:an?\s+)?(?P<job>[A-Za-z][A-Za-z -]{1,40}?)"
            r"(?=\s*(?:$|[,.!?;]|\b(?:in|for|and|but|since|now)\b)))?"
        ),
        _en_work,
        ("work",),
    ),
    Rule(
        re.compile(r"(?i:\bi\s+(?:currently\s+|now\s+)?work\s+in\s+)(" + _PLACE + ")"),
        _en_place("workplace"),
        ("work",),
    ),
    # age and birthday
    Rule(
        re.compile(r"(?i:\bi(?:'m|\s+am)\s+)(\d{1,3})(?i:\s*(?:years?|yrs?)[\s-]*old\b|\s*y/?o\b)"),
        _age,
        ("'m", "am"),
    ),
    Rule(
        re.compile(
            r"(?i:\bi(?:'m|\s+am)\s+(?:now\s+)?)(\d{1,2})(?=\s*(?:$|[.!,;]|\s+(?i:and|but|now|this\s+year|btw)\b))"
        ),
        _bare_age,
        ("'m", "am"),
    ),
    Rule(re.compile(r"(?i:\bi\s+(?:just\s+)?turned\s+)(\d{1,3})\b"), _age, ("turned",)),
    Rule(
        re.compile(r"(?i:\bmy\s+birthday(?:'s|\s+is)\s+(?:on\s+)?)([^,.!?;]{3,30})"),
        _en_date("birthday"),
        ("birthday",),
    ),
    Rule(re.compile(r"(?i:\bi\s+was\s+born\s+on\s+)([^,.!?;]{3,30})"), _en_date("birthday"), ("born",)),
    Rule(re.compile(r"(?i:\bi\s+was\s+born\s+in\s+)((?:19|20)\d\d)\b"), _single("birth_year"), ("born",)),
    # allergies, diets, languages
    Rule(
        re.compile(
            _I_AM + r"(?i:(?:also\s+|very\s+|severely\s+|really\s+|deathly\s+|highly\s+|extremely\s+|super\s+"
            r"|mildly\s+|slightly\s+)?allergic\s+to\s+)(?P<object>[^.!?;]+)"
        ),
        _en_allergies,
        ("allergic",),
    ),
    Rule(
        re.compile(
            r"(?i:\bi(?:'ve|\s+have)?\s+(?:got|have)\s+(?:an?\s+)?(?:severe\s+|serious\s+|mild\s+|bad\s+|slight\s+"
            r"|life-threatening\s+)?)(?P<object>[a-z]+(?:\s+[a-z]+)?)(?i:\s+allerg(?:y|ies)\b)"
        ),
        _en_allergies,
        ("allerg",),
    ),
    Rule(
        re.compile(
            _WE_ARE + r"(?i:(?:a\s+|now\s+|also\s+|strictly\s+|fully\s+|completely\s+)*)"
            r"(?P<diet>(?i:" + _DIETS_EN + r"))\b"
            r"(?!\s+(?i:option|meal|dish|restaurant|food|recipe|place|menu|friend|chef|cook|blogger)s?\b)"
        ),
        _en_diet,
        ("vegetarian", "vegan", "pesc", "keto", "free", "halal", "kosher", "paleo", "plant"),
    ),
    Rule(
        re.compile(
            r"(?i:\bi(?:\s+have|'ve)?\s+(?:went|gone|became|become|turned|been)\s+(?:fully\s+)?)"
            r"(?P<diet>(?i:" + _DIETS_EN + r"))\b"
        ),
        _en_diet,
        ("vegetarian", "vegan", "pesc", "keto", "free", "halal", "kosher", "paleo", "plant"),
    ),
    Rule(
        re.compile(
            r"(?i:\bi\s+(?:eat|follow|keep)\s+(?:a\s+)?(?:strict\s+|strictly\s+)?|" + _I_AM + r"on\s+an?\s+"
            r"(?:strict\s+)?)(?P<diet>(?i:" + _DIETS_EN + r"))\b"
        ),
        _en_diet,
        ("vegetarian", "vegan", "pesc", "keto", "free", "halal", "kosher", "paleo", "plant"),
    ),
    Rule(
        re.compile(r"(?i:\bi\s+(?:also\s+|can\s+|do\s+)?speak\s+)(?P<object>[^.!?;]+)"),
        _en_languages("speaks"),
        ("speak",),
    ),
    Rule(
        re.compile(
            _I_AM + r"(?i:(?:also\s+)?(?:fluent|bilingual|conversational)\s+in\s+)(?P<object>[^.!?;]+)"
        ),
        _en_languages("speaks"),
        ("fluent", "bilingual", "conversational"),
    ),
    Rule(
        re.compile(r"(?i:\bmy\s+(?:native|first|mother)\s+(?:language|tongue)\s+is\s+)(?P<object>[^.!?;]+)"),
        _en_languages("native"),
        ("language", "tongue"),
    ),
    Rule(
        re.compile(_I_AM + r"(?i:(?:a\s+)?native\s+)(?P<object>\w+)(?i:\s+speaker)"),
        _en_languages("native"),
        ("native",),
    ),
    Rule(
        re.compile(
            r"(?i:\bi(?:'m|\s+am|'ve\s+been|\s+have\s+been)\s+(?:currently\s+|also\s+|now\s+)?(?:learning|studying)\s+)"
            r"(?P<object>[^.!?;]+)"
        ),
        _en_languages("learning"),
        ("learning", "studying"),
    ),
]

EN_NEGATIONS: list[Rule] = [
    Rule(
        re.compile(r"(?i:\b(?:i|we)\s+(?:no\s+longer|don't|do\s+not|dont)\s+live\s+in\s+)(" + _PLACE + ")"),
        _en_place("city"),
        ("live",),
    ),
    Rule(
        re.compile(_WE_ARE + r"(?i:(?:no\s+longer|not)\s+(?:living|based)\s+in\s+)(" + _PLACE + ")"),
        _en_place("city"),
        ("living", "based"),
    ),
    Rule(
        re.compile(
            r"(?i:\b(?:i|we)(?:'ve|\s+have)?\s+(?:just\s+|recently\s+|finally\s+)?moved\s+(?:away\s+from|out\s+of"
            r"|from)\s+)(" + _PLACE + ")"
        ),
        _en_place("city"),
        ("moved",),
    ),
    Rule(
        re.compile(r"(?i:\bi\s+(?:no\s+longer|don't|do\s+not|dont)\s+work\s+(?:at|for)\s+)(" + _ORG + ")"),
        _negated_employer,
        ("work",),
    ),
    Rule(
        re.compile(
            r"(?i:\bi\s+(?:just\s+|recently\s+|finally\s+)?(?:left|quit)\s+(?:my\s+job\s+at\s+)?)("
            + _ORG
            + ")"
        ),
        _negated_employer,
        ("left", "quit"),
    ),
    Rule(
        re.compile(_I_AM + r"(?i:(?:not|no\s+longer)\s+(?:a\s+)?)(?P<diet>(?i:" + _DIETS_EN + r"))\b"),
        _en_diet,
        ("vegetarian", "vegan", "pesc", "keto", "free", "halal", "kosher", "paleo", "plant"),
    ),
    Rule(
        re.compile(
            r"(?i:\bi\s+(?:stopped|quit|gave\s+up)\s+being\s+(?:a\s+)?)(?P<diet>(?i:" + _DIETS_EN + r"))\b"
        ),
        _en_diet,
        ("being",),
    ),
    Rule(
        re.compile(
            _I_AM
            + r"(?i:(?:not|no\s+longer)\s+(?:really\s+|actually\s+)?allergic\s+to\s+)(?P<object>[^.!?;]+)"
        ),
        _en_allergies,
        ("allergic",),
    ),
    Rule(
        re.compile(
            r"(?i:\bi\s+(?:outgrew|grew\s+out\s+of)\s+my\s+)(?P<object>[a-z]+(?:\s+[a-z]+)?)(?i:\s+allergy)"
        ),
        _en_allergies,
        ("allergy",),
    ),
    Rule(
        re.compile(r"(?i:\bi\s+(?:don't|do\s+not|can't|cannot)\s+speak\s+)(?P<object>[^.!?;]+)"),
        _en_languages("speaks"),
        ("speak",),
    ),
]

# --------------------------------------------------------------------------- Chinese

_ZH_VALUE = r"([^\s，,。.！!？?；;：:、“”\"'‘’（）()【】《》~～]{1,24})"
_ZH_DIGITS = "零〇一二两三四五六七八九十百"
_ZH_NUMBER = r"([0-9]{1,3}|[" + _ZH_DIGITS + r"]{1,4})"
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


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_ZH_NAME_STOPS = _words(
    "今年 来自 住在 目前 现在 喜欢 是 我 的 呢 啊 吧 了 哦 啦 在 就 也 和 岁 今 好了 即可 ，"
)
_ZH_PLACE_STOPS = _words(
    "了 去 来 工作 生活 上学 读书 已经 好几 快 有 的 这边 那边 附近 啦 呢 吧 啊 呀 吗 住 跟 一 两 三 四 五 六 七 八"
    " 九 十 几 半 以后 之后 这里 那里 定居 发展 打工 上班"
)
_ZH_NOT_PLACES = _words(
    "家 学校 宿舍 公司 酒店 宾馆 这 那 附近 隔壁 楼 一 个 哪 外地 本地 当地 什么 乡下 城里 市区 郊区 国外 海外 老家 同一"
)
_ZH_NOT_PLACE_ENDS = _words("楼 层 室 屋 房 间 办公室 宿舍 公司 家 店 里 边 上 下 旁")
_ZH_PREFERENCE_STOPS = _words(
    "了 呢 啊 吧 呀 啦 哦 因为 所以 但是 但 不过 而且 也 的时候 得很 得不得了 得要命 极了 死了"
)
_ZH_NOT_OBJECTS = _words("你 您 他 她 它 这 那 什么 哪 的 上 死 自己 大家 谁 怎么 着 过")
_ZH_PEOPLE = _words(
    "朋友 同事 同学 室友 邻居 老板 领导 家人 父母 孩子 宝宝 妈 爸 姐 妹 哥 弟 老婆 老公 妻子 丈夫 太太 先生 爱人"
    " 儿子 女儿 男朋友 女朋友 男友 女友 爷爷 奶奶 外公 外婆 姥姥 姥爷 他 她 你 别人"
)
_ZH_ANIMALS = _words(
    "狗 犬 猫 兔 鼠 鹦鹉 鸟 鱼 龟 柯基 金毛 哈士奇 泰迪 柴犬 布偶 英短 美短 拉布拉多 萨摩耶 边牧 比熊 博美 蛇 蜥蜴 刺猬 貂"
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
_ZH_JOB_SUFFIXES = _words(
    "师 员 生 家 工 手 长 医生 护士 会计 司机 记者 编辑 警察 经理 总监 老板 创始人 销售 主播 演员 歌手 翻译 运营 开发"
    " 博士 研究生 律师 老师 教授 厨师 作家 画家"
)
_ZH_NOT_JOBS = frozenset(
    _words("好人 坏人 新人 老人 大人 小人 男生 女生 新手 老手 高手 家长 大家 专家 人家 学生会")
)
_ZH_KIN = {
    "妈妈": "mother",
    "母亲": "mother",
    "老妈": "mother",
    "妈": "mother",
    "爸爸": "father",
    "父亲": "father",
    "老爸": "father",
    "爸": "father",
    "姐姐": "older_sister",
    "姐": "older_sister",
    "妹妹": "younger_sister",
    "妹": "younger_sister",
    "哥哥": "older_brother",
    "哥": "older_brother",
    "弟弟": "younger_brother",
    "弟": "younger_brother",
    "老婆": "wife",
    "妻子": "wife",
    "太太": "wife",
    "媳妇": "wife",
    "老公": "husband",
    "丈夫": "husband",
    "先生": "husband",
    "爱人": "spouse",
    "儿子": "son",
    "女儿": "daughter",
    "闺女": "daughter",
    "男朋友": "boyfriend",
    "男友": "boyfriend",
    "女朋友": "girlfriend",
    "女友": "girlfriend",
    "奶奶": "grandmother",
    "外婆": "grandmother",
    "姥姥": "grandmother",
    "爷爷": "grandfather",
    "外公": "grandfather",
    "姥爷": "grandfather",
}
_ZH_KIN_WORDS = "|".join(sorted(_ZH_KIN, key=len, reverse=True))
_ZH_LANGUAGE = re.compile(
    r"(?:英|日|法|德|韩|俄|西班牙|葡萄牙|意大利|阿拉伯|粤|汉|中|普通|上海|闽南|客家|四川|东北|广东|台|泰|越南|印尼"
    r"|马来|希腊|土耳其|荷兰|瑞典|挪威|丹麦|芬兰|波兰|捷克|拉丁|蒙古|藏|维吾尔|印地|乌克兰|手|外)(?:语|文|话)"
)
_ZH_ADVERBS = "(?:也|还|很|最|特别|非常|真的|超|挺|比较|更|一直|都|蛮|好)*"
_ZH_WHEN = "(?:现在|目前|如今|已经|一直|还|暂时|也|早就|早已|去年|今年|最近)?"
# A clause that begins with one of these has dropped its subject ("我叫小明，今年25岁"):
# it still speaks of whoever the clause before it spoke of.
_ZH_CONTINUES = re.compile(
    r"^(?:现在|目前|如今|今年|去年|已经|也|还|又|刚刚|刚|平时|一直|最近|同时|而且|并且)*"
    r"(?:是|在|住|搬|来自|从|会说|会讲|对|吃|喜欢|爱|讨厌|不喜欢|养|当|做|[0-9" + _ZH_DIGITS + r"]+岁)"
)
_ZH_USER_SUBJECT = re.compile(r"^我(?!们)")
_ZH_OTHER_SUBJECT = re.compile(
    r"^我(?:的|家的?)?(?:" + "|".join(_ZH_PEOPLE) + "|" + "|".join(_ZH_ANIMALS) + r"|宠物)"
    r"|^我的(?!名字|中文名|英文名|生日|工作|职业|母语)"
)


def _zh_name_value(text: str) -> str | None:
    name = trim_value(_cut_at(text, _ZH_NAME_STOPS, min_index=2))
    if re.fullmatch(r"[A-Za-z][A-Za-z'’.-]{0,30}", name):
        return name
    if not re.fullmatch(r"[\u4e00-\u9fff·]{2,4}", name) or name in ("什么", "啥名字", "名字"):
        return None
    return name


def _zh_name(match: re.Match[str]) -> Pairs:
    name = _zh_name_value(match.group(1))
    return [("name", name)] if name else []


def _zh_place(key: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        place = trim_value(_cut_at(match.group(1), _ZH_PLACE_STOPS))
        if len(place) < 2 or len(place) > 12 or place.startswith(_ZH_NOT_PLACES):
            return []
        if place[0] in _ZH_DIGITS or place[0] in "新旧另别小" or place.endswith(_ZH_NOT_PLACE_ENDS):
            return []  # 我搬到了三楼 / 新办公室: a room or a building, not a place to live
        return [(key, place)]

    return handle


def _zh_items(text: str, stops: Sequence[str] = _ZH_PREFERENCE_STOPS) -> list[str]:
    items = []
    for item in re.split(r"和|、|还有|以及|跟|与|及", _cut_at(text, stops)):
        item = trim_value(item)
        if item and len(item) <= 10 and not item.startswith(_ZH_NOT_OBJECTS):
            items.append(item)
    return items


# Liking what the chat just offered is not a preference (我喜欢第二个方案, 去海边这个想法):
# an item that names an offer, or counts one of several, ends the list.
_ZH_REACTION = re.compile(r"方案|主意|想法|建议|提议|点子|选项|推荐|安排|办法|^第")


def _zh_preference(value: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        items = _zh_items(match.group(1))
        if any(_ZH_REACTION.search(item) for item in items):
            return []
        return [(f"preference:{item.lower()}", value) for item in items]

    return handle


def _zh_favourite(match: re.Match[str]) -> Pairs:
    thing = match.group("thing") or ((match.groupdict().get("verb") or "") + "的")  # 我最爱吃的是饺子: 吃的
    value = trim_value(_cut_at(match.group("value"), _ZH_PREFERENCE_STOPS))
    if thing == "的":
        return []
    if not value or value.startswith(_ZH_NOT_OBJECTS) or thing.startswith(_ZH_NOT_OBJECTS) or len(value) > 16:
        return []
    if any(word in thing for word in ("你", "我", "他", "她")):
        return []
    return [(f"favourite:{thing}", value)]


def _zh_species(text: str) -> str | None:
    species = trim_value(re.split(r"[，,。！？叫名它她他的]", text, maxsplit=1)[0])
    if not species or len(species) > 6 or not any(animal in species for animal in _ZH_ANIMALS):
        return None
    if any(char in species for char in "有是养在了个只"):  # "我家有只柯基叫豆豆" read as 我家 + 有只柯基
        return None
    return _ZH_PET_CANONICAL.get(species, species)


def _zh_pet_name(text: str) -> str | None:
    name = trim_value(
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
# ...or in a later clause of the same sentence: 我养了一只狗，品种是柯基，名字叫多多。
_ZH_PET_NAME_LATER = re.compile(r"[，,](?:它|牠)?(?:的)?名字(?:叫做|叫|是)" + _ZH_VALUE)
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
    rest = match.string[match.start(1) + species_end :]
    name_match = _ZH_PET_NAME_AFTER.match(rest) or _ZH_PET_NAME_LATER.search(rest)
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


def _zh_family(match: re.Match[str]) -> Pairs:
    name = _zh_name_value(match.group("name"))
    return [(_ZH_KIN[match.group("kin")], name)] if name else []


def _zh_job_value(text: str) -> str | None:
    job = trim_value(text)
    if not (2 <= len(job) <= 10) or not job.endswith(_ZH_JOB_SUFFIXES) or job in _ZH_NOT_JOBS:
        return None
    if job.startswith(("一", "个", "这", "那")) or any(char in job for char in "的你我他她们"):
        return None
    return job


def _zh_job(match: re.Match[str]) -> Pairs:
    job = _zh_job_value(match.group(1))
    return [("job", job)] if job else []


def _zh_workplace(match: re.Match[str]) -> Pairs:
    place = trim_value(match.group(1))
    if not (2 <= len(place) <= 15) or place.startswith(_ZH_NOT_PLACES):
        return []
    return [("workplace", place)]


def _zh_work_as(match: re.Match[str]) -> Pairs:
    """我在腾讯当产品经理: where (when it names one) and what."""
    job = _zh_job_value(match.group(2))
    if job is None:
        return []
    return [*_zh_workplace(match), ("job", job)]


def _zh_date(key: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        value = trim_value(re.split(r"[了呢啊吧哦啦]", match.group(1), maxsplit=1)[0])
        if not value or len(value) > 12 or not re.search(r"[月号日0-9]", value):
            return []
        return [(key, value)]

    return handle


def _zh_allergies(match: re.Match[str]) -> Pairs:
    pairs = []
    for item in _zh_items(match.group("object"), ("了", "呢", "啊", "吧", "也", "都")):
        if len(item) >= 2 and not item.startswith(_ZH_PEOPLE) and not item.startswith(("不", "没", "有点")):
            pairs.append((f"allergy:{item.lower()}", "allergic"))
    return pairs


def _zh_diet(match: re.Match[str]) -> Pairs:
    return [("diet", "纯素" if re.search(r"全素|纯素", match.group(0)) else "素食")]


def _zh_languages(value: str) -> Callable[[re.Match[str]], Pairs]:
    def handle(match: re.Match[str]) -> Pairs:
        return [
            (f"language:{item}", value)
            for item in _zh_items(match.group("object"))
            if _ZH_LANGUAGE.fullmatch(item) and not item.startswith(("什么", "哪"))
        ]

    return handle


ZH_RULES: list[Rule] = [
    Rule(
        re.compile(
            r"我叫(?!了|过|车|外卖|醒|人|他|她|你|它|一|个|出租|滴滴|快递|救护|什么|啥|做)" + _ZH_VALUE
        ),
        _zh_name,
        ("我叫",),
    ),
    Rule(re.compile(r"我(?:的名字|的中文名字?|的英文名字?)(?:是|叫)" + _ZH_VALUE), _zh_name, ("名",)),
    Rule(re.compile(r"我名叫" + _ZH_VALUE), _zh_name, ("我名叫",)),
    Rule(
        re.compile(
            r"(?:^|[，,])(?:你|您|大家|朋友们|别人|他们|同事们?)?(?:都|也|可以|就|一般|平时|通常)*"
            r"叫我(?!一声|起床|去|来|过去|回家|吃饭|别|不要|做|帮)" + _ZH_VALUE
        ),
        _zh_name,
        ("叫我",),
    ),
    # where the user lives, and where from
    Rule(
        re.compile(r"我" + _ZH_WHEN + r"(?:住在|居住在|生活在|定居在)" + _ZH_VALUE),
        _zh_place("city"),
        ("住在", "生活在", "定居在"),
    ),
    Rule(
        re.compile(r"我(?:和|跟|与)[\u4e00-\u9fff]{1,4}?(?:一起)?(?:住在|生活在)" + _ZH_VALUE),
        _zh_place("city"),
        ("住在", "生活在"),
    ),
    Rule(
        re.compile(r"我" + _ZH_WHEN + r"在([^\s，,。.！!？?；;：:、]{2,12}?)(?:生活|定居|居住|住了|住着)"),
        _zh_place("city"),
        ("生活", "定居", "住"),
    ),
    Rule(
        re.compile(
            r"我(?:最近|刚刚|刚|已经|上个月|去年|今年|前不久)?搬(?:家)?(?:到了|到|去了|去)" + _ZH_VALUE
        ),
        _zh_place("city"),
        ("搬",),
    ),
    Rule(
        re.compile(r"我(?:是|也是)?来自(?!哪)" + _ZH_VALUE),
        _zh_place("hometown"),
        ("来自",),
    ),
    Rule(
        re.compile(
            r"我(?:是|也是)?从(?!哪|小|来|没|未)([^\s，,。.！!？?；;：:、]{2,8}?)来的?(?=[，,。.！!\s]|$)"
        ),
        _zh_place("hometown"),
        ("从",),
    ),
    Rule(
        re.compile(r"我(?:是)?(?:从小)?在([^\s，,。.！!？?；;：:、]{2,8}?)长大"),
        _zh_place("hometown"),
        ("长大",),
    ),
    Rule(re.compile(r"我(?:的)?老家(?:是|在)" + _ZH_VALUE), _zh_place("hometown"), ("老家",)),
    Rule(re.compile(r"我是([\u4e00-\u9fff]{2,6}?)人(?=[，,。.！!\s]|$)"), _zh_place("hometown"), ("人",)),
    Rule(re.compile(r"我出生(?:于|在)" + _ZH_VALUE), _zh_place("hometown"), ("出生",)),
    # favourites, likes and dislikes
    Rule(
        re.compile(
            r"我(?:最喜欢|最爱|最喜爱|最钟意|最偏爱)(?P<verb>[吃喝看听玩读去])?的(?P<thing>[\u4e00-\u9fff]{0,6}?)"
            r"(?:是|就是|当然是|要数|莫过于)《?(?P<value>[^\s，,。.！!？?；;：:、“”\"'‘’（）()【】《》~～]{1,24})"
        ),
        _zh_favourite,
        ("最",),
    ),
    Rule(
        re.compile(
            r"^(?P<value>[\u4e00-\u9fffA-Za-z0-9]{1,10}?)(?:就是|是)我(?:最喜欢|最爱|最喜爱)的"
            r"(?P<thing>[\u4e00-\u9fff]{1,6}?)(?=[，,。.！!\s]|$)"
        ),
        _zh_favourite,
        ("最",),
    ),
    Rule(
        re.compile(r"我" + _ZH_ADVERBS + r"(?:喜欢|爱|热爱|偏爱)(?!上|过|的|[吃喝看听玩读去]的)" + _ZH_VALUE),
        _zh_preference("likes"),
        ("喜欢", "爱"),
    ),
    Rule(
        re.compile(r"我" + _ZH_ADVERBS + r"(?:不喜欢|不爱|不太喜欢)" + _ZH_VALUE),
        _zh_preference("dislikes"),
        ("不喜欢", "不爱", "不太喜欢"),
    ),
    Rule(
        re.compile(r"我" + _ZH_ADVERBS + r"(?:讨厌|受不了)" + _ZH_VALUE),
        _zh_preference("hates"),
        ("讨厌", "受不了"),
    ),
    # pets
    Rule(
        re.compile(
            r"我(?:家)?(?:也|还|又|新|刚|刚刚|最近|去年|前几天)*(?:养了|养着|养|领养了|收养了|家里有|有)"
            r"(?:一|两|三|几|\d)?(?:只|条|头|匹)" + _ZH_VALUE
        ),
        _zh_pet_owned,
        ("只", "条", "头", "匹"),
    ),
    Rule(
        re.compile(
            r"我(?:的|家的|家|养的|家养的)((?:小)?[\u4e00-\u9fff]{1,5}?)(?:的名字)?(?:叫做|叫|名叫|名字叫|名字是)"
            + _ZH_VALUE
        ),
        _zh_pet_named,
        ("叫", "名字"),
    ),
    # family
    Rule(
        re.compile(
            r"我(?:的|家)?(?P<kin>" + _ZH_KIN_WORDS + r")(?:的名字是|的名字叫|名字叫|名字是|叫做|名叫|叫)"
            r"(?!我|你|他|她|它|了|过|车|外卖|人|醒|一|个|什么|啥)(?P<name>" + _ZH_VALUE + ")"
        ),
        _zh_family,
        ("叫", "名字"),
    ),
    Rule(
        re.compile(
            r"我有(?:一)?(?:个|位)(?P<kin>" + _ZH_KIN_WORDS + r")(?:叫做|名叫|叫)(?P<name>" + _ZH_VALUE + ")"
        ),
        _zh_family,
        ("叫",),
    ),
    # age and birthday
    Rule(
        re.compile(
            r"我(?:今年|已经|才|都|现在)?(?:刚满|刚|才|已经|满|都)?"
            + _ZH_NUMBER
            + r"(?:周)?岁(?!的时候|那年|时|之前|以前|以后|生日|的孩子|的儿子|的女儿)"
        ),
        _age,
        ("岁",),
    ),
    Rule(re.compile(r"我今年(?:刚满|才|已经|都)?" + _ZH_NUMBER + r"了"), _age, ("今年",)),
    # "我叫小明，今年25岁": the age clause drops its subject, which is still the user.
    Rule(
        re.compile(
            r"^我(?:叫|是|的名字是)[^，,。；;]{1,10}[，,]\s*(?:今年|已经|现在)?"
            + _ZH_NUMBER
            + r"(?:周)?岁(?!的时候|那年|时|之前|以前|以后)"
        ),
        _age,
        ("岁",),
    ),
    Rule(re.compile(r"我(?:的)?生日(?:是|在)" + _ZH_VALUE), _zh_date("birthday"), ("生日",)),
    Rule(re.compile(r"我(?:是)?((?:19|20)\d{2})年(?:出生|生)"), _single("birth_year"), ("年",)),
    Rule(re.compile(r"我出生(?:于|在)((?:19|20)\d{2})年"), _single("birth_year"), ("出生",)),
    # work
    Rule(
        re.compile(r"我(?:现在|目前|一直)?在([^\s，,。.！!？?；;：:、]{2,15}?)(?:工作|上班|实习|任职)"),
        _zh_workplace,
        ("工作", "上班", "实习", "任职"),
    ),
    Rule(
        re.compile(
            r"我(?:现在|目前|一直)?在([^\s，,。.！!？?；;：:、]{2,12}?)(?:当|做|担任|任)"
            r"([\u4e00-\u9fffA-Za-z]{2,10}?)(?=[，,。.！!\s]|$)"
        ),
        _zh_work_as,
        ("当", "做", "任"),
    ),
    Rule(
        re.compile(
            r"我(?:现在|目前)?(?:是一名|是一位|是一个|是个|是名|的职业是|的工作是|是做|是当|是干|是)"
            r"([\u4e00-\u9fffA-Za-z]{2,10}?)(?:的)?(?=[，,。.！!\s]|$)"
        ),
        _zh_job,
        ("是",),
    ),
    # allergies, diets, languages
    Rule(
        re.compile(
            r"我"
            + _ZH_WHEN
            + r"对(?P<object>[^\s，,。！？；不没]{1,16}?)(?:也|都|有点|有些|很|特别|非常|严重)?过敏"
        ),
        _zh_allergies,
        ("过敏",),
    ),
    Rule(re.compile(r"我(?:有)?(?P<object>[^\s，,。！？；对不没也都]{2,6}?)过敏"), _zh_allergies, ("过敏",)),
    Rule(
        re.compile(
            r"我"
            + _ZH_WHEN
            + r"(?:平时|从小|开始)?(?:吃(?:全素|纯素|素)(?![菜食饺包面饭的])|是(?:纯)?素食(?:主义)?者"
            r"|是吃(?:全|纯)?素的)"
        ),
        _zh_diet,
        ("素",),
    ),
    Rule(
        re.compile(
            r"我(?:也|还)?(?:会|能)(?:说|讲)?(?:一点点|一点|一些|点儿?|流利的|一口流利的)?(?P<object>[^\s，,。！？；]{2,20})"
        ),
        _zh_languages("speaks"),
        ("会", "能"),
    ),
    Rule(re.compile(r"我的?母语是(?P<object>[^\s，,。！？；]{2,20})"), _zh_languages("native"), ("母语",)),
    Rule(
        re.compile(
            r"我(?:正在|在|最近在|最近|现在在|还在|一直在)学(?:习)?(?P<object>[^\s，,。！？；]{2,20})"
        ),
        _zh_languages("learning"),
        ("学",),
    ),
]

ZH_NEGATIONS: list[Rule] = [
    Rule(
        re.compile(r"我" + _ZH_WHEN + r"(?:不再|不|没)(?:住在|住)" + _ZH_VALUE + r"了"),
        _zh_place("city"),
        ("住",),
    ),
    Rule(
        re.compile(
            r"我" + _ZH_WHEN + r"(?:不再|不|没)在([^\s，,。.！!？?；;：:、]{2,12}?)(?:住|生活|居住)了"
        ),
        _zh_place("city"),
        ("住", "生活"),
    ),
    Rule(re.compile(r"我" + _ZH_WHEN + r"(?:搬离了?|搬出了?)" + _ZH_VALUE), _zh_place("city"), ("搬",)),
    Rule(
        re.compile(r"我" + _ZH_WHEN + r"从([^\s，,。.！!？?；;：:、]{2,12}?)搬(?:走|出来|出去)了"),
        _zh_place("city"),
        ("搬",),
    ),
    Rule(
        re.compile(r"我" + _ZH_WHEN + r"(?:刚|刚刚|上个月)?从([^\s，,。.！!？?；;：:、]{2,15}?)离职"),
        _zh_workplace,
        ("离职",),
    ),
    Rule(
        re.compile(
            r"我" + _ZH_WHEN + r"(?:不再|不|没)在([^\s，,。.！!？?；;：:、]{2,15}?)(?:工作|上班|干)了"
        ),
        _zh_workplace,
        ("工作", "上班", "干"),
    ),
    Rule(re.compile(r"我" + _ZH_WHEN + r"(?:不再|不|没再?)吃(?:全素|纯素|素)了"), _zh_diet, ("素",)),
    Rule(re.compile(r"我" + _ZH_WHEN + r"不(?:再)?是(?:纯)?素食(?:主义)?者了"), _zh_diet, ("素",)),
    Rule(
        re.compile(r"我" + _ZH_WHEN + r"对(?P<object>[^\s，,。！？；不没]{1,16}?)(?:已经)?不(?:再)?过敏"),
        _zh_allergies,
        ("过敏",),
    ),
    Rule(
        re.compile(r"我" + _ZH_WHEN + r"不(?:再)?对(?P<object>[^\s，,。！？；]{1,16}?)过敏"),
        _zh_allergies,
        ("过敏",),
    ),
    Rule(
        re.compile(r"我不会(?:说|讲)(?P<object>[^\s，,。！？；]{2,20})"), _zh_languages("speaks"), ("不会",)
    ),
]


def _with_chinese_subjects(sentence: str) -> str:
    """`sentence` with 我 put back before clauses that dropped it while still speaking of the user.

    "我叫王磊，今年30岁，住在武汉" reads as three statements by 我; "我儿子叫乐乐，今年五岁"
    does not (the son is five), nor does a clause after 它/他/她.
    """
    clauses = re.split(r"([，,；;])", sentence)
    if len(clauses) == 1:
        return sentence
    about_user = False
    for index in range(0, len(clauses), 2):
        clause = clauses[index].lstrip()
        if _ZH_USER_SUBJECT.match(clause):
            about_user = not _ZH_OTHER_SUBJECT.match(clause)
        elif about_user and _ZH_CONTINUES.match(clause):
            clauses[index] = "我" + clause
        else:
            about_user = False
    return "".join(clauses)


# --------------------------------------------------------------------------- running the tables


def pet_name_following(sentence: str) -> str | None:
    """The pet's name when `sentence` names the pet the previous sentence introduced
    ("It's called Max.", 它叫多多。), else ``None``."""
    following = _PET_NAME_FOLLOWING.match(sentence)
    return _zh_pet_name(following.group(1) or following.group(2)) if following else None


_LATIN_LETTER = re.compile(r"[a-z]")
# RuleTable.for_language's tables, by class and language (a lost race builds one twice).
_BUILT_TABLES: dict[tuple[type, str], RuleTable] = {}


class RuleTable:
    """The rules of one or both languages, run over one sentence at a time.

    >>> RuleTable.for_language("en").find("I don't live in London anymore, I moved to Leeds.")
    [('city', 'London', True), ('city', 'Leeds', False)]
    """

    def __init__(self, rules: Sequence[Rule], negations: Sequence[Rule], *, chinese: bool) -> None:
        # Negations first, so that one and a statement found at the same place keep that order.
        self._rules = [(True, rule) for rule in negations] + [(False, rule) for rule in rules]
        self._chinese = chinese
        self._uncued = [index for index, (_, rule) in enumerate(self._rules) if not rule.cues]
        # Cues by script: an ASCII sentence need not look for Chinese cues, nor a
        # sentence without a Latin letter for English ones.
        self._latin_cues: dict[str, list[int]] = {}
        self._other_cues: dict[str, list[int]] = {}
        for index, (_, rule) in enumerate(self._rules):
            for cue in rule.cues:
                cues = self._latin_cues if cue.isascii() else self._other_cues
                cues.setdefault(cue, []).append(index)

    @classmethod
    def for_language(cls, language: str) -> RuleTable:
        """The table for ``"en"``, ``"zh"`` or ``"auto"`` (both), built once per process: a
        table never changes after it is built, and every memory opened makes an extractor."""
        table = _BUILT_TABLES.get((cls, language))
        if table is None:
            table = _BUILT_TABLES[(cls, language)] = cls._build(language)
        return table

    @classmethod
    def _build(cls, language: str) -> RuleTable:
        rules: list[Rule] = []
        negations: list[Rule] = []
        if language in ("auto", "en"):
            rules += EN_RULES
            negations += EN_NEGATIONS
        if language in ("auto", "zh"):
            rules += ZH_RULES
            negations += ZH_NEGATIONS
        return cls(rules, negations, chinese=language in ("auto", "zh"))

    def find(self, sentence: str) -> list[Said]:
        """What `sentence` states about the user, in the order stated.

        Matches after a condition, a plan, a story or someone else's words are
        skipped, as are values that are too long, span lines or carry
        instructions. A value the same sentence negates is not also stated.
        """
        if self._chinese:
            sentence = _with_chinese_subjects(sentence)
        lowered = sentence.lower()
        chosen = set(self._uncued)
        if _LATIN_LETTER.search(lowered):
            chosen.update(
                index for cue, indexes in self._latin_cues.items() if cue in lowered for index in indexes
            )
        if not lowered.isascii():
            chosen.update(
                index for cue, indexes in self._other_cues.items() if cue in lowered for index in indexes
            )
        found: list[tuple[int, Said]] = []
        # Where the first condition, plan, story or reported speech ends: a match after it
        # is not asserted. Found once, not searched for again before every match.
        unasserted = _NOT_ASSERTED.search(sentence)
        asserted_before = len(sentence) + 1 if unasserted is None else unasserted.end()
        for index in sorted(chosen):
            negated, (pattern, handle, _) = self._rules[index]
            for match in pattern.finditer(sentence):
                if match.start() >= asserted_before:
                    continue
                found.extend((match.start(), (key, value, negated)) for key, value in handle(match))
        found.sort(key=lambda item: item[0])  # stable: a negation precedes a statement at the same place
        negated_values = {(key, value.casefold()) for _, (key, value, negated) in found if negated}
        said: list[Said] = []
        for _, (key, value, negated) in found:
            if not _safe(key, value) or (key, value, negated) in said:
                continue
            if not negated and (key, value.casefold()) in negated_values:
                continue
            said.append((key, value, negated))
        return said

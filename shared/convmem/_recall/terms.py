"""Terms for keyword search: a CJK-aware tokenizer with a light English stemmer.

Latin words are lowercased, stripped of possessives and a light suffix
(``running`` -> ``run``, ``dogs`` -> ``dog``), and English stopwords are
dropped; Chinese, Japanese and Korean text has no spaces, so every CJK
character is a token and so is every pair of adjacent characters (``名字``),
except particles, pronouns and question words (``的``, ``我``, ``什么``), the
Chinese stopwords.
"""

from __future__ import annotations

import functools
import re

from .._language import CJK_RANGES

__all__ = ["CJK_PAIR", "TOKENIZER_VERSION", "query_terms", "tokenize"]

# A run of CJK characters, or a word with what follows its apostrophes ("caroline's"); the
# groups say which, and hold the run or the word before its first apostrophe.
_PIECES = re.compile(rf"([{CJK_RANGES}]+)|([^\W_{CJK_RANGES}]+)(?:'[^\W_{CJK_RANGES}]+)*")
# The pieces of ASCII text, which holds no CJK run: words only, in one group (the common case, faster).
_ASCII_WORDS = re.compile(r"([^\W_]+)(?:'[^\W_]+)*")
CJK_PAIR = re.compile(rf"[{CJK_RANGES}]{{2}}")

_STOPWORD_TEXT = """
    a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves oh ok okay yeah yes hey hi wow um uh
    really s t d ll m re ve im
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# Single characters so common in Chinese that matching them says nothing: particles,
# pronouns, question words and measure words (as "I", "what" and "a" are English stopwords).
# Pairs that hold them still count ("我的", "名字", "哪个城市" gives "城市").
_CJK_STOP_CHARS = frozenset("的了是吗呢吧啊呀哦嗯也就都还在和与及或我你您他她它们什么哪怎谁这那个有")
# Pairs that are only question words, pronouns or "now": in a question they ask, they match nothing.
_CJK_STOP_PAIRS = frozenset(
    "什么 怎么 怎样 哪个 哪里 哪儿 为什 为啥 我们 你们 他们 她们 这个 那个 一个 现在 有没 没有".split()  # noqa: SIM905 - a word list reads better as text
)

_SUFFIXES = ("ingly", "edly", "ing", "ies", "ied", "ed", "es", "ly", "s")
_SUFFIX_ENDS = frozenset(suffix[-1] for suffix in _SUFFIXES)
_KEEP_DOUBLE = frozenset("lsz")
# "-ly" makes an adverb of a word ending in one of these ("weekly", "friendly", "lovely"); after
# any other letter it is part of the word ("family", "apply", "Emily", "daily").
_LY_AFTER = frozenset("cdeghkmnrt")
# Words a suffix rule would turn into another common word: "evening" is not "even", nor
# "news" "new", nor "early" "ear".
_INVARIANT = frozenset(("news", "evening", "early"))

TOKENIZER_VERSION = 2
"""The version of the rules by which `tokenize` turns text into terms. Terms a store kept
under another version are made again from the log (`IndexCursor.tokenizer`): a query
tokenized by one version finds nothing a word's other stem was indexed under. Version 1
took "-ly" off any word ("family" gave "fami", "families" gave "family") and made "even" of
"evening" and "new" of "news"."""


def _adverb(word: str) -> bool:
    """Whether `word` ends in an adverb's "-ly" ("weekly", "carefully", "finally")."""
    return word[-3] in _LY_AFTER or (len(word) >= 7 and word.endswith(("ally", "fully")))


@functools.lru_cache(maxsize=16384)  # a conversation reuses a few thousand words
def _stem(word: str) -> str:
    """A deliberately light stemmer: one common suffix, a doubled consonant, a final "e".

    ``running``/``run``, ``baked``/``baking``/``bake``, ``parties``/``party`` and
    ``families``/``family`` meet; Porter-style stemming would merge more forms, but
    also more unrelated words, and BM25 over chat turns only needs the common
    inflections to meet.
    """
    if len(word) <= 3 or not word.isascii() or not word.isalpha() or word in _INVARIANT:
        return word
    stem = word
    for suffix in _SUFFIXES if word[-1] in _SUFFIX_ENDS else ():
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            if suffix == "ly" and not _adverb(word):
                break  # "family", "apply", "Emily"
            stem = word[: -len(suffix)]
            if suffix in ("ies", "ied"):
                stem += "y"
            elif suffix == "s" and stem.endswith(("s", "u", "i")):
                stem = word  # "class", "status", "analysis"
            elif stem[-1] == stem[-2] and stem[-1] not in _KEEP_DOUBLE and stem[-1] not in "aeiou":
                stem = stem[:-1]  # "running" -> "run"
            break
    if len(stem) > 3 and stem.endswith("e"):
        stem = stem[:-1]
    return stem


def tokenize(text: str) -> list[str]:
    """Split text into BM25 terms (see the module docstring for the rules).

    >>> tokenize("Caroline's dogs were painting!")
    ['carolin', 'dog', 'paint']
    >>> tokenize("我的狗叫多多")
    ['狗', '叫', '多', '多', '我的', '的狗', '狗叫', '叫多', '多多']
    """
    lowered = text.lower()
    if lowered.isascii():
        return [_stem(word) for word in _ASCII_WORDS.findall(lowered) if word not in _STOPWORDS]
    return _terms_of_pieces(lowered)


def _terms_of_pieces(lowered: str) -> list[str]:
    """`tokenize` of lowercased text in any script (ASCII text gives the same, faster)."""
    tokens: list[str] = []
    for run, word in _PIECES.findall(lowered):
        if run:
            tokens.extend(c for c in run if c not in _CJK_STOP_CHARS)
            pairs = (run[i : i + 2] for i in range(len(run) - 1))
            tokens.extend(pair for pair in pairs if pair not in _CJK_STOP_PAIRS)
        elif word not in _STOPWORDS:  # "caroline's" -> "caroline"
            tokens.append(_stem(word))
    return tokens


@functools.lru_cache(maxsize=256)
def query_terms(query: str) -> tuple[str, ...]:
    """`tokenize` for a query, remembered: one question is scored against two indexes of
    each session it searches (a user's sessions: dozens)."""
    return tuple(tokenize(query))

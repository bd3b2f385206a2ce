"""The end of every search of a user's history, whichever way its candidates were gathered
(the mirrors of `search`, or the tables a store keeps, `kept_history`): rank them, judge
whether they are evidence for the query at all (`gate`), and render the best (`render`)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping, MutableMapping, Sequence

from .._models import Message
from .._tokens import TokenCounter
from .config import RecallConfig
from .gate import judge
from .intent import ASKS_ABOUT_A_PERSON, asks_for_several, past_cue, points_to_past
from .joined import GROUP_SHIFT, SEQ_MASK
from .language import SECTION_HEADERS, choose_language
from .lexical import CollectionStats, tokenize
from .rank import Evidence, Ranking, rank
from .reading import asks_about_user, asks_for_suggestions, is_small_talk, personal_reading, points_at_history
from .render import CachedLine, LineKey, RecallResult, render
from .scoring import chance_share, unheard
from .terms import query_terms

__all__ = ["Shown", "conclude"]


@dataclasses.dataclass(frozen=True)
class Shown:
    """What rendering needs of the candidates, keyed ``group << 40 | seq``: groups order the
    sessions as the section shows them, the asking session's last (its items carry no
    ``session_id``). Mappings may fetch what they are asked for."""

    messages: Mapping[int, Message]
    item_seqs: Mapping[int, Sequence[int]]
    lines: Mapping[int, str]
    """``Speaker: text`` of candidates, for choosing the section's language."""
    excerpts: Mapping[int, tuple[int, int]]
    """For a long message, the span of the passage to show."""
    line_cache: MutableMapping[LineKey, CachedLine]
    sessions: Mapping[int, str]
    """Group -> session id; the greatest group is the asking session."""
    prefetch: Callable[[Sequence[int]], None] | None = None
    """Told the candidates about to be read, best first (those rendering will read, once
    they are ranked; the user's best matches, for a name a question asks about)."""


def conclude(
    evidence: Evidence,
    shown: Shown,
    query: str,
    *,
    speakers: Collection[str],
    collection: CollectionStats | None,
    problem: str | None,
    max_tokens: int,
    counter: TokenCounter,
    config: RecallConfig,
) -> RecallResult:
    """Rank the candidates of a history, judge whether they are evidence for the query at
    all, and render the best into `max_tokens` (`evidence` keyed as `Shown`)."""
    asks_about_them = asks_about_user(query)
    ranking = rank(evidence, config, several=asks_for_several(query), about_user=asks_about_them)
    named = _names_someone_known(query, collection, speakers, ranking, evidence, shown)
    about_user, self_only = personal_reading(query, speakers)
    personal = named or about_user
    first_person_only = self_only and not named
    # Pointed at the history ("What did you suggest last time?", "When did I...", someone it
    # knows by name), or about the user or the history by its first person or its tense
    # alone ("How many bikes do I own?", "When was the printing press invented?").
    pointed = named or (personal and not self_only and points_at_history(query, speakers, by_tense=False))
    words, keywords = _query_words(query)
    share, never = (
        _unheard_words(query, collection) if first_person_only and collection is not None else (0.0, ())
    )
    verdict = judge(
        ranking,
        evidence,
        config,
        personal=personal,
        first_person_only=first_person_only,
        words=words,
        keywords=keywords,
        small_talk=is_small_talk(query),
        pointed=pointed,
        about_user=asks_about_them,
        one_term=None if collection is None else chance_share(query_terms(query), collection),
        unheard=share,
        unheard_words=never,
        asks_back=points_to_past(query) or asks_for_suggestions(query),
    )
    ranked = ranking.ranked if verdict.passed else ()
    if verdict.evidence is not None:
        ranked = tuple(r for r in ranked if r.seq in verdict.evidence)
    if shown.prefetch is not None and ranked:
        shown.prefetch([seq for r in ranked for seq in shown.item_seqs[r.seq]])
    lines = shown.lines
    language = choose_language(config.language, query, (lines.get(r.seq, "") for r in ranked[:5]))
    rendered = render(
        ranked,
        item_seqs=shown.item_seqs,
        messages=shown.messages,
        vectors=evidence.vectors,
        language=language,
        max_tokens=max_tokens,
        counter=counter,
        config=config,
        line_cache=shown.line_cache,
        group_of=(lambda seq: seq >> GROUP_SHIFT) if len(shown.sessions) > 1 else None,
        excerpts=shown.excerpts,
        # A question about the history is answered by what its best items hold, often past
        # the passage it matched; a request that only mentions the user is not widened.
        widen=config.widened_excerpts if personal and not first_person_only else 0,
    )
    reason = verdict.reason
    if verdict.passed and not rendered.items:
        # The history held evidence, but none of it came back: say so, not "recalled".
        reason = (
            f"nothing recalled: the matches do not fit in {max_tokens} tokens"
            if any(shown.item_seqs[r.seq] for r in ranked)
            else "nothing recalled: the matches are in the recent window already"
        )
    asker = max(shown.sessions, default=0)
    items = tuple(
        dataclasses.replace(
            item,
            seqs=tuple(s & SEQ_MASK for s in item.seqs),
            session_id=None
            if item.seqs[0] >> GROUP_SHIFT == asker
            else shown.sessions[item.seqs[0] >> GROUP_SHIFT],
        )
        for item in rendered.items
    )
    return RecallResult(
        items,
        rendered.text,
        rendered.tokens,
        max_tokens,
        SECTION_HEADERS[language],
        ranking.best_similarity,
        ranking.considered,
        ranking.dropped + verdict.dropped + rendered.dropped,
        problem,
        reason,
    )


_WORD = re.compile(r"[^\W_]+")


# "the password", "that recipe": a thing the asker takes as known, from the history or the world.
_DEFINITE = re.compile(r"\b(?:the|that|this|those|these)\s+[^\W\d_]", re.IGNORECASE)


def _query_words(query: str) -> tuple[int | None, bool]:
    """What `judge` reads of the query's words: how many distinct informative words it has
    when it is a sentence ("What about today?": one), and whether every word of it is
    informative (keywords searched for: "ramen", "locker code"). The count is None for
    keywords and for a sentence that names a thing as known ("What is the password?"),
    whose words are searched for as they are. Numbers are not counted: in a sentence they
    are values ("What is 17 times 23?"), and any history of dates and prices holds them
    by chance."""
    terms = set(query_terms(query))
    keywords = len(_WORD.findall(query)) <= len(terms)
    words = None if keywords or _DEFINITE.search(query) else sum(1 for t in terms if not t.isdigit())
    return words, keywords


def _unheard_words(query: str, collection: CollectionStats) -> tuple[float, tuple[str, ...]]:
    """The share of the query's information in words the user's history never used
    (`scoring.unheard`), and those words as the query writes them."""
    share, terms = unheard(query_terms(query), collection)
    if not terms:
        return 0.0, ()
    words = (word for word in _WORD.findall(query) if not terms.isdisjoint(tokenize(word)))
    return share, tuple(dict.fromkeys(words))


_POSSESSIVE_NAME = re.compile(r"\b([A-Z][^\W\d_]+)['’]s\b")
_NAME_CHECKS = 64
"""How many of the user's best keyword matches are read for a name the question asks about."""


def _names_someone_known(
    query: str,
    collection: CollectionStats | None,
    speakers: Collection[str],
    ranking: Ranking,
    evidence: Evidence,
    shown: Shown,
) -> bool:
    """Whether `query` asks about someone of the user's history by name: a capitalised
    name in the possessive ("Lola's vet visit") or a person a question asks about ("Who
    is Anthony?", `past_cue`) that the history mentions.

    In a chat with an assistant (no named `speakers`), every word of the name must be in
    one of the user's `_NAME_CHECKS` best keyword matches ("Miles Davis" is not the
    user's friend Miles): an answer that mentions "Budapest" or "Ohm's law" does not make
    it someone of the user's life ("Which river flows through Budapest?"). In a chat of
    several people, any of them may have spoken of whoever the question names."""
    if collection is None:
        return False
    names = _POSSESSIVE_NAME.findall(query)
    cue = past_cue(query)
    if cue is not None and cue.reason == ASKS_ABOUT_A_PERSON:
        names.append(cue.words)
    known = []
    for name in names:
        terms = tokenize(name)
        if terms and collection.frequencies.get(terms[0], 0) > 0:
            known.append(frozenset(terms))
    if not known or speakers or evidence.from_user is None:
        return bool(known)
    # The user's best keyword matches: a message that holds the name matches a word of it.
    at = {seq: i for i, seq in enumerate(evidence.seqs)}
    users = [
        r.seq
        for r in ranking.ranked
        if evidence.from_user[at[r.seq]] and evidence.lexical_message[at[r.seq]] > 0
    ][:_NAME_CHECKS]
    if shown.prefetch is not None and users:
        shown.prefetch(users)  # one read for them all
    for seq in users:
        message = shown.messages.get(seq)  # None: deleted since it was ranked
        if message is not None:
            said = set(tokenize(message.text))
            if any(name <= said for name in known):  # every word of the name in one message
                return True
    return False

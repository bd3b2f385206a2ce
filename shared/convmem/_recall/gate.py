"""Whether a user's history holds evidence for a query at all: memory only where it helps.

Ranking orders candidates against each other, so its floors are relative:
something always comes first, even for "Translate 'good morning' into French."
This module judges the best candidates on absolute scales instead, and recall
returns nothing (and says why) when neither holds:

- by words: the share of the query's information (the idf, over the user's
  whole history, of its distinct terms) that one message holds
  (`BM25Index.coverage`): "How many bikes do I own?" is not answered by a
  message that shares only "many" with it;
- by meaning: how much more similar to the query a message is than the
  history's typical message of the same language (the query's similarity to
  the mean vector of those messages). Sentence encoders give some queries a
  high similarity to everything, and put text of another language in a
  region of its own: an English question has a higher cosine with every
  Chinese line than with unrelated English ones. Measured against its own
  language's typical similarity, a Chinese line passes only when it stands
  out among the Chinese lines.

A question about the user or their history passes on either scale. A request
that stands on its own ("What is 17 times 23?", "Explain how a hash table
works.") passes only when one message is evidence on both, when the history
can be searched both ways: alone, each scale errs the same way for such a
request. Most of its few words recur by chance in a long history (two numbers
and "times" in a list of days and prices), and an encoder puts it near every
message of the same kind ("Can you explain how...", "I'd be happy to help");
a message that continues its subject holds its words and its meaning at once.
A message that holds every one of its informative words is what the request
searches for ("corgi Duoduo", "locker code"), whatever the encoder makes of it.
One word is not a subject, though: "Hi! How are you today?" has one informative
word, and some earlier message holds it by chance ("What is 17 times 23?" too: its
numbers are values, not words of a subject); such a request passes only by meaning,
when the history can be searched that way too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .._context.window import Dropped
from .config import RecallConfig
from .rank import Evidence, Ranking
from .scoring import ChanceShare
from .units import SessionMirror

__all__ = ["DenseProfile", "Verdict", "judge"]


@dataclasses.dataclass(frozen=True)
class DenseProfile:
    """The mean message vector of a history, per language (Chinese-Japanese-Korean text or
    not): what a query's typical similarity is measured against."""

    means: dict[bool, np.ndarray]

    @classmethod
    def of(cls, mirrors: Sequence[SessionMirror]) -> DenseProfile:
        sums: dict[bool, np.ndarray] = {}
        counts: dict[bool, int] = {}
        for mirror in mirrors:
            with mirror.lock:
                for cjk, (total, count) in mirror.dense_sums().items():
                    sums[cjk] = sums[cjk] + total if cjk in sums else total.astype(np.float64)
                    counts[cjk] = counts.get(cjk, 0) + count
        return cls({cjk: sums[cjk] / counts[cjk] for cjk in sums if counts[cjk]})

    def typical(self, query: np.ndarray, cjk: Sequence[bool]) -> np.ndarray:
        """The query's similarity to the mean message of each candidate's language (0.0 for
        a language the history has no vectors of)."""
        by_language = {key: float(mean @ query) for key, mean in self.means.items()}
        return np.array([by_language.get(flag, 0.0) for flag in cjk], dtype=np.float32)


@dataclasses.dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str
    """Why the history is (or is not) evidence for the query, for ``explain()``."""
    dropped: tuple[Dropped, ...] = ()
    evidence: frozenset[int] | None = None
    """The candidates (by seq) that may be recalled, when only those that are evidence
    themselves may: a request that stands on its own. None: every ranked candidate."""


def judge(
    ranking: Ranking,
    evidence: Evidence,
    config: RecallConfig,
    *,
    personal: bool = True,
    first_person_only: bool = False,
    words: int | None = None,
    small_talk: bool = False,
    keywords: bool = False,
    pointed: bool = True,
    about_user: bool = True,
    one_term: ChanceShare | None = None,
    unheard: float = 0.0,
    unheard_words: Sequence[str] = (),
    asks_back: bool = True,
) -> Verdict:
    """Whether the ranked candidates hold evidence for the query on an absolute scale (see
    the module docstring); `RecallConfig.min_coverage` None turns the judgement off.

    `personal`: the query is about the user or their history (`reading.refers_to_history`):
    one message holding `RecallConfig.min_coverage` of its words, or `evidence_margin`
    more similar to it than the history's typical message, is evidence. When it is
    `pointed` at the history (`reading.points_at_history`: "last time", something the
    assistant said, someone the history knows by name), every ranked candidate may be
    recalled; when only its first person or its tense makes it about the user or the
    history ("How many bikes do I own?"), see `_not_pointed` (`about_user`:
    `reading.asks_about_user`; `one_term`: `scoring.chance_share`). With
    `first_person_only` (`reading.personal_reading`: it speaks of the user only in
    passing) it needs `min_coverage_self` of its words and, where the index knows who
    said what, one of the user's own messages that is evidence or an answer holding
    every informative word of it; it recalls the exchanges of
    messages that are evidence themselves and, when one of the user's is, what the user
    said, when it `asks_back` (`intent.points_to_past`: it asks about them, "Can you
    suggest some activities I can do in the evening?"; a request for help with something
    of theirs does not: "I just got a puppy, how often should it eat?", answered by the
    messages that are evidence for it). A request that stands on its own needs one
    message that holds `min_coverage_general` of its words
    and, with dense search, is also `evidence_margin_general` more similar to it than
    the typical message, or that holds every one of its informative words: most of its
    words in common, or a request of the same kind, is chance, not memory. `words`: how
    many distinct informative words the query has; a request with fewer than two is
    evidence by meaning only. `small_talk` (`reading.is_small_talk`): a greeting or a
    polite question that does not refer to the history recalls nothing. Such a request
    recalls only the candidates that are each evidence (and their exchanges), unless it
    is `keywords` (every word of it informative): then every match is what it asks for.

    `unheard`: the share of the query's information in words the user's history never
    used (`scoring.unheard`; `unheard_words`, as the query writes them). When they carry
    `min_coverage` of a request that speaks of the user only in passing, the user has not
    spoken of what those words name ("I'm thinking about learning the ukulele, is it
    hard?" against a history without "ukulele"): it recalls the messages that are evidence
    themselves and their exchanges, not every match of the user's, which shares only the
    words any request shares ("learning", "hard"). Nothing else is judged by those words:
    in a short history many common words are still unheard ("What is my corgi called?"
    where no message said "called"), and a request in passing only loses the user's
    other matches by them, never its evidence.
    """
    if not ranking.ranked:
        return Verdict(False, "nothing recalled: no earlier message matches the query's words or meaning")
    if config.min_coverage is None:
        return Verdict(True, "recalled: the evidence gate is off (min_coverage=None)")
    if small_talk and not personal:
        return _refused(
            "nothing recalled: the query is small talk (a greeting, thanks or a polite question), "
            "answered by who the user is, not by their old messages",
            len(ranking.ranked),
        )
    at = {seq: i for i, seq in enumerate(evidence.seqs)}
    rows = np.array([at[r.seq] for r in ranking.ranked], dtype=np.int64)
    covered = None if evidence.coverage is None else evidence.coverage[rows]
    lifts = None
    if ranking.best_similarity is not None and evidence.typical is not None:
        similarity = np.array([r.similarity or 0.0 for r in ranking.ranked], dtype=np.float32)
        lifts = similarity - evidence.typical[rows]
    if covered is None and lifts is None:
        # An index of the user's own may not say what a match covers: rank as before.
        return Verdict(True, "recalled: keyword matches (coverage unknown for this index)")
    if personal:
        if pointed and not first_person_only:
            return _judge_either(covered, lifts, config.min_coverage, config.evidence_margin, len(rows))
        if not first_person_only:
            return _not_pointed(
                ranking, evidence, rows, covered, lifts, config.min_coverage, config, about_user, one_term
            )
        needed = max(config.min_coverage, config.min_coverage_self)
        verdict = _judge_either(covered, lifts, needed, config.evidence_margin, len(rows))
        if not verdict.passed:
            return verdict
        # Only its first person makes it about the user ("I'm going hiking, what should I
        # pack?"): the exchanges of messages that are evidence on their own, not every long
        # answer that shares a word with it, and what the user said themselves when one
        # thing they said is evidence: then they have spoken of its subject.
        kept = _either_evidence(covered, lifts, needed, config.evidence_margin, len(rows))
        said = None if evidence.from_user is None else evidence.from_user[rows]
        own = said is not None and bool((said & kept).any())
        if said is not None and not own:
            # What it needs of the history is what the user told of it. An old answer that
            # only shares some of its words is knowledge the model has anyway; one that holds
            # every word of it answered the same request before.
            kept = kept & (covered >= _EVERY_WORD) if covered is not None else np.zeros_like(kept)
            if not kept.any():
                return _nothing(
                    "a request that speaks of the user only in passing needs something the user "
                    "said that is evidence for it, or an answer holding every one of its "
                    "informative words, and the evidence is only the assistant's",
                    len(rows),
                )
        allowed = _with_exchanges(ranking, evidence, rows, kept)
        if own and said is not None:
            if unheard >= config.min_coverage:
                reason = (
                    verdict.reason
                    + f"; only messages that are evidence and their exchanges: the user's history never "
                    f"mentions {_listed(unheard_words)}, and their other messages share only its other words"
                )
            elif not asks_back:
                # Help with something of theirs, not a question about them: the user's other
                # matches share a word of it by chance ("new" with "I just got a new puppy"),
                # and would fill its room.
                reason = (
                    verdict.reason + "; only messages that are evidence and their exchanges: the request "
                    "asks for help, not about the user, so their other matches are not wanted"
                )
            else:
                allowed |= {r.seq for r, mine in zip(ranking.ranked, said, strict=True) if mine}
                reason = verdict.reason + "; only the user's own messages and the exchanges of such messages"
        else:
            reason = (
                verdict.reason
                + "; only messages that are evidence and their exchanges, none of them the user's"
            )
        return dataclasses.replace(verdict, reason=reason, evidence=allowed)
    needed = max(config.min_coverage, config.min_coverage_general)
    margin = max(config.evidence_margin, config.evidence_margin_general)
    if words is not None and words < 2 and covered is not None:
        if lifts is None:
            return _nothing(
                f"a request that does not refer to the history has {_informative(words)}: "
                "a message holding it is chance, not evidence",
                len(rows),
            )
        covered = None  # one word in common says nothing: meaning alone decides
    verdict = _judge_both(covered, lifts, needed, margin, len(rows))
    if not verdict.passed:
        return verdict
    if keywords:
        return verdict  # keywords searched for: every match is what was asked
    kept = _each_evidence(covered, lifts, needed, margin)
    return dataclasses.replace(verdict, evidence=_with_exchanges(ranking, evidence, rows, kept))


def _not_pointed(
    ranking: Ranking,
    evidence: Evidence,
    rows: np.ndarray,
    covered: np.ndarray | None,
    lifts: np.ndarray | None,
    min_coverage: float,
    config: RecallConfig,
    about_user: bool,
    one_term: ChanceShare | None,
) -> Verdict:
    """A question about the user or their history that nothing but its first person ("How
    many bikes do I own?", "What food do I like best?") or its tense ("When was the
    printing press invented?") ties to the history: evidence as for any such question, but
    not every ranked candidate is recalled. A request misread as such a question ("I'm
    nervous about my first marathon, how should I pace myself?") would otherwise fill the
    room with every message that shares one word with it. It recalls the messages that
    hold `min_coverage_self` of its words or are `evidence_margin` more similar to it than
    the typical message, and the exchanges of those. `one_term` (`scoring.chance_share`):
    what one of its words in common may hold of it by chance; a message holding much of it
    must hold more than that: two of three words or more, of two a word not far commoner
    than the other. One common word in common is chance ("know" of "How does GPS know where
    I am?", any message about an end for "When did the Ottoman Empire end?"). When it is
    `about_user` (`reading.asks_about_user`), also its best ranked candidate (a paraphrase
    the encoder ranks first) and, when one of the user's messages is such a message, every
    ranked message of the user: they have spoken of its subject, and what they told answers
    it. Otherwise (its tense alone ties it to the history) none of those: what the user said
    does not answer a question about the world, nor does the best of weak matches."""
    verdict = _judge_either(covered, lifts, min_coverage, config.evidence_margin, len(rows))
    if not verdict.passed:
        return verdict
    needed = max(min_coverage, config.min_coverage_self)
    much = f"{needed:.0%} of its words"
    if covered is not None and one_term is not None:
        # One word in common is chance ("When did the Ottoman Empire end?" and any message
        # about an end): a message holding much of it holds two of its words, or of two, one
        # not far commoner than the other.
        covered = np.where(covered > one_term.share + _ROUNDING, covered, 0.0)
        if one_term.terms > 2:
            much += " (two or more)"
        else:
            much = f"more than {max(needed, one_term.share):.0%} of its two words"
    strong = _either_evidence(covered, lifts, needed, config.evidence_margin, len(rows))
    if not about_user:
        # Put in the past with nobody of the conversation in it, it asks about the world as
        # readily as about the history: the best of weak matches is no answer to it.
        if not strong.any():
            closer = (
                ""
                if lifts is None
                else f", or one {config.evidence_margin:.2f} more similar to it than the history's "
                "typical one"
            )
            return _nothing(
                f"a question that only its tense ties to the history needs a message holding {much}{closer}",
                len(rows),
            )
        reason = f"; only messages holding {much}, with their exchanges"
        allowed = _with_exchanges(ranking, evidence, rows, strong)
        return dataclasses.replace(verdict, reason=verdict.reason + reason, evidence=allowed)
    kept = strong.copy()
    kept[0] = True
    allowed = _with_exchanges(ranking, evidence, rows, kept)
    said = None if evidence.from_user is None else evidence.from_user[rows]
    if said is not None and bool((said & strong).any()):
        allowed |= {r.seq for r, mine in zip(ranking.ranked, said, strict=True) if mine}
        reason = (
            f"; only the best match, messages holding {much}, their exchanges and the user's own messages"
        )
    else:
        reason = f"; only the best match and messages holding {much}, with their exchanges"
    return dataclasses.replace(verdict, reason=verdict.reason + reason, evidence=allowed)


def _with_exchanges(
    ranking: Ranking, evidence: Evidence, rows: np.ndarray, kept: np.ndarray
) -> frozenset[int]:
    """The ranked candidates (by seq) that are `kept`, with their exchanges: the message
    after a message of the user (its answer), the one before any other (its request);
    both neighbours where who said a message is not known."""
    places = np.asarray(evidence.positions if evidence.positions is not None else evidence.seqs)[rows]
    episodes = np.asarray(evidence.episodes)[rows]
    users = None if evidence.from_user is None else np.asarray(evidence.from_user)[rows]
    near: set[tuple[int, int]] = set()
    for index in np.flatnonzero(kept):
        episode, place = int(episodes[index]), int(places[index])
        steps = (-1, 1) if users is None else ((1,) if users[index] else (-1,))
        near |= {(episode, place), *((episode, place + step) for step in steps)}
    return frozenset(
        r.seq for r, e, p in zip(ranking.ranked, episodes, places, strict=True) if (int(e), int(p)) in near
    )


def _listed(words: Sequence[str]) -> str:
    """Up to three words, quoted: "'ukulele'", "'sourdough' and 'bakery'"."""
    quoted = [f"'{word}'" for word in words[:3]]
    if not quoted:
        return "some of its words"
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " and " + quoted[-1]


def _informative(words: int) -> str:
    return "one informative word" if words == 1 else "no informative word"


# Coverage sums the shares of the query's terms in float32: "every word" allows its rounding,
# and so does "more than one word's share".
_EVERY_WORD = 0.999
_ROUNDING = 1e-4


def _judge_either(
    covered: np.ndarray | None, lifts: np.ndarray | None, needed: float, margin: float, candidates: int
) -> Verdict:
    """A query about the user or their history: evidence by words or by meaning."""
    coverage = None if covered is None else float(covered.max())
    lift = None if lifts is None else float(lifts.max())
    if coverage is not None and coverage >= needed:
        return Verdict(True, f"recalled: a message holds {coverage:.0%} of the query's informative words")
    if lift is not None and lift >= margin:
        return Verdict(
            True,
            f"recalled: a message is {lift:.2f} more similar to the query than the history's typical one",
        )
    said = []
    if coverage is not None:
        said.append(
            f"the best keyword match holds {_short_of(coverage, needed)} of the query's informative words "
            f"(needs {needed:.0%})"
        )
    if lift is not None:
        said.append(
            f"the closest message is {lift:.2f} more similar to the query than the history's "
            f"typical one (needs {margin:.2f})"
        )
    return _nothing(" and ".join(said), candidates)


def _either_evidence(
    covered: np.ndarray | None, lifts: np.ndarray | None, needed: float, margin: float, candidates: int
) -> np.ndarray:
    """Which candidates are each evidence for a query about the user: by words or by meaning."""
    kept = np.zeros(candidates, dtype=bool)
    if covered is not None:
        kept |= covered >= needed
    if lifts is not None:
        kept |= lifts >= margin
    return kept


def _each_evidence(
    covered: np.ndarray | None, lifts: np.ndarray | None, needed: float, margin: float
) -> np.ndarray:
    """Which candidates are each evidence for a request that stands on its own: its words
    (or every one of them) and its meaning. One message that continues the request's
    subject does not make the rest of the history's matches memory worth its tokens."""
    if covered is None:
        assert lifts is not None
        return lifts >= margin
    by_words = covered >= needed
    if lifts is None:
        return by_words
    return by_words & ((lifts >= margin) | (covered >= _EVERY_WORD))


def _judge_both(
    covered: np.ndarray | None, lifts: np.ndarray | None, needed: float, margin: float, candidates: int
) -> Verdict:
    """A request that stands on its own: one message that is evidence by words and, when
    there are vectors, by meaning too."""
    by_words = np.ones(candidates, dtype=bool) if covered is None else covered >= needed
    by_meaning = np.ones(candidates, dtype=bool) if lifts is None else lifts >= margin
    both = by_words & by_meaning
    if covered is not None and lifts is not None and not both.any() and covered.max() >= _EVERY_WORD:
        return Verdict(True, "recalled: a message holds every informative word of the query")
    if both.any():
        best = int(np.flatnonzero(both)[0])
        said = []
        if covered is not None:
            said.append(f"holds {float(covered[best]):.0%} of the query's informative words")
        if lifts is not None:
            said.append(f"is {float(lifts[best]):.2f} more similar to it than the history's typical one")
        return Verdict(True, "recalled: a message " + " and ".join(said))
    said = []
    if covered is not None:
        said.append(
            f"the best keyword match holds {_short_of(float(covered.max()), needed)} of its informative words "
            f"(needs {needed:.0%})"
        )
    if lifts is not None:
        said.append(
            f"the closest message is {float(lifts.max()):.2f} more similar to it than the history's "
            f"typical one (needs {margin:.2f})"
        )
    if covered is not None and lifts is not None and (by_words.any() or by_meaning.any()):
        said.append("no message is both, and none holds every word")
    scales = " and ".join(
        name
        for name, known in (("by its words", covered is not None), ("by its meaning", lifts is not None))
        if known
    )
    return _nothing(
        f"a request that does not refer to the history needs a message that is evidence {scales}: "
        + ", ".join(said),
        candidates,
    )


def _short_of(share: float, needed: float) -> str:
    """`share` as a percentage that reads as less than `needed`: 14.9% is not "15% (needs
    15%)"."""
    shown = f"{share:.0%}"
    return f"{share:.1%}" if share < needed and shown == f"{needed:.0%}" else shown


def _nothing(why: str, candidates: int) -> Verdict:
    return _refused("nothing recalled: the history holds no evidence for this query: " + why, candidates)


def _refused(reason: str, candidates: int) -> Verdict:
    return Verdict(False, reason, (Dropped("recall", f"{candidates} candidate messages", 0, reason),))

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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .._context.window import Dropped
from .config import RecallConfig
from .rank import Evidence, Ranking
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


def judge(ranking: Ranking, evidence: Evidence, config: RecallConfig, *, personal: bool = True) -> Verdict:
    """Whether the ranked candidates hold evidence for the query on an absolute scale (see
    the module docstring); `RecallConfig.min_coverage` None turns the judgement off.

    `personal`: the query is about the user or their history (`intent.refers_to_history`);
    a request that stands on its own ("What is 17 times 23?") needs a keyword match of
    nearly all its words (`RecallConfig.min_coverage_general`): a few words in common with
    some message are chance, not memory.
    """
    if not ranking.ranked:
        return Verdict(False, "nothing recalled: no earlier message matches the query's words or meaning")
    if config.min_coverage is None:
        return Verdict(True, "recalled: the evidence gate is off (min_coverage=None)")
    at = {seq: i for i, seq in enumerate(evidence.seqs)}
    rows = np.array([at[r.seq] for r in ranking.ranked], dtype=np.int64)
    coverage = None if evidence.coverage is None else float(evidence.coverage[rows].max())
    lift = None
    if ranking.best_similarity is not None and evidence.typical is not None:
        similarity = np.array([r.similarity or 0.0 for r in ranking.ranked], dtype=np.float32)
        lift = float((similarity - evidence.typical[rows]).max())
    if coverage is None and lift is None:
        # An index a store keeps cannot say what a match covers: rank as before.
        return Verdict(True, "recalled: keyword matches (coverage unknown for this index)")
    needed = config.min_coverage if personal else max(config.min_coverage, config.min_coverage_general)
    if coverage is not None and coverage >= needed:
        return Verdict(True, f"recalled: a message holds {coverage:.0%} of the query's informative words")
    margin = (
        config.evidence_margin if personal else max(config.evidence_margin, config.evidence_margin_general)
    )
    if lift is not None and lift >= margin:
        return Verdict(
            True,
            f"recalled: a message is {lift:.2f} more similar to the query than the history's typical one",
        )
    said = []
    if coverage is not None:
        said.append(
            f"the best keyword match holds {coverage:.0%} of the query's informative words "
            f"(needs {needed:.0%}{'' if personal else ' for a request that does not refer to the history'})"
        )
    if lift is not None:
        said.append(
            f"the closest message is {lift:.2f} more similar to the query than the history's "
            f"typical one (needs {margin:.2f})"
        )
    reason = "nothing recalled: the history holds no evidence for this query: " + " and ".join(said)
    dropped = Dropped("recall", f"{len(ranking.ranked)} candidate messages", 0, reason)
    return Verdict(False, reason, (dropped,))

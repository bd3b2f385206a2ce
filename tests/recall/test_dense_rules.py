"""How dense similarity may move recall: rules a sentence encoder's blind spots call for."""

from __future__ import annotations

import numpy as np
from stored_messages import COUNTER, store_messages

from convmem import InMemoryStore, Recall, RecallConfig
from convmem._recall.embedder import BaseEmbedder
from convmem._recall.rank import Evidence, rank

FILLER = [
    ("user", "Can you explain how compound interest works?"),
    ("assistant", "Compound interest adds the interest back to the principal each period."),
    ("user", "What is a good stretch for a stiff neck?"),
    ("assistant", "Try slow neck rolls and a chin tuck held for a few seconds."),
]


class SubjectOnly(BaseEmbedder):
    """Like a sentence encoder on two statements that differ in one word: every text about
    sneakers gets one vector, whatever it says of them."""

    _name = "subject-only-test"
    dimension = 8

    def _embed(self, texts: list[str], *, query: bool) -> np.ndarray:
        rows = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in zip(rows, texts, strict=True):
            row[0 if "sneakers" in text.lower() else 1 + sum(map(ord, text)) % 7] = 1.0
        return rows


def test_a_statement_that_differs_in_one_word_is_not_a_duplicate() -> None:
    store = InMemoryStore()
    store_messages(
        store,
        "s1",
        [
            ("user", "I keep my old sneakers in the closet."),
            ("user", "I keep my old sneakers in the closet."),
            *FILLER,
            ("user", "I keep my old sneakers in the garage now."),
        ],
    )
    recall = Recall(SubjectOnly())
    recall.catch_up("s1", store)
    found = recall.search(
        "s1", "Where do I keep my old sneakers?", store=store, max_tokens=300, counter=COUNTER
    )
    # The update is recalled beside the statement it updates...
    assert "garage" in found.text
    assert "closet" in found.text
    # ...while a repeat that adds no word still is a duplicate.
    assert found.text.count("closet") == 1
    assert any("near-duplicate" in d.reason for d in found.dropped)


def test_a_side_remark_passes_by_its_own_words_when_its_exchange_is_diluted() -> None:
    # Three user messages; the second says in passing what the question asks ("By the way,
    # I saw Dr. Smith on March 3rd") inside an exchange about something else: by meaning it
    # looks like the history's typical message, and the long answer in its exchange halves
    # the exchange's keyword match.
    seqs = [1, 2, 3]
    dense = np.array([0.45, 0.05, 0.02], dtype=np.float32)
    found = Evidence(
        seqs=seqs,
        dense_message=dense,
        dense_exchange=dense,
        lexical_message=np.array([1.0, 0.6, 0.0], dtype=np.float32),
        lexical_exchange=np.array([1.0, 0.3, 0.1], dtype=np.float32),
        said_by_named=np.zeros(3, dtype=bool),
        ages=np.zeros(3),
        episodes=seqs,
        vectors={},
    )
    config = RecallConfig(relevance_floor=0.0, feedback_weight=0.0)
    passed = [r.seq for r in rank(found, config).ranked]
    assert passed[:2] == [1, 2]
    # The blend of the two (0.45) alone would not have let it pass; nothing matched at all
    # still does not pass.
    assert 3 not in passed

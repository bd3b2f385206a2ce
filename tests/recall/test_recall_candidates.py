"""How recall picks its candidates from a session mirror: the log columns it reads them
through agree with the mirror's own maps, and the candidates are exactly the best keyword
matches among messages, plus every message of the best matching exchanges, less what the
window holds, small talk, and what the filters refuse."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from convmem import Message, RecallConfig
from convmem._recall.config import RecallFilters
from convmem._recall.search import gather
from convmem._recall.units import SessionMirror

WORDS = [
    "dog",
    "corgi",
    "tea",
    "train",
    "shanghai",
    "budget",
    "database",
    "migration",
    "lake",
    "hiking",
    "deer",
    "report",
]
SMALL_TALK = ("thanks!", "ok", "😊", "谢谢")


def mirrored_log(seed: int, size: int, config: RecallConfig) -> SessionMirror:
    """A mirror of `size` messages: random roles, words, pauses (episodes), small talk,
    and seqs with holes where a tool message or an empty one was never indexed."""
    rng = random.Random(seed)
    mirror = SessionMirror("s", embeds=False)
    messages = []
    seq, clock = 0, 1_700_000_000.0
    for _ in range(size):
        seq += rng.choice((1, 1, 1, 2))
        clock += rng.choice((5.0, 60.0, 4 * 3600.0))
        role = rng.choice(("user", "assistant", "assistant"))
        if rng.random() < 0.15:
            text = rng.choice(SMALL_TALK)
        else:
            text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
        messages.append(dataclasses.replace(Message.create(role, text, timestamp=clock), seq=seq))
    mirror.ingest(messages, config)
    return mirror


@pytest.mark.parametrize("seed", range(5))
def test_the_log_columns_agree_with_the_mirror(seed: int) -> None:
    config = RecallConfig()
    mirror = mirrored_log(seed, 300, config)
    columns = mirror.columns
    assert columns.column("seq").tolist() == mirror.order
    assert columns.column("episode").tolist() == [mirror.episode_of[s] for s in mirror.order]
    assert columns.column("exchange").tolist() == [mirror.exchange_of[s] for s in mirror.order]
    assert columns.column("timestamp").tolist() == [mirror.messages[s].timestamp for s in mirror.order]
    assert columns.column("candidate").tolist() == [s not in mirror.small_talk for s in mirror.order]
    for first, members in mirror.exchanges.items():
        positions = columns.exchange_positions(np.array([first]))
        assert positions.tolist() == [mirror.position[s] for s in members]


def test_positions_leave_out_seqs_the_mirror_does_not_hold() -> None:
    mirror = mirrored_log(1, 50, RecallConfig())
    held = mirror.order[::7]
    missing = [max(mirror.order) + 5, 0, -3]
    positions = mirror.columns.positions(np.array(sorted(held + missing), dtype=np.int64))
    assert sorted(positions.tolist()) == sorted(mirror.position[s] for s in held)


def test_a_mirror_read_again_starts_its_columns_afresh() -> None:
    config = RecallConfig()
    mirror = mirrored_log(2, 40, config)
    mirror.reset_log_view()
    assert mirror.columns.size == 0
    mirror.ingest([dataclasses.replace(Message.create("user", "corgi"), seq=1)], config)
    assert mirror.columns.column("seq").tolist() == [1]


def expected_candidates(
    mirror: SessionMirror, query: str, excluded: set[int], filters: RecallFilters | None, k: int
) -> list[int]:
    """The candidates as the rule says, computed with sets and dicts."""
    messages = mirror.lexical_scores("messages", query)
    exchanges = mirror.lexical_scores("exchanges", query)
    pool = set(messages.top(k).tolist())
    for first in exchanges.top(k).tolist():
        pool.update(mirror.exchanges[first])
    return sorted(
        s
        for s in pool
        if s not in excluded
        and s not in mirror.small_talk
        and (filters is None or filters.accepts(mirror.messages[s]))
    )


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("candidates", [3, 40, 200])
def test_candidates_are_the_best_matches_and_their_exchanges_less_the_window(
    seed: int, candidates: int
) -> None:
    config = RecallConfig(candidates=candidates)
    mirror = mirrored_log(seed, 400, config)
    rng = random.Random(seed)
    query = " ".join(rng.sample(WORDS, 3))
    excluded = set(mirror.order[-rng.randint(0, 30) :])
    filters = RecallFilters(roles=("user",)) if seed % 2 else None
    evidence, problem = gather(mirror, query, None, excluded, filters, config)
    assert problem is None
    assert list(evidence.seqs) == expected_candidates(mirror, query, excluded, filters, candidates)
    assert len(evidence.seqs) == len(set(evidence.seqs))
    newest = mirror.newest_timestamp
    assert evidence.ages.tolist() == [newest - mirror.messages[s].timestamp for s in evidence.seqs]
    assert list(evidence.episodes) == [mirror.episode_of[s] for s in evidence.seqs]
    assert evidence.positions is not None
    assert list(evidence.positions) == [mirror.position[s] for s in evidence.seqs]

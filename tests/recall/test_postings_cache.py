"""The postings of query terms a `Recall` keeps between searches of stored histories
stay within their room in bytes, however small the histories they come from."""

from __future__ import annotations

import gc
import hashlib
import tracemalloc

import numpy as np

from convmem._recall.kept_postings import PostingsCache
from convmem._recall.scoring import TermPostings

BUDGET = 2_000_000


def _postings(documents: int) -> TermPostings:
    # As a search reads them: columns of the store's answer, converted.
    raw = np.arange(documents, dtype=np.int32)
    return TermPostings(raw.astype(np.int64), raw.astype(np.float64), raw.astype(np.float64))


def _search_small_users(cache: PostingsCache, first: int, last: int) -> None:
    """What searches of users `first` to `last` keep: each user's history (a turn or two)
    holds two of the query's terms once, in messages and in exchanges."""
    for user in range(first, last):
        version = hashlib.blake2b(str(user).encode(), digest_size=16).digest()
        cache.put(
            (object(), user, version),
            {term: {0: _postings(1), 1: _postings(1)} for term in ("live", f"city{user}")},
        )


def test_the_postings_of_many_small_users_stay_within_the_bytes_kept() -> None:
    gc.collect()
    tracemalloc.start()
    try:
        cache = PostingsCache(BUDGET)
        _search_small_users(cache, 0, 4000)
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert BUDGET // 2 < held <= BUDGET


def test_the_postings_kept_level_off_once_their_room_is_full() -> None:
    cache = PostingsCache(BUDGET)
    _search_small_users(cache, 0, 2000)
    full = len(cache)
    _search_small_users(cache, 2000, 4000)
    assert len(cache) == full
    users = {key[1] for key in cache.kept()}
    assert users == set(range(min(users), 4000))  # the newest users' postings


def test_a_term_the_history_lacks_is_kept_to_spare_the_next_search_a_read() -> None:
    cache = PostingsCache(BUDGET)
    cache.put(("store", 1, b"v1"), {"zebra": {}})
    assert cache.get(("store", 1, b"v1"), ["zebra"]) == {"zebra": {}}

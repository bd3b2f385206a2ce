"""One ranking over several sessions: their candidates under one key space.

A candidate of a search over a user's history is ``group << GROUP_SHIFT | seq``:
seqs stay below 2**40, and groups order the sessions as the section shows them
(the asking session last). `join_evidence` puts each session's `Evidence` under
those keys, and `GroupedLines` shows each session's rendered-line cache under them,
so a line rendered by one search is not rendered again by the next.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence

import numpy as np

from .rank import Evidence
from .render import CachedLine, LineKey

__all__ = ["GROUP_SHIFT", "SEQ_MASK", "GroupedLines", "join_evidence"]

GROUP_SHIFT = 40
SEQ_MASK = (1 << GROUP_SHIFT) - 1


def join_evidence(parts: Sequence[tuple[Evidence, float]], groups: Sequence[int]) -> Evidence:
    """The evidence of each session searched (with its newest timestamp) as one, keyed by
    ``group << 40 | seq``; ages are measured from the newest message of all of them."""
    if len(parts) == 1 and groups[0] == 0:
        return parts[0][0]
    newest = max(part_newest for _, part_newest in parts)
    dense = any(ev.dense_message is not None for ev, _ in parts)
    typical = any(ev.typical is not None for ev, _ in parts)
    coverage = any(ev.coverage is not None for ev, _ in parts)
    seqs: list[int] = []
    vectors: dict[int, np.ndarray] = {}
    part_of: dict[int, int] = {}
    arrays: dict[str, list[np.ndarray]] = {
        name: []
        for name in ("dm", "dx", "lm", "lx", "named", "ages", "episodes", "positions", "cov", "user", "typ")
    }
    for (ev, part_newest), group in zip(parts, groups, strict=True):
        base = group << GROUP_SHIFT
        n = len(ev.seqs)
        seqs.extend(base | s for s in ev.seqs)
        vectors.update((base | s, v) for s, v in ev.vectors.items())
        part_of.update((base | s, p) for s, p in ev.parts.items())
        zeros = np.zeros(n, dtype=np.float32)
        arrays["dm"].append(ev.dense_message if ev.dense_message is not None else zeros)
        arrays["dx"].append(ev.dense_exchange if ev.dense_exchange is not None else zeros)
        arrays["lm"].append(ev.lexical_message)
        arrays["lx"].append(ev.lexical_exchange)
        arrays["named"].append(np.asarray(ev.said_by_named, dtype=bool))
        arrays["ages"].append(np.asarray(ev.ages, dtype=np.float64) + (newest - part_newest))
        arrays["episodes"].append(np.asarray(ev.episodes, dtype=np.int64) | base)
        arrays["positions"].append(
            np.asarray(ev.seqs if ev.positions is None else ev.positions, dtype=np.int64)
        )
        arrays["cov"].append(ev.coverage if ev.coverage is not None else zeros)
        arrays["user"].append(ev.from_user if ev.from_user is not None else np.zeros(n, dtype=bool))
        arrays["typ"].append(ev.typical if ev.typical is not None else zeros)

    def joined(name: str, dtype: type) -> np.ndarray:
        return np.concatenate(arrays[name]).astype(dtype) if seqs else np.zeros(0, dtype=dtype)

    return Evidence(
        seqs=seqs,
        dense_message=joined("dm", np.float32) if dense else None,
        dense_exchange=joined("dx", np.float32) if dense else None,
        lexical_message=joined("lm", np.float32),
        lexical_exchange=joined("lx", np.float32),
        said_by_named=joined("named", bool),
        ages=joined("ages", np.float64),
        episodes=joined("episodes", np.int64).tolist(),
        vectors=vectors,
        positions=joined("positions", np.int64).tolist(),
        coverage=joined("cov", np.float32) if coverage else None,
        from_user=joined("user", bool),
        typical=joined("typ", np.float32) if typical else None,
        parts=part_of,
    )


class GroupedLines(MutableMapping[LineKey, CachedLine]):
    """The mirrors' rendered lines (``render``'s ``line_cache``) under candidate keys
    ``group << 40 | seq``: a line rendered by one search is not rendered by the next."""

    def __init__(self, caches: Mapping[int, MutableMapping[LineKey, CachedLine]]) -> None:
        self._caches = caches

    def _split(self, key: LineKey) -> tuple[MutableMapping[LineKey, CachedLine], LineKey]:
        name, language, candidate = key
        return self._caches[candidate >> GROUP_SHIFT], (name, language, candidate & SEQ_MASK)

    def __getitem__(self, key: LineKey) -> CachedLine:
        cache, own = self._split(key)
        return cache[own]

    def __setitem__(self, key: LineKey, value: CachedLine) -> None:
        cache, own = self._split(key)
        cache[own] = value

    def __delitem__(self, key: LineKey) -> None:
        cache, own = self._split(key)
        del cache[own]

    def __iter__(self) -> Iterator[LineKey]:
        for group, cache in self._caches.items():
            for name, language, seq in list(cache):
                yield name, language, group << GROUP_SHIFT | seq

    def __len__(self) -> int:
        return sum(len(cache) for cache in self._caches.values())

"""Memory of one `Recall` shared by many sessions: bounded (`max_sessions`) against unbounded.

    python benchmarks/bench_recall_sessions.py [--sessions 10000] [--messages 4] [--dimension 384]
                                               [--max-sessions 1024]

A server shares one `Recall` between the memories of every conversation it
serves. Each run appends ``--messages`` messages to each of ``--sessions``
sessions of one `InMemoryStore` and brings recall up to date for each
(``catch_up``: mirror, lexical index, vectors), in a fresh process, and
prints the growth of the process's resident memory and the number of session
mirrors alive, every 2000 sessions. Two runs: ``max_sessions=--max-sessions``
(the LRU bound) and ``max_sessions=--sessions`` (every mirror kept: how a
shared `Recall` behaved before the bound). The embedder is `HashingEmbedder`
(no model), so the figures are recall's own bookkeeping plus the vectors.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing
import os

from convmem import HashingEmbedder, InMemoryStore, Message, Recall
from convmem._recall.units import SessionMirror

_WORDS = [
    "garden",
    "weather",
    "cello",
    "sourdough",
    "penguins",
    "Lisbon",
    "train",
    "tulips",
    "corgi",
    "teal",
    "kitchen",
    "parcel",
]


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _mirrors() -> int:
    gc.collect()
    return sum(type(o) is SessionMirror for o in gc.get_objects())


def _run(sessions: int, messages: int, dimension: int, max_sessions: int, report: list[str]) -> None:
    store = InMemoryStore()
    recall = Recall(HashingEmbedder(dimension), max_sessions=max_sessions)
    # The store's own logs are not recall's: measure them in a first pass, then recall alone.
    texts = [
        [" ".join(_WORDS[(s + m + k) % len(_WORDS)] for k in range(20)) for m in range(messages)]
        for s in range(sessions)
    ]
    for s in range(sessions):
        store.append(f"session-{s}", [Message.create("user", text) for text in texts[s]])
    gc.collect()
    start = _rss_mb()
    for s in range(sessions):
        recall.catch_up(f"session-{s}", store)
        if (s + 1) % 2000 == 0 or s + 1 == sessions:
            report.append(
                f"  max_sessions={max_sessions:>6}  sessions touched {s + 1:>6}  "
                f"RSS +{_rss_mb() - start:7.1f} MB  mirrors alive {_mirrors():>6}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=4)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--max-sessions", type=int, default=1024)
    args = parser.parse_args()
    print(
        f"{args.sessions} sessions x {args.messages} messages, HashingEmbedder({args.dimension}), "
        "one shared Recall, each run in a fresh process"
    )
    context = multiprocessing.get_context("spawn")
    for bound in (args.max_sessions, args.sessions):
        with context.Manager() as manager:
            report = manager.list()
            child = context.Process(
                target=_run, args=(args.sessions, args.messages, args.dimension, bound, report)
            )
            child.start()
            child.join()
            print("\n".join(report))


if __name__ == "__main__":
    main()

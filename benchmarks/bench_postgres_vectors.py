"""Recall vectors in PostgreSQL: a new server's first search, loading stored vectors vs embedding again.

    python benchmarks/bench_postgres_vectors.py [--messages 10000] [--dimension 384]
                                                [--searches 200] [--turns 100] [--embed-ms 0]

One session of ``--messages`` messages (the synthetic mixed Chinese/English
history) is appended to PostgreSQL and indexed by a first server whose `Recall`
keeps its vectors in the store (``index_factory=store.vector_index_factory(...)``).
Then, for a new server (a fresh store object and a fresh `Recall`):

- **stored vectors**: the factory loads the session's vectors from the table;
- **embed again**: vectors in this process only (`FaissIndex`), so the whole
  log is embedded on first sight,

each timed from nothing to the first search's answer (the log is read either
way), with the number of texts each embedded. Then ``--searches`` more searches
on each warm server (p50/p99): the stored-vectors index asks the table for a
change marker before each one. Last, ``--turns`` live turns on each: append one
message, `Recall.add` it (embedded, and written to the table for the first),
search (p50 of the add and of the search).

The embedder is `HashingEmbedder` (``--dimension``), which embeds tens of
thousands of texts a second; ``--embed-ms`` adds that many milliseconds per
batch of 64 texts to stand in for a real model (a small sentence-transformer on
a CPU takes some 50-200 ms per batch), which only the "embed again" server pays.

Server: ``$CONVMEM_POSTGRES_URL`` if set, else a private one (``fsync=off``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _history import history
from postgres_server import PostgresServer, drop_schema, new_schema

from convmem import HashingEmbedder, Message, PostgresStore, Recall, TiktokenCounter

SESSION = "long-session"
QUERIES = ["what is my dog called?", "数据库迁移方案", "train to Shanghai", "budget for the report"]


class TimedEmbedder(HashingEmbedder):
    """`HashingEmbedder` that counts document texts and may sleep per batch of 64."""

    def __init__(self, dimension: int, embed_ms: float) -> None:
        super().__init__(dimension)
        self.embed_ms = embed_ms
        self.documents = 0

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.documents += len(texts)
        if self.embed_ms:
            time.sleep(self.embed_ms / 1000 * -(-len(texts) // 64))
        return super().embed_documents(texts)


def first_search(store: PostgresStore, recall: Recall, counter: TiktokenCounter) -> float:
    started = time.perf_counter()
    recall.search(SESSION, QUERIES[0], store=store, max_tokens=500, counter=counter)
    return time.perf_counter() - started


def warm_searches(store: PostgresStore, recall: Recall, counter: TiktokenCounter, count: int) -> list[float]:
    samples = []
    for i in range(count):
        started = time.perf_counter()
        recall.search(SESSION, QUERIES[i % len(QUERIES)], store=store, max_tokens=500, counter=counter)
        samples.append(time.perf_counter() - started)
    return samples


def live_turns(
    store: PostgresStore, recall: Recall, counter: TiktokenCounter, count: int
) -> tuple[list[float], list[float]]:
    adds, searches = [], []
    for i, (role, text) in enumerate(history(count, seed=11)):
        stored = store.append(SESSION, [Message.create(role, text)])
        started = time.perf_counter()
        recall.add(SESSION, stored, store=store)
        adds.append(time.perf_counter() - started)
        started = time.perf_counter()
        recall.search(SESSION, QUERIES[i % len(QUERIES)], store=store, max_tokens=500, counter=counter)
        searches.append(time.perf_counter() - started)
    return adds, searches


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--dimension", type=int, default=384)
    parser.add_argument("--searches", type=int, default=200)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--embed-ms", type=float, default=0.0, help="extra ms per batch of 64 texts")
    args = parser.parse_args()

    server = None
    url = os.environ.get("CONVMEM_POSTGRES_URL")
    note = "from $CONVMEM_POSTGRES_URL"
    if not url:
        server = PostgresServer().start()
        url, note = server.url, "private PostgreSQL, fsync=off"
    schema = new_schema()
    counter = TiktokenCounter()
    try:
        writer = PostgresStore(url, schema=schema)
        messages = [Message.create(role, text) for role, text in history(args.messages)]
        for start in range(0, len(messages), 1000):
            writer.append(SESSION, messages[start : start + 1000])
        embedder = TimedEmbedder(args.dimension, 0.0)
        recall = Recall(embedder, index_factory=writer.vector_index_factory(embedder))
        started = time.perf_counter()
        recall.catch_up(SESSION, writer)
        indexed = time.perf_counter() - started
        units = recall.stats(SESSION, store=writer)["vectors"]
        writer.close()

        print(
            f"PostgreSQL: {note}; {args.messages} messages, {units} recall units, dimension {args.dimension}"
        )
        print(
            f"first server: embed and store every unit: {ms(indexed)} ({embedder.documents} texts embedded)"
        )

        results = {}
        turns = {}
        servers = {}
        for label in ("stored vectors", "embed again"):
            store = PostgresStore(url, schema=schema)
            embedder = TimedEmbedder(args.dimension, args.embed_ms)
            factory = store.vector_index_factory(embedder) if label == "stored vectors" else None
            recall = Recall(embedder, index_factory=factory)
            first = first_search(store, recall, counter)
            warm = warm_searches(store, recall, counter, args.searches)
            results[label] = (first, embedder.documents, warm)
            servers[label] = (store, recall)
        # After both first searches, so that both read the same log.
        for label, (store, recall) in servers.items():
            turns[label] = live_turns(store, recall, counter, args.turns)
            store.close()
        print(f"new server, time to first search (embed {args.embed_ms:g} ms extra per 64 texts):")
        for label, (first, documents, warm) in results.items():
            p50 = statistics.median(warm)
            p99 = sorted(warm)[max(0, int(len(warm) * 0.99) - 1)]
            print(
                f"  {label:15} first search {ms(first):>10}  texts embedded {documents:>6}  "
                f"then search p50 {ms(p50)} p99 {ms(p99)}"
            )
        print(f"live turns ({args.turns}: append one message, add it, search):")
        for label, (adds, searches) in turns.items():
            print(
                f"  {label:15} add p50 {ms(statistics.median(adds))}  "
                f"search p50 {ms(statistics.median(searches))}"
            )
    finally:
        drop_schema(url, schema)
        if server is not None:
            server.remove()


if __name__ == "__main__":
    main()

"""Ingest with an embedder: what storing a history costs beside one batched ``encode()``.

A LoCoMo conversation (``../shared/data/locomo-dev.json``: one session, speaker as
the message name) and a LongMemEval history (``longmemeval-s-dev.json.gz``: ~50
sessions of one user) go into an `InMemoryStore` through `ConversationMemory`
with defaults and ``embedder=SentenceTransformerEmbedder()`` (MiniLM), three ways:

- ``add``: one ``add`` per message, recall's embedding inline;
- ``background``: ``MemoryConfig(background=True)``, one ``add`` per message, then ``flush()``;
- ``bulk``: one ``add_messages`` call per session (a history import).

Beside them, in the same run and on the same model: one ``encode()`` of the texts
recall keeps a vector of (messages and multi-message exchanges, as the bulk
import left them) and one ``encode()`` of the message lines alone; and each way
again without a model (what the rest of ingest costs). Each row says how many
embedder calls were made and how many texts they embedded.

With ``--no-model`` it measures ingest without a model instead, on the stores of
``--stores`` (SQLite by default; PostgreSQL and Redis given CONVMEM_POSTGRES_URL /
CONVMEM_REDIS_URL): the first ``--histories`` LongMemEval histories, each stored
one ``add`` per message and one ``add_messages`` per session (``flush()`` after
each session, as `bench_returning_user.py` does), against a pure-Python BM25's
indexing of the same turns in the same run. The tokenizer's one-off load is
made before timing and reported apart. With ``--one-user`` as well, the histories
go in one after another as sessions of a single user (``add`` and
``add_messages``, in one store per way): ms per turn of each history as that
user's history grows, beside BM25's indexing of its turns.

Timings on a shared 2-core machine move with its load: compare the ratios of
one run, not figures of different runs.

Usage::

    python benchmarks/bench_ingest.py                  # the first LoCoMo conversation and LongMemEval history
    python benchmarks/bench_ingest.py --ways background,bulk --repeat 3   # best of three
    python benchmarks/bench_ingest.py --no-model --histories 4 --stores sqlite,postgres,redis
    python benchmarks/bench_ingest.py --no-model --one-user --histories 8
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import _longmemeval
import locomo_recall

from convmem import ConversationMemory, InMemoryStore, MemoryConfig, SentenceTransformerEmbedder
from convmem._recall.embedder import BaseEmbedder

WAYS = ("add", "background", "bulk")


@dataclasses.dataclass(frozen=True)
class Row:
    """One message to ingest."""

    session: str
    role: str
    text: str
    name: str | None
    timestamp: float


class CountingEmbedder(BaseEmbedder):
    """The model, counting calls and keeping every text it was given."""

    def __init__(self, model: SentenceTransformerEmbedder) -> None:
        super().__init__(name=model.name, dimension=model.dimension)
        self.model = model
        self.calls = 0
        self.texts: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        self.texts.extend(texts)
        return self.model.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.model.embed_query(text)


def locomo_rows(index: int) -> list[Row]:
    conversation = locomo_recall.load_conversations(locomo_recall.default_data_path())[index]
    return [
        Row(
            conversation.sample_id,
            "user" if turn.speaker == conversation.speaker_a else "assistant",
            turn.text,
            turn.speaker,
            turn.timestamp,
        )
        for turn in conversation.turns
    ]


def longmemeval_rows(index: int) -> list[Row]:
    question = _longmemeval.load_questions(_longmemeval.default_data_path())[index]
    return [
        Row(session.session_id, turn.role, turn.text, None, _longmemeval.turn_timestamp(session, i))
        for session in question.sessions
        for i, turn in enumerate(session.turns)
    ]


def ingest(rows: Sequence[Row], way: str, embedder: BaseEmbedder | None) -> tuple[float, float]:
    """Store `rows` one of the `WAYS`; returns the milliseconds it took, wall clock and CPU."""
    config = MemoryConfig(background=way == "background")
    store = InMemoryStore()
    sessions: dict[str, list[Row]] = {}
    for row in rows:
        sessions.setdefault(row.session, []).append(row)
    started, cpu = time.perf_counter(), time.process_time()
    for session_id, session_rows in sessions.items():
        memory = ConversationMemory(session_id, store, config, user_id="user", embedder=embedder)
        if way == "bulk":
            memory.add_messages(
                [
                    {"role": r.role, "content": r.text, "name": r.name, "timestamp": r.timestamp}
                    for r in session_rows
                ]
            )
        else:
            for r in session_rows:
                memory.add(r.role, r.text, name=r.name, timestamp=r.timestamp)
        memory.flush()
        memory.close()
    return (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000


def encode_ms(model: Any, texts: Sequence[str]) -> tuple[float, float]:
    """One ``encode()`` of `texts`, in milliseconds: wall clock and CPU."""
    started, cpu = time.perf_counter(), time.process_time()
    model.encode(list(texts), batch_size=64, convert_to_numpy=True, normalize_embeddings=True)
    return (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000


def measure(
    label: str, rows: Sequence[Row], model: SentenceTransformerEmbedder, ways: Sequence[str], repeat: int
) -> None:
    """Each way and each encode() `repeat` times, interleaved; the best of each is printed
    (the least disturbed by other work on the machine), wall clock and CPU time apart:
    on a busy machine CPU time moves less."""
    turns = len(rows)
    best: dict[str, tuple[float, float]] = {}
    counts: dict[str, tuple[int, int]] = {}
    unit_texts: list[str] = []
    encoder = model._load()
    lines = [f"{r.name}: {r.text.strip()}" if r.name else r.text.strip() for r in rows if r.text.strip()]

    def keep(key: str, ms: tuple[float, float]) -> None:
        old = best.get(key, ms)
        best[key] = (min(ms[0], old[0]), min(ms[1], old[1]))

    for _ in range(repeat):
        for way in ways:
            counting = CountingEmbedder(model)
            keep(way, ingest(rows, way, counting))
            counts[way] = (counting.calls, len(counting.texts))
            if way == "bulk" or not unit_texts:
                unit_texts = sorted(set(counting.texts))
            keep(f"{way} no model", ingest(rows, way, None))
        keep("units", encode_ms(encoder, unit_texts))
        keep("messages", encode_ms(encoder, lines))
    units, messages = best["units"], best["messages"]
    print(
        f"\n{label}: {turns} turns in {len({r.session for r in rows})} session(s); MiniLM, best of {repeat}"
    )
    print(
        f"  one encode() of recall's units ({len(unit_texts)} texts: messages and exchanges): "
        f"{units[0] / turns:.2f} ms/turn ({units[1] / turns:.2f} CPU); of the {len(lines)} messages "
        f"alone: {messages[0] / turns:.2f} ms/turn ({messages[1] / turns:.2f} CPU)"
    )
    print(
        f"  {'way':<11} {'ms/turn':>8} {'CPU':>7} {'no model':>9} {'calls':>6} {'texts':>6}"
        f"  {'x units encode (CPU)':>21}  {'x messages encode (CPU)':>24}"
    )
    for way in ways:
        wall, cpu = best[way]
        calls, texts = counts[way]
        x_units = f"{wall / units[0]:.2f}x ({cpu / units[1]:.2f}x)"
        x_messages = f"{wall / messages[0]:.2f}x ({cpu / messages[1]:.2f}x)"
        print(
            f"  {way:<11} {wall / turns:>8.2f} {cpu / turns:>7.2f} {best[f'{way} no model'][0] / turns:>9.2f}"
            f" {calls:>6} {texts:>6}  {x_units:>21}  {x_messages:>24}"
        )


def ingest_history(
    question: Any, spec: dict[str, str], way: str, user_id: str | None = None, prefix: str = ""
) -> tuple[float, float]:
    """Store one LongMemEval history `way` (``add`` or ``bulk``) with no model; ms per turn,
    wall clock and CPU. Its sessions are `user_id`'s (the question's by default), their ids
    prefixed by `prefix`."""
    from bench_returning_user import open_store

    store = open_store(spec)
    started, cpu = time.perf_counter(), time.process_time()
    for session in question.sessions:
        memory = ConversationMemory(
            prefix + session.session_id, store, user_id=user_id or question.question_id
        )
        if way == "bulk":
            memory.add_messages(
                [
                    {
                        "role": turn.role,
                        "content": turn.text,
                        "timestamp": _longmemeval.turn_timestamp(session, i),
                    }
                    for i, turn in enumerate(session.turns)
                ]
            )
        else:
            for i, turn in enumerate(session.turns):
                memory.add(turn.role, turn.text, timestamp=_longmemeval.turn_timestamp(session, i))
        memory.flush()
        memory.close()
    elapsed, cpu = (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000
    store.close()
    return elapsed / question.turn_count, cpu / question.turn_count


def histories_after_the_tokenizer(histories: int) -> list[Any]:
    """The first `histories` LongMemEval histories, once the tokenizer's one-off load (printed,
    left out of the figures) is paid."""
    from convmem._tokens import default_counter

    started = time.perf_counter()
    default_counter().count_text("load the tokenizer")
    print(f"tokenizer's one-off load (not in the figures): {(time.perf_counter() - started) * 1000:.0f} ms")
    return _longmemeval.pick(_longmemeval.load_questions(_longmemeval.default_data_path()), histories)


def measure_without_model(histories: int, kinds: Sequence[str]) -> None:
    """Ingest with no model, per turn, each way and store beside BM25's indexing (see the docstring)."""
    import tempfile
    from pathlib import Path

    from bench_returning_user import drop, store_spec

    questions = histories_after_the_tokenizer(histories)
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    bm25: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="ingest-") as tmp:
        for question in questions:
            texts = [t.text for s in question.sessions for t in s.turns]
            t, cpu = time.perf_counter(), time.process_time()
            _longmemeval.PlainBM25(texts)
            bm25.append(
                (
                    (time.perf_counter() - t) * 1000 / question.turn_count,
                    (time.process_time() - cpu) * 1000 / question.turn_count,
                )
            )
            for kind in kinds:
                for way in ("add", "bulk"):
                    spec = store_spec(kind, Path(tmp), f"{question.question_id}-{way}")
                    try:
                        rows.setdefault((kind, way), []).append(ingest_history(question, spec, way))
                    finally:
                        drop(spec)
            print(f"  {question.question_id}: {question.turn_count} turns", flush=True)

    def mean(values: list[tuple[float, float]]) -> tuple[float, float]:
        return sum(v[0] for v in values) / len(values), sum(v[1] for v in values) / len(values)

    wall, cpu = mean(bm25)
    turns = sum(q.turn_count for q in questions) / len(questions)
    print(f"\ningest with no model, {len(questions)} LongMemEval histories of {turns:.0f} turns on average")
    print(f"{'store':<10} {'way':<30} {'ms/turn':>8} {'x BM25':>7} {'CPU ms/turn':>12} {'x BM25':>7}")
    print(f"{'':<10} {'BM25 indexing (pure Python)':<30} {wall:>8.3f} {1:>6.1f}x {cpu:>12.3f} {1:>6.1f}x")
    labels = {"add": "add() per message", "bulk": "add_messages() per session"}
    for (kind, way), values in rows.items():
        ours, ours_cpu = mean(values)
        print(
            f"{kind:<10} {labels[way]:<30} {ours:>8.3f} {ours / wall:>6.1f}x {ours_cpu:>12.3f} "
            f"{ours_cpu / cpu:>6.1f}x"
        )


def measure_one_user(histories: int, kinds: Sequence[str]) -> None:
    """Ingest with no model as one user's history grows: the first `histories` LongMemEval
    histories stored in turn as sessions of one user, ms per turn of each beside BM25's
    indexing of its turns (see the docstring)."""
    import tempfile
    from pathlib import Path

    from bench_returning_user import drop, store_spec

    questions = histories_after_the_tokenizer(histories)
    print(f"\ningest with no model into one user's growing history, {len(questions)} LongMemEval histories")
    print(f"{'store':<10} {'way':<5} {'sessions':>8} {'turns':>6} {'ms/turn':>8} {'x BM25':>7}")
    with tempfile.TemporaryDirectory(prefix="ingest-") as tmp:
        for kind in kinds:
            for way in ("add", "bulk"):
                spec = store_spec(kind, Path(tmp), f"one-user-{way}")
                sessions = turns = 0
                try:
                    for number, question in enumerate(questions):
                        texts = [t.text for s in question.sessions for t in s.turns]
                        t = time.perf_counter()
                        _longmemeval.PlainBM25(texts)
                        bm25 = (time.perf_counter() - t) * 1000 / question.turn_count
                        ours, _ = ingest_history(question, spec, way, "one-user", f"{number}-")
                        sessions += len(question.sessions)
                        turns += question.turn_count
                        print(
                            f"{kind:<10} {way:<5} {sessions:>8} {turns:>6} {ours:>8.3f} {ours / bm25:>6.1f}x",
                            flush=True,
                        )
                finally:
                    drop(spec)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--locomo", type=int, default=0, help="LoCoMo conversation to ingest (index)")
    parser.add_argument("--longmemeval", type=int, default=0, help="LongMemEval history to ingest (index)")
    parser.add_argument("--skip-longmemeval", action="store_true")
    parser.add_argument("--ways", default=",".join(WAYS), help=f"comma-separated, of {', '.join(WAYS)}")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the best is printed")
    parser.add_argument(
        "--no-model", action="store_true", help="ingest without a model against BM25 (see above)"
    )
    parser.add_argument("--histories", type=int, default=4, help="LongMemEval histories, with --no-model")
    parser.add_argument(
        "--stores", default="sqlite", help="with --no-model: comma-separated, of sqlite, postgres, redis"
    )
    parser.add_argument(
        "--one-user",
        action="store_true",
        help="with --no-model: the histories go in as one user's, ms per turn as that history grows",
    )
    args = parser.parse_args(argv)
    if args.no_model:
        kinds = [kind.strip() for kind in args.stores.split(",") if kind.strip()]
        if not kinds or set(kinds) - {"sqlite", "postgres", "redis"}:
            parser.error(f"--stores takes some of sqlite, postgres, redis, got {args.stores!r}")
        if args.one_user:
            measure_one_user(args.histories, kinds)
        else:
            measure_without_model(args.histories, kinds)
        return 0
    ways = [way for way in args.ways.split(",") if way]
    unknown = set(ways) - set(WAYS)
    if unknown:
        parser.error(f"--ways: unknown {sorted(unknown)}; choose from {', '.join(WAYS)}")
    model = SentenceTransformerEmbedder()
    model.embed_documents(["warm up the model"])
    measure(f"LoCoMo conversation {args.locomo}", locomo_rows(args.locomo), model, ways, args.repeat)
    if not args.skip_longmemeval:
        measure(
            f"LongMemEval history {args.longmemeval}",
            longmemeval_rows(args.longmemeval),
            model,
            ways,
            args.repeat,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

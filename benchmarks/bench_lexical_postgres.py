"""Lexical recall on a long PostgreSQL session: the index the store keeps vs BM25 in the process.

Builds one session of N messages (default 10,000, mixed Chinese/English) in a
fresh schema of the PostgreSQL server named by ``CONVMEM_POSTGRES_URL``, then
times `build_context(query=...)` of a `ConversationMemory` with lexical recall
(no model), for a `PostgresStore` that keeps recall's keyword index in its
schema (the default) and one opened with ``lexical_index="process"`` (BM25
built in each process from the log):

* first query of a process on a session whose rows are not written yet (the
  store's: recall indexes every message; BM25: recall builds its index);
* first query of a new process on a session already indexed (the store's:
  reads the postings of the query's terms and the rows of the best
  candidates; BM25 reads the log and builds its index again, as every server does);
* the median and 95th percentile of later queries.

Each measurement runs in a fresh Python process, which also reports its
resident memory. The schema is dropped at the end.

With ``--locomo`` it measures ranking quality instead: evidence recall on
LoCoMo (``../shared/data/locomo-dev.json``, see ``locomo_recall.py``) of a
recall-only memory (no model, facts and summary off) on a `PostgresStore` with
each lexical index, every conversation one session and, the second row of each
index, every LoCoMo session its own session of one user with each question
asked from a new one (recall across sessions, where `full_match` puts the
sessions on one scale). Run:

    CONVMEM_POSTGRES_URL=postgresql://... python benchmarks/bench_lexical_postgres.py [--messages 10000]
    CONVMEM_POSTGRES_URL=postgresql://... python benchmarks/bench_lexical_postgres.py --locomo
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from _history import QUESTIONS, rss_mb, store_history

from convmem import ConversationMemory, MemoryConfig, PostgresStore

CONFIG = MemoryConfig(budget=2048, summary_trigger="never", extract_facts=False)


def build_session(url: str, schema: str, size: int) -> None:
    store = PostgresStore(url, schema=schema, timeout=120)
    store_history(store, "bench", size)
    store.close()


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(url: str, schema: str, lexical: str, repeat: int) -> dict[str, float]:
    """In this process: the first query, then the median and p95 of `repeat` more."""
    store = PostgresStore(url, schema=schema, timeout=600, lexical_index=lexical)
    memory = ConversationMemory("bench", store, CONFIG)
    started = time.perf_counter()
    first = memory.build_context(query=QUESTIONS[0])
    first_seconds = time.perf_counter() - started
    assert first.recalled, "recall found nothing"
    times = []
    for index in range(repeat):
        started = time.perf_counter()
        memory.build_context(query=QUESTIONS[index % len(QUESTIONS)])
        times.append(time.perf_counter() - started)
    rss = rss_mb()
    memory.close()
    store.close()
    return {
        "first": first_seconds,
        "median": statistics.median(times),
        "p95": _percentile(times, 0.95),
        "rss_mb": rss,
    }


def run_child(url: str, schema: str, lexical: str, repeat: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", lexical, "--schema", schema, "--repeat", str(repeat)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "CONVMEM_POSTGRES_URL": url, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def locomo(url: str, quick: bool) -> None:
    """Evidence recall of a recall-only memory on LoCoMo, with each lexical index."""
    from locomo_recall import (
        BUDGETS,
        Scores,
        _ingest,
        _session_number,
        context_text,
        default_data_path,
        load_conversations,
    )

    conversations = load_conversations(default_data_path())[: 2 if quick else None]
    config = MemoryConfig(summary_trigger="never", extract_facts=False)
    rows: list[tuple[str, dict[int, Scores]]] = []
    for lexical in ("process", "store"):
        for across in (False, True):
            scores = {budget: Scores() for budget in BUDGETS}
            schema = f"convmem_bench_{uuid.uuid4().hex[:12]}"
            store = PostgresStore(url, schema=schema, timeout=600, lexical_index=lexical)
            try:
                for conversation in conversations:
                    sample = conversation.sample_id
                    if across:
                        by_session: dict[int, list] = {}  # type: ignore[type-arg]
                        for turn in conversation.turns:
                            by_session.setdefault(_session_number(turn), []).append(turn)
                        for number, turns in sorted(by_session.items()):
                            session = ConversationMemory(f"{sample}-{number}", store, config, user_id=sample)
                            _ingest(session, conversation, turns)
                            session.close()
                        memory = ConversationMemory(f"{sample}-new", store, config, user_id=sample)
                    else:
                        memory = ConversationMemory(sample, store, config)
                        _ingest(memory, conversation, conversation.turns)
                    for question in conversation.questions:
                        for budget in BUDGETS:
                            context = memory.build_context(query=question.text, budget=budget)
                            scores[budget].record(
                                question, context_text(context.messages), context.token_count, None
                            )
                    memory.close()
            finally:
                store.close()
                with psycopg.connect(url, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            rows.append((f"{lexical}{', across sessions' if across else ''}", scores))
    print(f"LoCoMo evidence recall (categories 1-4), recall only, {len(conversations)} conversations:")
    print(f"{'lexical index':34}" + "".join(f"{budget:>8}" for budget in BUDGETS))
    for name, scores in rows:
        print(f"{name:34}" + "".join(f"{scores[budget].headline():>8.3f}" for budget in BUDGETS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--locomo", action="store_true", help="evidence recall on LoCoMo with each index")
    parser.add_argument("--quick", action="store_true", help="with --locomo: two conversations")
    parser.add_argument("--child", choices=["store", "process"], help=argparse.SUPPRESS)
    parser.add_argument("--schema", help=argparse.SUPPRESS)
    args = parser.parse_args()
    url = os.environ.get("CONVMEM_POSTGRES_URL")
    if not url:
        sys.exit("set CONVMEM_POSTGRES_URL to a PostgreSQL server this benchmark may write to")
    if args.locomo:
        locomo(url, args.quick)
        return
    if args.child:
        print(json.dumps(measure(url, args.schema, args.child, args.repeat)))
        return
    schema = f"convmem_bench_{uuid.uuid4().hex[:12]}"
    try:
        started = time.perf_counter()
        build_session(url, schema, args.messages)
        print(f"{args.messages:,} messages written in {time.perf_counter() - started:.1f} s\n")
        bm25 = run_child(url, schema, "process", args.repeat)
        ts_new = run_child(url, schema, "store", args.repeat)
        ts_again = run_child(url, schema, "store", args.repeat)
        with psycopg.connect(url, autocommit=True) as conn:
            (units_mb, postings_mb) = conn.execute(
                f"SELECT pg_total_relation_size('\"{schema}\".recall_units') / 1048576.0, "
                f"pg_total_relation_size('\"{schema}\".recall_postings') / 1048576.0"
            ).fetchone()
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    print(f"build_context(query=...) with lexical recall, budget 2048, {args.messages:,} messages:")
    print(f"{'':38}{'index (schema)':>18}{'BM25 (process)':>16}")
    print(f"{'first query, index not yet written':38}{ts_new['first']:>17.2f}s{bm25['first']:>15.2f}s")
    print(f"{'first query of a new process':38}{ts_again['first']:>17.2f}s{bm25['first']:>15.2f}s")
    print(f"{'median of later queries':38}{ts_again['median'] * 1e3:>16.1f}ms{bm25['median'] * 1e3:>14.1f}ms")
    print(
        f"{'95th percentile of later queries':38}{ts_again['p95'] * 1e3:>16.1f}ms{bm25['p95'] * 1e3:>14.1f}ms"
    )
    print(f"{'resident memory after the queries':38}{ts_again['rss_mb']:>16.0f}MB{bm25['rss_mb']:>14.0f}MB")
    print(
        f"\nrecall_units with its indexes: {float(units_mb):.1f} MB; recall_postings: {float(postings_mb):.1f} MB"
    )


if __name__ == "__main__":
    main()

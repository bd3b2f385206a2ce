"""Lexical recall on a long SQLite session: the index the store keeps vs BM25 in the process.

Builds one session of N messages (default 100,000, mixed Chinese/English) in a
SQLite file, then times `build_context(query=...)` of a `ConversationMemory`
with lexical recall (no model) in three situations, for the keyword index that
`SQLiteStore` keeps in its file (the default) and for BM25 in the process
(``lexical_index="process"``):

* first query of a process on a file whose index is not written yet (the
  store's: recall indexes every message; BM25: recall builds its index);
* first query of a new process on a file already indexed (the store's: reads
  the postings of the query's terms and the rows of the best candidates; BM25
  reads the whole log and builds its index again, as every process does);
* the median of later queries.

It also times `delete_messages` of one message on each file (with the index,
the session's rows are reset in the same transaction).

Each measurement runs in a fresh Python process, which also reports its
resident memory after the queries. Summary and facts are off so the figures
are those of recall. Run:

    python benchmarks/bench_lexical_sqlite.py [--messages 100000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _history import QUESTIONS, rss_mb, store_history

from convmem import ConversationMemory, MemoryConfig, SQLiteStore

CONFIG = MemoryConfig(budget=2048, summary_trigger="never", extract_facts=False)


def build_file(path: Path, size: int) -> None:
    store = SQLiteStore(path)
    store_history(store, "bench", size)
    store.close()


def measure(path: Path, lexical: str, repeat: int) -> dict[str, float]:
    """In this process: the first query, then the median of `repeat` more."""
    store = SQLiteStore(path, lexical_index="process" if lexical == "bm25" else "store")
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
    return {"first": first_seconds, "median": statistics.median(times), "rss_mb": rss}


def delete_one(path: Path) -> float:
    """Seconds to delete one message (with the index: the session's rows are reset too)."""
    store = SQLiteStore(path)
    started = time.perf_counter()
    store.delete_messages("bench", [7])
    seconds = time.perf_counter() - started
    store.close()
    return seconds


def run_child(path: Path, lexical: str, repeat: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", lexical, "--file", str(path), "--repeat", str(repeat)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--child", choices=["store", "bm25"], help=argparse.SUPPRESS)
    parser.add_argument("--file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.file, args.child, args.repeat)))
        return
    with tempfile.TemporaryDirectory() as folder:
        blank = Path(folder) / "blank.db"
        started = time.perf_counter()
        build_file(blank, args.messages)
        print(f"{args.messages:,} messages written in {time.perf_counter() - started:.1f} s\n")
        fts_file = Path(folder) / "fts.db"
        shutil.copy(blank, fts_file)
        fts_new = run_child(fts_file, "store", args.repeat)
        fts_again = run_child(fts_file, "store", args.repeat)
        bm25 = run_child(blank, "bm25", args.repeat)
        size_blank, size_fts = blank.stat().st_size, fts_file.stat().st_size
        delete_fts, delete_blank = delete_one(fts_file), delete_one(blank)
    print(f"build_context(query=...) with lexical recall, budget 2048, {args.messages:,} messages:")
    print(f"{'':38}{'index (file)':>14}{'BM25 (process)':>16}")
    print(f"{'first query, index not yet written':38}{fts_new['first']:>13.2f}s{bm25['first']:>15.2f}s")
    print(f"{'first query of a new process':38}{fts_again['first']:>13.2f}s{bm25['first']:>15.2f}s")
    print(
        f"{'median of later queries':38}{fts_again['median'] * 1e3:>12.1f}ms{bm25['median'] * 1e3:>14.1f}ms"
    )
    print(f"{'resident memory after the queries':38}{fts_again['rss_mb']:>12.0f}MB{bm25['rss_mb']:>14.0f}MB")
    print(f"{'delete_messages of one message':38}{delete_fts:>13.2f}s{delete_blank:>15.2f}s")
    print(f"\nfile size: {size_blank / 2**20:.1f} MB without the index, {size_fts / 2**20:.1f} MB with it")


if __name__ == "__main__":
    main()

"""Rolling summary and facts: the cost of `add`, inline vs in the background,
and how much the summary compresses the history it replaces.

    python benchmarks/bench_summary.py [--turns N]

Prints p50/p99 of `add` over N turns (default 1000) with background=False and
True (offline ExtractiveSummarizer + RuleFactExtractor, SQLite store), and the
summary's tokens against the raw evicted history it covers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _history import history

from convmem import ConversationMemory, MemoryConfig, SQLiteStore


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def run(turns: int, background: bool, folder: Path) -> tuple[list[float], ConversationMemory, float]:
    store = SQLiteStore(folder / f"summary-{background}.db")
    config = MemoryConfig(budget=2048, keep_recent_turns=8, background=background)
    memory = ConversationMemory("bench", store, config)
    samples = []
    rows = history(2 * turns, seed=11)
    for role, text in rows:
        start = time.perf_counter()
        memory.add(role, text)
        samples.append(time.perf_counter() - start)
    start = time.perf_counter()
    memory.flush()
    drained = time.perf_counter() - start
    return samples, memory, drained


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    args = parser.parse_args()
    print(
        f"{args.turns} turns ({2 * args.turns} add calls), SQLite store, offline summarizer and fact extractor\n"
    )
    print(f"{'mode':<12} {'add p50':>10} {'add p99':>10} {'add mean':>10} {'flush after':>12}")
    with tempfile.TemporaryDirectory() as folder:
        memories = {}
        for background in (False, True):
            samples, memory, drained = run(args.turns, background, Path(folder))
            memories[background] = memory
            label = "background" if background else "inline"
            print(
                f"{label:<12} {statistics.median(samples) * 1e3:>8.3f}ms {percentile(samples, 0.99) * 1e3:>8.3f}ms "
                f"{statistics.mean(samples) * 1e3:>8.3f}ms {drained * 1e3:>10.1f}ms"
            )
        memory = memories[True]
        summary = memory.summary()
        evicted = [m for m in memory.messages() if (m.seq or 0) <= summary.covers_through_seq]
        raw = sum(m.token_count or 0 for m in evicted)
        summary_tokens = memory.counter.count_text(summary.text)
        print(
            f"\nSummary covers seq 1-{summary.covers_through_seq} ({len(evicted)} messages, {raw} tokens raw)"
        )
        print(f"Summary: {summary_tokens} tokens -> compression {raw / max(1, summary_tokens):.1f}x")
        print(f"Facts: {[f'{f.key}={f.value}' for f in memory.facts()][:8]}")
        memory.close()


if __name__ == "__main__":
    main()

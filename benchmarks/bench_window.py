"""Recent-window speed: convmem vs LangChain trim_messages vs LlamaIndex ChatMemoryBuffer.

Prints the median time of `add` and `build_context` (no recall) at 1k, 10k and
100k stored messages, next to `trim_messages(strategy="last")` with a tiktoken
counter and `ChatMemoryBuffer.get()` on the same history and a 2048-token
budget, and the ratios the targets are stated in. Run:

    python benchmarks/bench_window.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _history import QUESTIONS, history

from convmem import ApproximateCounter, ConversationMemory, MemoryConfig, SQLiteStore, TiktokenCounter

BUDGET = 2048


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def fmt(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:8.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:8.2f} ms"
    return f"{seconds:8.2f} s "


def bench_convmem(size: int, folder: Path, repeat: int) -> tuple[float, float]:
    store = SQLiteStore(folder / f"bench-{size}.db")
    # The window alone, as the docstring says: recall (on by default) is measured in the defaults table.
    config = MemoryConfig(budget=BUDGET, keep_recent_turns=20, recall_earlier_turns=False)
    memory = ConversationMemory("bench", store, config)
    rows = history(size)
    for start in range(0, size, 2000):
        memory.add_messages([{"role": r, "content": t} for r, t in rows[start : start + 2000]])
    query = "What did we decide about the database?"
    build = median_seconds(lambda: memory.build_context(query=query), repeat)
    context = memory.build_context(query=query)
    assert context.token_count <= BUDGET
    counter = iter(range(10**9))
    add = median_seconds(
        lambda: memory.add("user" if next(counter) % 2 else "assistant", "one more message, 再来一条"), repeat
    )
    store.close()
    return add, build


def bench_trim_messages(size: int, repeat: int) -> float:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, trim_messages

    encoding = TiktokenCounter()

    def count(messages: list[BaseMessage]) -> int:
        return sum(3 + encoding.count_text(m.text) for m in messages)

    messages: list[BaseMessage] = [HumanMessage(t) if r == "user" else AIMessage(t) for r, t in history(size)]
    return median_seconds(
        lambda: trim_messages(
            messages, max_tokens=BUDGET, strategy="last", token_counter=count, start_on="human"
        ),
        repeat,
    )


def bench_chat_memory_buffer(size: int, repeat: int) -> float:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole
    from llama_index.core.memory import ChatMemoryBuffer

    encoding = TiktokenCounter()
    buffer = ChatMemoryBuffer.from_defaults(token_limit=BUDGET, tokenizer_fn=encoding.encode)
    buffer.set(
        [
            ChatMessage(role=MessageRole.USER if r == "user" else MessageRole.ASSISTANT, content=t)
            for r, t in history(size)
        ]
    )
    return median_seconds(buffer.get, repeat)


def defaults_at(size: int, folder: Path, repeat: int) -> tuple[float, float, float, int]:
    """Median build without and with a query, median background add, and the seq the
    summary covers, for `ConversationMemory` as a new user makes it, at `size` messages."""
    store = SQLiteStore(folder / f"defaults-{size}.db")
    memory = ConversationMemory("bench", store, MemoryConfig(budget=BUDGET))
    rows = history(size)
    for start in range(0, size, 2000):
        memory.add_messages([{"role": r, "content": t} for r, t in rows[start : start + 2000]])
    memory.flush()
    questions = iter(QUESTIONS * repeat)
    build = median_seconds(lambda: memory.build_context(), repeat)
    with_query = median_seconds(lambda: memory.build_context(query=next(questions)), repeat)
    background = ConversationMemory("bench", store, MemoryConfig(budget=BUDGET, background=True))
    counter = iter(range(10**9))
    add = median_seconds(
        lambda: background.add("user" if next(counter) % 2 else "assistant", "one more message, 再来一条"),
        repeat,
    )
    background.flush()
    covered = memory.summary().covers_through_seq
    background.close()
    memory.close()
    store.close()
    return build, with_query, add, covered


def bench_defaults(sizes: list[int], folder: Path, repeat: int) -> None:
    """`ConversationMemory` exactly as a new user makes it: summary, facts and
    lexical recall on, the window bounded by tokens, on a SQLite file."""
    print("\nDefaults (summary, facts, lexical recall on), SQLite, budget 2048, median:")
    print(
        f"{'messages':>9}  {'build, no query':>15}  {'build, query':>12}  {'add (background)':>16}  summary"
    )
    builds: dict[int, float] = {}
    for size in sizes:
        build, with_query, add, covered = defaults_at(size, folder, repeat)
        builds[size] = build
        print(f"{size:>9}  {fmt(build):>15}  {fmt(with_query):>12}  {fmt(add):>16}  covers seq <= {covered}")
    largest = max(sizes)
    print(
        f"  build_context without a query at {largest:,} / at 1,000 messages: "
        f"{builds[largest] / builds[1_000]:.2f}x  (target <= 2x)"
    )


def chinese_counting() -> None:
    exact, approx = TiktokenCounter(), ApproximateCounter()
    texts = [t for _, t in history(400) if any("\u4e00" <= c <= "\u9fff" for c in t)]
    real = sum(exact.count_text(t) for t in texts)
    ours = sum(approx.count_text(t) for t in texts)
    quarter = sum(len(t) / 4 for t in texts)
    under = sum(approx.count_text(t) < exact.count_text(t) for t in texts)
    print("\nApproximate counting of Chinese-heavy messages (cl100k is the truth):")
    print(
        f"  ApproximateCounter / cl100k = {ours / real:.2f}  (undercounted {under} of {len(texts)} messages)"
    )
    print(f"  chars/4 rule       / cl100k = {quarter / real:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, skip 100k")
    args = parser.parse_args()
    repeat = 30 if args.quick else 200
    sizes = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    print(f"Budget {BUDGET} tokens, median of {repeat} calls (SQLite store, WAL).\n")
    print(
        f"{'messages':>9}  {'convmem add':>12}  {'build_context':>13}  {'trim_messages':>13}  {'ChatMemoryBuffer.get':>20}"
    )
    results: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as folder:
        for size in sizes:
            add, build = bench_convmem(size, Path(folder), repeat)
            trim = (
                bench_trim_messages(size, 3 if size >= 100_000 else (5 if size >= 10_000 else 20))
                if size <= 10_000
                else float("nan")
            )
            cmb = bench_chat_memory_buffer(size, 1) if size == 1_000 else float("nan")
            results[size] = {"add": add, "build": build, "trim": trim, "cmb": cmb}
            print(
                f"{size:>9}  {fmt(add):>12}  {fmt(build):>13}  "
                f"{fmt(trim) if trim == trim else 'not run':>13}  {fmt(cmb) if cmb == cmb else 'not run':>20}"
            )
    print("\nRatios:")
    largest = max(sizes)
    print(
        f"  build_context at {largest:,} / at 1,000 messages: {results[largest]['build'] / results[1_000]['build']:.2f}x  (target <= 2x)"
    )
    print(
        f"  build_context at {largest:,} messages: {results[largest]['build'] * 1e3:.3f} ms  (target < 2 ms)"
    )
    print(
        f"  trim_messages / build_context at 10,000: {results[10_000]['trim'] / results[10_000]['build']:.0f}x  (target >= 100x)"
    )
    print(
        f"  ChatMemoryBuffer.get / build_context at 1,000: {results[1_000]['cmb'] / results[1_000]['build']:.0f}x  (target >= 1000x)"
    )
    with tempfile.TemporaryDirectory() as folder:
        bench_defaults(sizes, Path(folder), max(repeat // 4, 10))
    chinese_counting()


if __name__ == "__main__":
    main()

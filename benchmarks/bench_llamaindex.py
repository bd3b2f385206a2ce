"""`get()` latency: ConvMemChatMemoryBuffer vs LlamaIndex's ChatMemoryBuffer and Memory.

    python benchmarks/bench_llamaindex.py [--quick]

Same synthetic mixed Chinese/English history and the same token_limit (3000)
for every memory. Prints the median latency of one ``get()`` at each history
size and the ratios:

- ConvMemChatMemoryBuffer (in-memory store, and SQLite): 100, 1k, 10k, 100k messages;
- ChatMemoryBuffer.get(): 100 and 1k only (it re-tokenizes the remaining
  history at every step of its trimming loop: quadratic, seconds at 1k);
- Memory.aget(): 100, 1k, 10k, loaded as its own puts would leave it (the
  overflow archived by one pass of its queue management).

Also ``put`` of one message into each memory, at each size. ``--quick``
skips 100k and ChatMemoryBuffer at 1k. A full run takes about two minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _history import history
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer, Memory

from convmem import MemoryConfig
from llamaindex_convmem import ConvMemChatMemoryBuffer

TOKEN_LIMIT = 3000
OURS_SIZES = (100, 1_000, 10_000, 100_000)
UPSTREAM_BUFFER_SIZES = (100, 1_000)
MEMORY_SIZES = (100, 1_000, 10_000)
LOAD_BATCH = 2_000


def chat_messages(size: int) -> list[ChatMessage]:
    return [ChatMessage(role=role, content=text) for role, text in history(size)]


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm up caches (tokenizer, SQLite pages)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def amedian_ms(fn: Callable[[], Awaitable[Any]], repeats: int) -> float:
    await fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def ours(size: int, path: Path | None) -> tuple[float, float, float]:
    """(load seconds, get ms, put ms) for ConvMemChatMemoryBuffer."""
    # Default summaries and facts, computed on write (as a user of the default config gets them).
    buffer = ConvMemChatMemoryBuffer.from_defaults(
        token_limit=TOKEN_LIMIT, path=path, chat_store_key=f"bench-{size}", config=MemoryConfig()
    )
    buffer.reset()
    messages = chat_messages(size)
    start = time.perf_counter()
    for offset in range(0, size, LOAD_BATCH):
        buffer.put_messages(messages[offset : offset + LOAD_BATCH])
    load = time.perf_counter() - start
    get = median_ms(lambda: buffer.get(input="What did we decide about the database?"), 30)
    put = median_ms(
        lambda: buffer.put(ChatMessage(role="user", content="One more question about Duoduo.")), 30
    )
    return load, get, put


def upstream_buffer(size: int) -> tuple[float, float]:
    """(get ms, put ms) for ChatMemoryBuffer."""
    buffer = ChatMemoryBuffer.from_defaults(token_limit=TOKEN_LIMIT, chat_history=chat_messages(size))
    repeats = 1 if size >= 1_000 else 5
    get = median_ms(buffer.get, repeats)
    put = median_ms(
        lambda: buffer.put(ChatMessage(role="user", content="One more question about Duoduo.")), 30
    )
    return get, put


async def upstream_memory(size: int) -> tuple[float, float]:
    """(aget ms, aput ms) for Memory (its default SQLite-in-memory chat store)."""
    memory = Memory.from_defaults(session_id=f"bench-{size}", token_limit=TOKEN_LIMIT)
    await memory.sql_store.set_messages(memory.session_id, chat_messages(size))
    await memory._manage_queue()  # what its own puts would have archived by now
    get = await amedian_ms(memory.aget, 20)
    put = await amedian_ms(
        lambda: memory.aput(ChatMessage(role="user", content="One more question about Duoduo.")), 20
    )
    return get, put


def row(*cells: object) -> str:
    return f"{cells[0]!s:<34}" + "".join(f"{c!s:>12}" for c in cells[1:])


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip 100k and ChatMemoryBuffer at 1k")
    args = parser.parse_args()
    ours_sizes = OURS_SIZES[:-1] if args.quick else OURS_SIZES
    upstream_sizes = UPSTREAM_BUFFER_SIZES[:1] if args.quick else UPSTREAM_BUFFER_SIZES
    warnings.simplefilter("ignore", DeprecationWarning)

    results: dict[str, dict[int, tuple[float, float]]] = {
        "ConvMem (in-memory)": {},
        "ConvMem (SQLite)": {},
        "ChatMemoryBuffer": {},
        "Memory": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for size in ours_sizes:
            load, get, put = ours(size, None)
            results["ConvMem (in-memory)"][size] = (get, put)
            print(f"  ours in-memory {size:>7}: loaded in {load:.1f} s", flush=True)
            load, get, put = ours(size, Path(tmp) / "bench.db")
            results["ConvMem (SQLite)"][size] = (get, put)
            print(f"  ours SQLite    {size:>7}: loaded in {load:.1f} s", flush=True)
    for size in upstream_sizes:
        results["ChatMemoryBuffer"][size] = upstream_buffer(size)
        print(f"  ChatMemoryBuffer {size:>5}: done", flush=True)
    for size in MEMORY_SIZES:
        results["Memory"][size] = asyncio.run(upstream_memory(size))
        print(f"  Memory         {size:>7}: done", flush=True)

    sizes = sorted({s for r in results.values() for s in r})
    for what, index in (("get() median ms", 0), ("put() median ms", 1)):
        print()
        print(row(f"{what} (token_limit={TOKEN_LIMIT})", *[f"{s:,}" for s in sizes]))
        for name, by_size in results.items():
            label = name + (".aget()" if name == "Memory" and index == 0 else "")
            print(row(label, *[fmt(by_size[s][index]) if s in by_size else "-" for s in sizes]))

    ours_get = {s: v[0] for s, v in results["ConvMem (in-memory)"].items()}
    ours_sqlite = {s: v[0] for s, v in results["ConvMem (SQLite)"].items()}
    print()
    print("ratios of get() latency (how many times faster ours is; in-memory / SQLite store):")
    for name in ("ChatMemoryBuffer", "Memory"):
        for size, (theirs, _) in results[name].items():
            print(
                f"  {name:<17} at {size:>7,}: {theirs / ours_get[size]:>9,.1f}x / {theirs / ours_sqlite[size]:,.1f}x"
            )
    smallest, largest = min(ours_get), max(ours_get)
    print(
        f"  ours at {largest:,} vs {smallest:,} messages: {ours_get[largest] / ours_get[smallest]:.2f}x "
        f"(in-memory), {ours_sqlite[largest] / ours_sqlite[smallest]:.2f}x (SQLite)"
    )


if __name__ == "__main__":
    main()

"""Memory of a long-running server: RSS while touching many sessions, in each wrapper.

A server that serves 100,000 conversations must not keep 100,000 memories.
For each way of serving many sessions this touches N distinct sessions (one
turn stored, one context built, as a request would) in a fresh process and
prints the resident set size (VmRSS) after 1,000, 10,000 and N sessions:

  core        convmem SessionRegistry.memory(session)
  langchain   ConvMemSessions.history(session) (LangChain chat history)
  llamaindex  ConvMemChatMemoryBuffer.for_session(session)
  block       ConvMemMemoryBlock (LlamaIndex Memory) with one session per call

The log is a SQLite file in a temporary folder, so what the process holds is
only its per-process state (memories, recall mirrors, caches, connections):
that is what must stay flat while the file grows.

Usage::

    python benchmarks/bench_sessions_rss.py              # 100,000 sessions
    python benchmarks/bench_sessions_rss.py --sessions 20000
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable

KINDS = ("core", "langchain", "llamaindex", "block")


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def question(index: int) -> str:
    return f"My order number is {index}; when will it arrive?"


def answer(index: int) -> str:
    return f"Order {index} ships tomorrow."


def toucher(kind: str, path: str) -> Callable[[int], None]:
    """A function that serves one request of session `index` in the wrapper `kind`,
    on the SQLite file `path`."""
    if kind == "core":
        from convmem import SQLiteStore
        from convmem._sessions import SessionRegistry

        registry = SessionRegistry(store=SQLiteStore(path))

        def touch_core(index: int) -> None:
            memory = registry.memory(f"s{index}")
            memory.add_turn(question(index), answer(index))
            memory.build_context(query="when will it arrive?")

        return touch_core
    if kind == "langchain":
        from langchain_core.messages import AIMessage, HumanMessage

        from langchain_convmem import ConvMemSessions

        sessions = ConvMemSessions(path=path)

        def touch_langchain(index: int) -> None:
            history = sessions.history(f"s{index}")
            history.add_messages([HumanMessage(question(index)), AIMessage(answer(index))])
            _ = history.messages

        return touch_langchain
    if kind == "llamaindex":
        from llama_index.core.base.llms.types import ChatMessage

        from llamaindex_convmem import ConvMemChatMemoryBuffer

        root = ConvMemChatMemoryBuffer.from_defaults(token_limit=2000, path=path)

        def touch_llamaindex(index: int) -> None:
            buffer = root.for_session(f"s{index}")
            buffer.put_messages(
                [
                    ChatMessage(role="user", content=question(index)),
                    ChatMessage(role="assistant", content=answer(index)),
                ]
            )
            buffer.get("when will it arrive?")

        return touch_llamaindex
    if kind == "block":
        from llama_index.core.base.llms.types import ChatMessage

        from llamaindex_convmem import ConvMemMemoryBlock

        block = ConvMemMemoryBlock(token_limit=800, path=path)
        loop = asyncio.new_event_loop()

        def touch_block(index: int) -> None:
            messages = [
                ChatMessage(role="user", content=question(index)),
                ChatMessage(role="assistant", content=answer(index)),
            ]
            loop.run_until_complete(block.aput(messages, session_id=f"s{index}"))
            loop.run_until_complete(block.aget(messages[:1], session_id=f"s{index}"))

        return touch_block
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def measure(kind: str, sessions: int) -> dict[str, float]:
    folder = tempfile.mkdtemp(prefix="convmem-rss-")
    touch = toucher(kind, os.path.join(folder, "sessions.db"))
    touch(0)
    gc.collect()
    figures = {"start": rss_mb()}
    stored_bytes = 0
    checkpoints = sorted({1_000, 10_000, sessions} & set(range(1, sessions + 1)))
    for index in range(1, sessions + 1):
        touch(index)
        stored_bytes += len(question(index)) + len(answer(index))
        if index in checkpoints:
            gc.collect()
            figures[str(index)] = rss_mb()
            figures[f"text {index}"] = stored_bytes / 2**20
    shutil.rmtree(folder, ignore_errors=True)
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--kind", choices=KINDS, help="measure one kind in this process (used internally)")
    args = parser.parse_args()
    if args.kind:
        print(json.dumps(measure(args.kind, args.sessions)))
        return 0
    print(f"RSS (MB) while touching {args.sessions:,} sessions, each in a fresh process\n")
    header = f"{'wrapper':<11} {'start':>7} {'1k':>7} {'10k':>7} {f'{args.sessions // 1000}k':>7}   growth"
    print(header)
    print("-" * len(header))
    for kind in KINDS:
        result = subprocess.run(
            [sys.executable, __file__, "--kind", kind, "--sessions", str(args.sessions)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            print(f"{kind:<11} failed: {result.stderr.strip().splitlines()[-1:]}")
            continue
        figures = json.loads(result.stdout.strip().splitlines()[-1])
        last = str(args.sessions)
        base = "10000" if "10000" in figures and last != "10000" else "1000"
        growth = figures[last] - figures[base]
        print(
            f"{kind:<11} {figures['start']:>7.0f} {figures.get('1000', float('nan')):>7.0f} "
            f"{figures.get('10000', float('nan')):>7.0f} {figures[last]:>7.0f}   "
            f"+{growth:.0f} MB from {int(base) // 1000}k (the file gained {figures[f'text {last}'] - figures[f'text {base}']:.1f} MB of text)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Memory across one user's sessions: build time as the number of sessions grows.

One user with N sessions of M messages each (a synthetic chat history: each
session names its own project and locker code, the rest is routine questions) in a SQLite file; a new session of that
user asks questions whose answers lie in earlier sessions. Prints, side by
side in one run:

- ``build_context`` with a query, p50/p95 in ms, for a memory that shares
  recall across the user's sessions (the default with a ``user_id``) and for
  one that does not (``share_recall=False``): what sharing costs;
- the share of questions whose answer reached the context;
- ``add`` p50 in ms in a session of that user (unchanged by sharing);
- the first build of a new process (every session mirrored from the log).

Usage::

    python benchmarks/bench_user_sessions.py                      # 30 and 1000 sessions x 100 messages
    python benchmarks/bench_user_sessions.py --sessions 30 --minilm   # with MiniLM embeddings
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from convmem import ConversationMemory, MemoryConfig, Message, SQLiteStore

CITIES = ["Oslo", "Lima", "Hanoi", "Quito", "Dakar", "Perth", "Riga", "Cusco", "Tartu", "Lagos"]
TOPICS = ["sourdough", "kayaking", "violin", "chess", "orchids", "pottery", "climbing", "tango"]
FILLER = [
    "How do I sort a list in Python?",
    "Can you explain recursion simply?",
    "What is a good name for a variable holding a count?",
    "Summarise the meeting notes please.",
    "Thanks, that helps.",
    "Write a short email declining the invitation.",
]


_SYLLABLES = ["ka", "lo", "mi", "ru", "te", "zo", "pa", "ne", "vi", "su"]


def project_name(number: int) -> str:
    """A made-up word, one per session (up to 10,000): what a question names to find it."""
    digits = f"{number:04d}"
    return "".join(_SYLLABLES[int(d)] for d in digits).capitalize()


def fill(
    store: SQLiteStore, user: str, sessions: int, per_session: int, seed: int = 7
) -> list[tuple[str, str]]:
    """Write the user's sessions straight to the store; return (question, answer word) pairs."""
    rng = random.Random(seed)
    questions = []
    start = time.time() - sessions * 86400.0
    for number in range(sessions):
        when = start + number * 86400.0
        code = f"K{number:04d}"
        topic, city, name = TOPICS[number % len(TOPICS)], CITIES[number % len(CITIES)], project_name(number)
        said = f"For the {name} project of the {topic} club in {city} my locker code is {code}."
        messages = [
            Message.create("user", said, timestamp=when),
            Message.create("assistant", "Noted.", timestamp=when),
        ]
        for i in range(per_session // 2 - 1):
            messages.append(Message.create("user", rng.choice(FILLER), timestamp=when + i))
            messages.append(Message.create("assistant", f"Answer {i} to that.", timestamp=when + i))
        store.append(f"{user}-s{number}", messages, user_id=user)
        questions.append((f"What is my locker code for the {name} project?", code))
    return questions


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def measure(
    memory: ConversationMemory, questions: Sequence[tuple[str, str]], budget: int
) -> tuple[list[float], float]:
    times, found = [], 0
    for question, answer in questions:
        started = time.perf_counter()
        context = memory.build_context(question, budget)
        times.append((time.perf_counter() - started) * 1000)
        found += any(answer in str(m["content"]) for m in context.messages)
    return times, found / len(questions)


def run(sessions: int, per_session: int, questions_asked: int, minilm: bool) -> None:
    embedder = None
    if minilm:
        from convmem import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
    with tempfile.TemporaryDirectory(prefix="user-sessions-") as tmp:
        store = SQLiteStore(Path(tmp) / "chat.db")
        questions = fill(store, "alice", sessions, per_session)
        asked = random.Random(3).sample(questions, min(questions_asked, len(questions)))
        options = {"embedder": embedder} if embedder is not None else {}
        started = time.perf_counter()
        shared = ConversationMemory("alice-new", store, user_id="alice", **options)
        shared.build_context(asked[0][0], 1024)
        first_ms = (time.perf_counter() - started) * 1000
        shared_times, shared_found = measure(shared, asked, 1024)
        alone = ConversationMemory(
            "alice-alone", store, MemoryConfig(share_recall=False), user_id="alice", **options
        )
        alone.build_context(asked[0][0], 1024)
        alone_times, alone_found = measure(alone, asked, 1024)
        adds = []
        for i in range(50):
            started = time.perf_counter()
            shared.add("user", f"Another question number {i} about the schedule?")
            adds.append((time.perf_counter() - started) * 1000)
        label = f"{sessions} sessions x {per_session} msgs" + (" + MiniLM" if minilm else "")
        print(
            f"{label:<34} shared: p50 {statistics.median(shared_times):6.1f} p95 {percentile(shared_times, 95):6.1f} "
            f"found {shared_found:.2f} | this session only: p50 {statistics.median(alone_times):6.1f} "
            f"found {alone_found:.2f} | first build {first_ms:7.0f} ms | add p50 {statistics.median(adds):.2f} ms"
        )
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--sessions", type=int, action="append", help="sessions of the user (repeatable)")
    parser.add_argument("--messages", type=int, default=100, help="messages per session")
    parser.add_argument("--questions", type=int, default=40, help="questions asked per run")
    parser.add_argument("--minilm", action="store_true", help="recall with MiniLM embeddings too")
    args = parser.parse_args(argv)
    for sessions in args.sessions or [30, 1000]:
        run(sessions, args.messages, args.questions, minilm=False)
        if args.minilm:
            run(sessions, args.messages, args.questions, minilm=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

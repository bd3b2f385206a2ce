"""Memory of a server with many users: RSS after 3,000 sessions of 100 users in one registry.

A `SessionRegistry` keeps the memories of its ``max_cached_sessions`` most
recently used sessions (1,024 by default). What else a process keeps per user
(recall's mirrors of a user's sessions, cached postings, parsed cursors) must
stay within that bound too, however many users come and go. This measures, in
fresh processes on a SQLite file, for each store setting:

  one session's cost  RSS growth per session while touching 1,024 sessions of
                      1,024 users (one session each, all of them cached): a
                      cached memory with everything the process keeps for it
  many users          RSS growth while touching 3,000 sessions of 100 users
                      (30 sessions each, every session a few turns, a context
                      built with a query for each) with the default cache

and prints the growth beside the bound ``1.5 x one session's cost x cache``.
The settings: SQLite with recall's index in the file (the default),
SQLite with ``lexical_index="process"`` (recall mirrors sessions in the process,
as on Redis or the in-memory store), and a `Recall` per memory instead of the
one the store's memories share.

Usage::

    python benchmarks/bench_users_rss.py
    python benchmarks/bench_users_rss.py --users 100 --sessions 3000 --turns 6
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections import OrderedDict
from typing import Any

SETTINGS = ("store", "process", "own-recall")
CACHE = 1024
WORDS = [
    "garden",
    "tomato",
    "recipe",
    "marathon",
    "guitar",
    "invoice",
    "laptop",
    "passport",
    "flight",
    "museum",
    "violin",
    "kayak",
    "budget",
    "spreadsheet",
    "vitamin",
    "sourdough",
    "hiking",
    "telescope",
    "pottery",
    "mortgage",
    "bicycle",
    "podcast",
    "yoga",
    "novel",
    "chess",
    "camera",
    "sneakers",
    "vaccine",
    "thermostat",
    "lantern",
    "quilt",
    "orchard",
]


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def turn_text(rng: random.Random, user: int, session: int, turn: int) -> tuple[str, str]:
    """A user's line and the assistant's answer: a few topic words, the user's own numbers."""
    topic = " ".join(rng.sample(WORDS, 3))
    asked = f"My {topic} plan number {user}-{session}-{turn}: what should I do about the {rng.choice(WORDS)}?"
    told = f"For your {topic}, start with the {rng.choice(WORDS)} and keep notes on {rng.choice(WORDS)}."
    return asked, told


def measure(setting: str, users: int, sessions: int, turns: int) -> dict[str, float]:
    from convmem import ConversationMemory, SessionRegistry, SQLiteStore

    folder = tempfile.mkdtemp(prefix="convmem-users-rss-")
    try:
        store = SQLiteStore(
            os.path.join(folder, "users.db"), lexical_index="process" if setting == "process" else "store"
        )
        registry: Any = (
            _OwnRecallRegistry(store, CACHE)
            if setting == "own-recall"
            else SessionRegistry(store=store, max_cached_sessions=CACHE)
        )
        rng = random.Random(7)

        def touch(user: int, session: int) -> None:
            memory: ConversationMemory = registry.memory(f"u{user}-s{session}", user_id=f"u{user}")
            for turn in range(turns):
                memory.add_turn(*turn_text(rng, user, session, turn))
            memory.build_context(query=f"What did I plan for the {rng.choice(WORDS)}?")

        touch(-1, 0)  # imports, the tokenizer, connections: not the sessions' cost
        gc.collect()
        start = rss_mb()
        for index in range(sessions):
            touch(index % users, index // users)
        gc.collect()
        return {"start": start, "end": rss_mb(), "cached": float(len(registry))}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _OwnRecallRegistry:
    """The comparison: the same LRU of memories, each memory with a `Recall` of its own."""

    def __init__(self, store: Any, max_cached_sessions: int) -> None:
        self.store = store
        self.max_cached_sessions = max_cached_sessions
        self._memories: OrderedDict[str, Any] = OrderedDict()

    def memory(self, session_id: str, user_id: str) -> Any:
        from convmem import ConversationMemory, Recall

        memory = self._memories.get(session_id)
        if memory is None:
            memory = self._memories[session_id] = ConversationMemory(
                session_id, self.store, user_id=user_id, recall=Recall()
            )
            while len(self._memories) > self.max_cached_sessions:
                self._memories.popitem(last=False)[1].close()
        self._memories.move_to_end(session_id)
        return memory

    def __len__(self) -> int:
        return len(self._memories)


def run(setting: str, users: int, sessions: int, turns: int) -> dict[str, float]:
    result = subprocess.run(
        [
            sys.executable,
            __file__,
            "--setting",
            setting,
            "--users",
            str(users),
            "--sessions",
            str(sessions),
            "--turns",
            str(turns),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{setting} failed: {result.stderr.strip()[-2000:]}")
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--sessions", type=int, default=3000, help="sessions in all, spread over the users")
    parser.add_argument("--turns", type=int, default=6, help="turns (a user line and an answer) per session")
    parser.add_argument(
        "--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}"
    )
    parser.add_argument(
        "--setting", choices=SETTINGS, help="measure one setting in this process (used internally)"
    )
    args = parser.parse_args()
    if args.setting:
        print(json.dumps(measure(args.setting, args.users, args.sessions, args.turns)))
        return 0
    settings = [setting.strip() for setting in args.settings.split(",") if setting.strip()]
    if not settings or any(setting not in SETTINGS for setting in settings):
        parser.error(f"--settings takes some of {', '.join(SETTINGS)}, got {args.settings!r}")
    print(
        f"RSS growth (MB) in a fresh process: {args.sessions:,} sessions of {args.users} users "
        f"({args.turns} turns each) against 1,024 sessions of 1,024 users; cache {CACHE:,}\n"
    )
    header = (
        f"{'setting':<11} {'per session (KB)':>17} {'bound (MB)':>11} {'many users (MB)':>16} {'of bound':>9}"
    )
    print(header)
    print("-" * len(header))
    for setting in settings:
        one = run(setting, CACHE, CACHE, args.turns)
        many = run(setting, args.users, args.sessions, args.turns)
        per_session = (one["end"] - one["start"]) / CACHE
        bound = 1.5 * per_session * CACHE
        growth = many["end"] - many["start"]
        print(
            f"{setting:<11} {per_session * 1024:>17.1f} {bound:>11.1f} {growth:>16.1f} "
            f"{growth / bound if bound > 0 else float('nan'):>8.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""How fast `convmem serve` shows the first page of a big store.

A SQLite file of 100,000 messages is made (by default 200 users x 5 sessions x
100 messages; ``--sessions-of N`` puts N messages in each session instead, so
the same messages spread over more sessions). The inspector's app is then asked,
in process (Starlette's test client, no network), for its first pages:

  users       ``/``: the first page of users, with their sessions' counts and dates
  sessions    ``/user?id=...``: the first page of one user's sessions
  messages    ``/session?id=...``: a session's summary, facts and first page of messages

each from a new app (nothing cached: what a person opening the store waits for)
and again from the same app. In the same run, the users page is also made the
two ways the inspector does not use for a SQLite file, for comparison:

  scan        through the Store protocol alone (``sessions()`` and a ``stats`` per
              session), as the inspector lists a Redis or PostgreSQL store
  read logs   reading every session's log to count its messages and dates, as
              one would with the raw log alone

Usage::

    python benchmarks/bench_inspector.py                   # 100,000 messages, 100 per session
    python benchmarks/bench_inspector.py --sessions-of 5   # 100,000 messages in 20,000 sessions
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from starlette.testclient import TestClient

from convmem import Message, SQLiteStore, Store
from convmem._inspect.catalog import StoreCatalog
from convmem._inspect.web import create_app

BASE = "http://127.0.0.1:8765"


def fill(path: Path, messages: int, per_session: int, sessions_per_user: int) -> SQLiteStore:
    store = SQLiteStore(path)
    start = time.time() - messages * 60
    for number in range(messages // per_session):
        session_id = f"session-{number:06d}"
        user_id = f"user-{number // sessions_per_user:05d}"
        batch = [
            dataclasses.replace(
                Message.create(
                    "user" if i % 2 == 0 else "assistant",
                    f"Message {i} of {session_id}: the weather, a recipe, a trip to Porto and a dog called Pico.",
                    timestamp=start + (number * per_session + i) * 60,
                ),
                token_count=24,
            )
            for i in range(per_session)
        ]
        store.append(session_id, batch, user_id=user_id)
    return store


def timed(action: Callable[[], object], repeat: int) -> list[float]:
    seconds = []
    for _ in range(repeat):
        began = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - began)
    return seconds


class ProtocolOnly:
    """The store seen through the Store protocol alone (the inspector then scans it)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def users_by_reading_logs(store: Store) -> int:
    users: dict[str | None, list[float]] = {}
    for session_id in store.sessions():
        log = store.messages(session_id)
        owner = store.stats(session_id).user_id
        users.setdefault(owner, []).extend(m.timestamp for m in log)
    return len(users)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sessions-of", type=int, default=100, help="messages per session (default 100)")
    parser.add_argument("--sessions-per-user", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        began = time.perf_counter()
        store = fill(Path(folder) / "big.db", args.messages, args.sessions_of, args.sessions_per_user)
        sessions = len(store.sessions())
        users = len({store.stats(s).user_id for s in store.sessions()[:: args.sessions_per_user]})
        print(
            f"store: {args.messages:,} messages in {sessions:,} sessions of {users:,} users "
            f"(made in {time.perf_counter() - began:.1f} s)"
        )
        first_user, first_session = "user-00000", "session-000000"
        pages = {
            "users": "/",
            "sessions": f"/user?id={first_user}",
            "messages": f"/session?id={first_session}",
        }
        print(f"{'page':<10} {'new app (s)':>12} {'same app, median (s)':>22} {'max (s)':>9}")
        for name, url in pages.items():

            def fresh(url: str = url) -> None:
                client = TestClient(create_app(StoreCatalog(store)), base_url=BASE)
                assert client.get(url).status_code == 200

            client = TestClient(create_app(StoreCatalog(store)), base_url=BASE)
            cold = timed(fresh, args.repeat)
            warm = timed(lambda url=url, client=client: client.get(url), args.repeat)
            print(
                f"{name:<10} {statistics.median(cold):>12.4f} {statistics.median(warm):>22.4f} {max(cold):>9.4f}"
            )

        sql = timed(lambda: StoreCatalog(store).users(), args.repeat)
        scan = timed(lambda: StoreCatalog(ProtocolOnly(store)).users(), max(1, args.repeat // 2))  # type: ignore[arg-type]
        logs = timed(lambda: users_by_reading_logs(store), 1)
        print()
        print("first page of users, listing only (median s):")
        print(f"  session table (SQLite, what the inspector does)   {statistics.median(sql):.4f}")
        print(
            f"  Store protocol scan (as for Redis, PostgreSQL)     {statistics.median(scan):.4f}"
            f"  ({statistics.median(scan) / statistics.median(sql):.0f}x)"
        )
        print(
            f"  reading every log                                  {logs[0]:.4f}"
            f"  ({logs[0] / statistics.median(sql):.0f}x)"
        )
        store.close()


if __name__ == "__main__":
    main()

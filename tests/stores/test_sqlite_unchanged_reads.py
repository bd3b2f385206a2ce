"""What a SQLite store keeps of the reads every build of a user repeats (the stats of their
sessions, their facts records, recall's index of their history): kept only while the file
is unchanged, so a write from this store, another store on the file or another process is
seen by the next build, and nothing of a forgotten session stays in the process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from convmem import ConversationMemory, SQLiteStore, forget_session

QUERY = "Which bike do I ride to work?"
MOVED = "Which city did I move to last month?"


def told(store: SQLiteStore, session: str, *turns: tuple[str, str]) -> None:
    memory = ConversationMemory(session, store, user_id="alice")
    for user, assistant in turns:
        memory.add_turn(user, assistant)
    memory.flush()
    memory.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(tmp_path / "m.db")
    told(opened, "old-1", ("My name is Alice and I ride a red road bike to work.", "Nice bike!"))
    told(opened, "old-2", ("I live in Lyon, near the river.", "Lyon is lovely."))
    yield opened
    opened.close()


def reads_of(store: SQLiteStore) -> Counter[str]:
    """The statements the store reads from now on, by the table they name first."""
    counted: Counter[str] = Counter()
    read = store._pool.read

    def counting(sql: str, params):  # type: ignore[no-untyped-def]
        counted[sql.split(" FROM ")[1].split()[0] if " FROM " in sql else sql] += 1
        return read(sql, params)

    store._pool.read = counting  # type: ignore[method-assign]
    return counted


def test_a_build_of_an_unchanged_file_reads_the_users_sessions_facts_and_index_once(
    store: SQLiteStore,
) -> None:
    memory = ConversationMemory("new-chat", store, user_id="alice")
    first = memory.build_context(query=QUERY, budget=800)
    reads = reads_of(store)
    again = memory.build_context(query=QUERY, budget=800)
    assert again.to_text() == first.to_text()
    assert "road bike" in again.to_text() and "Alice" in again.to_text()
    # The session's own stats and summary are read each time (cheap, one row each); the
    # user's sessions, their facts and the history's index rows are not read again.
    assert reads["sessions"] == 1 and reads["state"] == 1, reads
    assert reads["recall_histories"] == 0, reads


def test_a_write_through_the_same_store_is_seen_by_the_next_build(store: SQLiteStore) -> None:
    memory = ConversationMemory("new-chat", store, user_id="alice")
    assert "Oslo" not in memory.build_context(query="Where do I live now?", budget=800).to_text()
    told(store, "old-3", ("I moved to Oslo last month.", "Welcome to Oslo!"))
    assert store._pool._kept == {}  # dropped by the commit, before any read
    context = memory.build_context(query="Where do I live now?", budget=800)
    assert "Oslo" in context.to_text()


def test_a_write_through_another_store_on_the_file_is_seen_by_the_next_build(
    store: SQLiteStore, tmp_path: Path
) -> None:
    memory = ConversationMemory("new-chat", store, user_id="alice")
    assert not memory.build_context(query=MOVED, budget=800).recalled
    with SQLiteStore(tmp_path / "m.db") as other:
        told(other, "old-3", ("I moved to Oslo last month.", "Welcome to Oslo!"))
    context = memory.build_context(query=MOVED, budget=800)
    assert {item.session_id for item in context.recalled} == {"old-3"}  # its index rows too
    assert "Oslo" in context.to_text()


def test_a_write_by_another_process_is_seen_by_the_next_build(store: SQLiteStore, tmp_path: Path) -> None:
    memory = ConversationMemory("new-chat", store, user_id="alice")
    assert "Oslo" not in memory.build_context(query="Where do I live now?", budget=800).to_text()
    script = (
        "from convmem import ConversationMemory, SQLiteStore\n"
        f"store = SQLiteStore({str(tmp_path / 'm.db')!r})\n"
        "memory = ConversationMemory('old-3', store, user_id='alice')\n"
        "memory.add_turn('I moved to Oslo last month.', 'Welcome to Oslo!')\n"
        "memory.flush()\n"
        "store.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Oslo" in memory.build_context(query="Where do I live now?", budget=800).to_text()


def test_forgetting_a_session_leaves_nothing_of_it_kept_in_the_process(store: SQLiteStore) -> None:
    memory = ConversationMemory("new-chat", store, user_id="alice")
    assert "Lyon" in memory.build_context(query="Where do I live?", budget=800).to_text()
    assert store._pool._kept  # the user's facts records, among others
    forget_session(store, "old-2")
    assert store._pool._kept == {}
    assert "Lyon" not in memory.build_context(query="Where do I live?", budget=800).to_text()
    assert "Lyon" not in repr(list(store._pool._kept.values()))


def test_closing_the_store_drops_what_it_kept(store: SQLiteStore) -> None:
    ConversationMemory("new-chat", store, user_id="alice").build_context(query=QUERY, budget=800)
    assert store._pool._kept
    store.close()
    assert store._pool._kept == {}
    assert store._pool.data_version() is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_reads_the_file_as_it_is_not_as_the_parent_kept_it(
    store: SQLiteStore, tmp_path: Path
) -> None:
    memory = ConversationMemory("new-chat", store, user_id="alice")
    assert "Oslo" not in memory.build_context(query="Where do I live now?", budget=800).to_text()
    assert store._pool._kept
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome is its exit code
        code = 1
        try:
            with SQLiteStore(tmp_path / "m.db") as other:
                told(other, "old-3", ("I moved to Oslo last month.", "Welcome to Oslo!"))
            seen = memory.build_context(query="Where do I live now?", budget=800).to_text()
            code = 0 if "Oslo" in seen else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0

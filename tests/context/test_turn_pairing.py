"""An answer belongs to its own question, even when another turn was stored in between.

Two concurrent turns on one session (a double submit, two tabs) are stored as
Q1, Q2, A2, A1. Grouping by position paired Q2 with A1; an answer now names its
question (``reply_to_seq``), and every view pairs by it.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableLambda

from convmem import ConversationMemory, InvalidMessageError, MemoryConfig, Message, SQLiteStore
from convmem._context.recent import recent_turns
from convmem._models import group_turns
from convmem._stores.sqlite.migrations import SCHEMA_VERSION
from langchain_convmem import ConvMemSessions, with_convmem


def interleaved(path: Path, config: MemoryConfig | None = None) -> ConversationMemory:
    memory = ConversationMemory("s", SQLiteStore(path), config)
    first = memory.add("user", "What is the capital of France?", status="running")
    second = memory.add("user", "And of Spain?", status="running")
    memory.add("assistant", "Madrid.", reply_to_seq=second.seq)
    memory.add("assistant", "Paris.", reply_to_seq=first.seq)
    return memory


def texts(memory_turns: list) -> list[list[str]]:  # type: ignore[type-arg]
    return [[m.text for m in turn.messages] for turn in memory_turns]


def test_interleaved_turns_pair_each_answer_with_its_question(tmp_path: Path) -> None:
    memory = interleaved(tmp_path / "chat.db")
    assert texts(memory.turns()) == [
        ["What is the capital of France?", "Paris."],
        ["And of Spain?", "Madrid."],
    ]


def test_the_orchestration_view_pairs_by_question(tmp_path: Path) -> None:
    memory = interleaved(tmp_path / "chat.db")
    for turn in memory.turns():
        assert turn.question is not None
        memory.set_status(turn.question.seq or 0, "completed")
        assert turn.answer is not None
        memory.set_status(turn.answer.seq or 0, "completed")
    view = memory.render_transcript("orchestration")
    assert view.index("France") < view.index("Paris") < view.index("Spain") < view.index("Madrid")


def test_the_answer_view_still_shows_questions_only(tmp_path: Path) -> None:
    memory = interleaved(tmp_path / "chat.db")
    for message in memory.messages():
        memory.set_status(message.seq or 0, "completed")
    view = memory.render_transcript("answer")
    assert "France" in view and "Spain" in view and "Paris" not in view


def test_the_window_sends_each_question_before_its_own_answer(tmp_path: Path) -> None:
    memory = interleaved(tmp_path / "chat.db")
    context = memory.build_context(budget=2000, include_query=False)
    contents = [m["content"] for m in context.messages if m["role"] in ("user", "assistant")]
    assert contents == ["What is the capital of France?", "Paris.", "And of Spain?", "Madrid."]


def test_the_recent_turns_keep_an_earlier_question_answered_among_them(tmp_path: Path) -> None:
    memory = interleaved(tmp_path / "chat.db")
    turns = recent_turns(memory.store, "s", 1)
    assert texts(turns) == [["What is the capital of France?", "Paris."], ["And of Spain?", "Madrid."]]


def test_a_window_of_one_turn_keeps_the_earlier_question_answered_in_it(tmp_path: Path) -> None:
    memory = interleaved(tmp_path / "chat.db", MemoryConfig(keep_recent_turns=1))
    context = memory.build_context(budget=2000, include_query=False)
    contents = [m["content"] for m in context.messages if m["role"] in ("user", "assistant")]
    assert contents == ["What is the capital of France?", "Paris.", "And of Spain?", "Madrid."]


def test_a_tool_result_joins_the_turn_of_its_call() -> None:
    log = [
        Message.create("user", "Q1"),
        Message.create("assistant", None, tool_calls=[{"id": "c1", "name": "f", "args": {}}]),
        Message.create("user", "Q2"),
        Message.create("tool", "result", tool_call_id="c1"),
    ]
    log = [Message(**{**m.__dict__, "seq": i + 1}) for i, m in enumerate(log)]
    assert [[m.text for m in t.messages] for t in group_turns(log)] == [["Q1", "", "result"], ["Q2"]]


def test_an_answer_to_a_question_not_read_forms_a_turn_without_a_question() -> None:
    log = [Message.create("user", "Q9"), Message.create("assistant", "A1", reply_to_seq=1)]
    log = [Message(**{**m.__dict__, "seq": 9 + i}) for i, m in enumerate(log)]
    turns = group_turns(log)
    assert [t.question is None for t in turns] == [False, True]


def test_an_answer_naming_no_stored_question_is_refused(tmp_path: Path) -> None:
    memory = ConversationMemory("s", SQLiteStore(tmp_path / "chat.db"))
    memory.add("user", "Q")
    answer = memory.add("assistant", "A")
    with pytest.raises(InvalidMessageError, match="reply_to_seq=7 names no user message"):
        memory.add("assistant", "late", reply_to_seq=7)
    with pytest.raises(InvalidMessageError, match=f"reply_to_seq={answer.seq} names no user message"):
        memory.add("assistant", "late", reply_to_seq=answer.seq)
    assert len(memory.messages()) == 2


def test_a_question_cannot_name_a_question() -> None:
    with pytest.raises(InvalidMessageError, match="a user message starts a turn"):
        Message.create("user", "Q", reply_to_seq=1)


@pytest.mark.parametrize("value", [0, -1, 1.0, "1", True])
def test_reply_to_seq_must_be_a_positive_int(value: object) -> None:
    with pytest.raises(InvalidMessageError, match="reply_to_seq must be None or the seq"):
        Message.create("assistant", "A", reply_to_seq=value)  # type: ignore[arg-type]


def test_a_version_1_sqlite_file_gains_the_column_and_keeps_its_messages(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(
            """
            CREATE TABLE sessions (session_id TEXT PRIMARY KEY, user_id TEXT, created_at REAL NOT NULL,
                updated_at REAL NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0,
                message_count INTEGER NOT NULL DEFAULT 0, total_tokens INTEGER NOT NULL DEFAULT 0);
            CREATE TABLE messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,
                content TEXT NOT NULL, name TEXT, tool_calls TEXT, tool_call_id TEXT, metadata TEXT,
                status TEXT NOT NULL, ts REAL NOT NULL, token_count INTEGER,
                PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
            INSERT INTO sessions VALUES ('s', NULL, 0, 0, 1, 1, 3);
            INSERT INTO messages VALUES ('s', 1, 'user', '"old question"', NULL, NULL, NULL, NULL,
                'running', 0, 3);
            PRAGMA user_version = 1;
            """
        )
    conn.close()
    store = SQLiteStore(path)
    (old,) = store.messages("s")
    assert (old.text, old.reply_to_seq) == ("old question", None)
    ConversationMemory("s", store).add("assistant", "answer", reply_to_seq=1)
    assert store.messages("s")[-1].reply_to_seq == 1
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_concurrent_runnable_turns_pair_each_answer_with_its_question(tmp_path: Path) -> None:
    second_stored = threading.Event()

    def answer(value: dict) -> str:  # type: ignore[type-arg]
        question = value["input"]
        if question == "first":
            second_stored.wait(5)  # the second turn is stored and answered meanwhile
        return f"answer to {question}"

    sessions = ConvMemSessions(tmp_path / "chat.db")
    chain = with_convmem(
        RunnableLambda(answer), sessions=sessions, input_messages_key="input", history_messages_key="history"
    )
    config = {"configurable": {"session_id": "s"}}
    first = threading.Thread(target=chain.invoke, args=({"input": "first"}, config))
    first.start()
    while len(sessions.memory("s").messages()) < 1:
        threading.Event().wait(0.01)
    chain.invoke({"input": "second"}, config)
    second_stored.set()
    first.join(5)
    turns = sessions.memory("s").turns()
    pairs = [(t.question.text if t.question else None, t.answer.text if t.answer else None) for t in turns]
    assert pairs == [("first", "answer to first"), ("second", "answer to second")]

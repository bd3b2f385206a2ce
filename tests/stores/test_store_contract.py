"""The `Store` contract, run against every store: in-memory, SQLite (a real file), Redis (a real
server and a real 3-master Cluster) and PostgreSQL (a real server)."""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis
import redis.cluster
from postgres_server import drop_schema, new_schema
from redis_server import delete_prefix, new_prefix

from convmem import (
    ConfigError,
    InMemoryStore,
    InvalidMessageError,
    InvalidSessionIdError,
    Message,
    PostgresStore,
    RedisStore,
    SQLiteStore,
    Store,
    StoreError,
    TurnStatus,
)
from convmem._errors import SessionOwnerError
from convmem._models import Role
from convmem._stores.base import MAX_SEQ
from convmem._stores.capabilities import read_session
from convmem._stores.redis.records import _escape

# Ids that validate_id accepts: every store keeps each one apart and gives it back exactly.
HOSTILE_IDS = [
    "a",
    "a*",
    "a?",
    "*",
    "a[bc]",
    "a:b",
    "a:b:log",
    "a:meta",
    "a%3Ab",
    "%",
    "%s",
    "%(x)s",
    "$1",
    "{a}",
    "a}",
    "{",
    "{}",
    "x{a}y:{b}",
    "'",
    "''",
    '"',
    "a'); DROP TABLE sessions; --",
    "1 OR 1=1",
    "../../etc/passwd",
    "..",
    "a/b",
    "a\\b",
    "a b",
    "é",
    "e\u0301",
    "会话",
    "🐶",
    "x" * 256,
    "界" * 255,
]
# Ids that validate_id refuses (the memory never passes them on): a store either keeps them
# apart like any other id, or refuses them with InvalidSessionIdError; it never mixes them up.
UNUSABLE_IDS = ["a\x00b", "x" * 10_000]
SQL_LOOKING_TEXTS = [
    "'; DROP TABLE messages; --",
    "Robert'); DELETE FROM sessions WHERE ('1'='1",
    "%s %(name)s %% $1 ? :name",
    "\\x00 \\ \\' \\\"",
    "E'\\\\' || chr(0)",
    "{}{{}}}{",
    "SELECT * FROM convmem.messages; COMMIT; BEGIN;",
]


class Backend:
    """Opens stores of one kind that all see the same data."""

    persistent = True

    def open(self) -> Store:
        raise NotImplementedError

    def corrupt(self, session_id: str, seq: int, raw: str) -> None:
        raise NotImplementedError

    def cleanup(self) -> None:
        pass


class MemoryBackend(Backend):
    persistent = False

    def __init__(self) -> None:
        self.store = InMemoryStore()

    def open(self) -> Store:
        return self.store


class SQLiteBackend(Backend):
    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self) -> Store:
        return SQLiteStore(self.path)

    def corrupt(self, session_id: str, seq: int, raw: str) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.execute(
                "UPDATE messages SET content = ? WHERE session_id = ? AND seq = ?", (raw, session_id, seq)
            )
        conn.close()


class RedisBackend(Backend):
    def __init__(self, url: str, *, cluster: bool = False) -> None:
        self.url = url
        self.cluster = cluster
        self.prefix = new_prefix()

    def open(self) -> Store:
        return RedisStore(self.url, cluster=self.cluster, prefix=self.prefix)

    def corrupt(self, session_id: str, seq: int, raw: str) -> None:
        # Documented layout: prefix:session:{<escaped id>}:log, a hash of seq -> JSON record.
        client = (
            redis.cluster.RedisCluster.from_url(self.url) if self.cluster else redis.Redis.from_url(self.url)
        )
        client.hset(f"{self.prefix}:session:{{{_escape(session_id)}}}:log", str(seq), raw)
        client.close()

    def cleanup(self) -> None:
        delete_prefix(self.url, self.prefix, cluster=self.cluster)


class PostgresBackend(Backend):
    def __init__(self, url: str) -> None:
        self.url = url
        self.schema = new_schema()

    def open(self) -> Store:
        return PostgresStore(self.url, schema=self.schema)

    def corrupt(self, session_id: str, seq: int, raw: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{self.schema}".messages SET content = %s WHERE session_id = %s AND seq = %s',
                (raw, session_id, seq),
            )

    def cleanup(self) -> None:
        drop_schema(self.url, self.schema)


SERVER_KINDS = [
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


def open_backend(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if kind == "memory":
        return MemoryBackend()
    if kind == "sqlite":
        return SQLiteBackend(tmp_path / "memory.db")
    if kind == "redis":
        return RedisBackend(request.getfixturevalue("redis_url"))
    if kind == "redis-cluster":
        return RedisBackend(request.getfixturevalue("redis_cluster_url"), cluster=True)
    return PostgresBackend(request.getfixturevalue("postgres_url"))


@pytest.fixture(params=["memory", "sqlite", *SERVER_KINDS])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    chosen = open_backend(request.param, request, tmp_path)
    yield chosen
    chosen.cleanup()


@pytest.fixture(params=["sqlite", *SERVER_KINDS])
def persistent_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    chosen = open_backend(request.param, request, tmp_path)
    yield chosen
    chosen.cleanup()


@pytest.fixture
def store(backend: Backend) -> Iterator[Store]:
    opened = backend.open()
    yield opened
    opened.close()


def user(text: str, tokens: int | None = None) -> Message:
    return dataclasses.replace(Message.create("user", text), token_count=tokens)


def assistant(text: str, tokens: int | None = None) -> Message:
    return dataclasses.replace(Message.create("assistant", text), token_count=tokens)


def texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


def seqs(messages: list[Message]) -> list[int | None]:
    return [m.seq for m in messages]


def fill(store: Store, session_id: str, count: int) -> None:
    store.append(session_id, [user(f"m{i}") for i in range(1, count + 1)])


# -- append and read ---------------------------------------------------------------


def test_a_store_satisfies_the_store_protocol(store: Store) -> None:
    assert isinstance(store, Store)


def test_append_assigns_consecutive_seqs_from_one(store: Store) -> None:
    stored = store.append("s", [user("one"), assistant("two"), user("three")])
    assert seqs(stored) == [1, 2, 3]
    assert texts(stored) == ["one", "two", "three"]


def test_a_later_append_continues_the_sequence(store: Store) -> None:
    store.append("s", [user("one"), assistant("two")])
    stored = store.append("s", [user("three")])
    assert seqs(stored) == [3]
    assert seqs(store.messages("s")) == [1, 2, 3]


def test_an_empty_append_stores_nothing(store: Store) -> None:
    assert store.append("s", []) == []
    assert store.messages("s") == []


def test_every_field_survives_a_round_trip(store: Store) -> None:
    call = {"id": "c1", "name": "weather", "args": {"city": "Zürich", "days": [1, 2]}}
    originals = [
        Message.create(
            "user",
            [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "x.png"}}],
            name="ana",
            metadata={"lang": "en", "nested": {"k": [1, 2.5, None, True]}},
            timestamp=1_700_000_000.123456,
        ),
        Message.create("assistant", "", tool_calls=[call], status="running", timestamp=1_700_000_001.5),
        Message.create("tool", "sunny, 23°C — 晴", tool_call_id="c1"),
    ]
    originals = [dataclasses.replace(m, token_count=i + 7) for i, m in enumerate(originals)]
    stored = store.append("s", originals)
    read = store.messages("s")
    assert read == stored
    for original, back in zip(originals, read, strict=True):
        assert dataclasses.replace(back, seq=None) == original


def test_messages_respect_after_and_through_seq(store: Store) -> None:
    fill(store, "s", 6)
    assert seqs(store.messages("s", after_seq=2)) == [3, 4, 5, 6]
    assert seqs(store.messages("s", after_seq=2, through_seq=4)) == [3, 4]
    assert seqs(store.messages("s", through_seq=1)) == [1]
    assert store.messages("s", after_seq=6) == []
    assert store.messages("s", after_seq=4, through_seq=4) == []


def test_messages_of_an_unknown_session_are_empty(store: Store) -> None:
    assert store.messages("nobody") == []
    assert store.tail("nobody", 5) == []
    assert store.get("nobody", [1, 2]) == []


def test_tail_returns_the_newest_messages_oldest_first(store: Store) -> None:
    fill(store, "s", 10)
    assert texts(store.tail("s", 3)) == ["m8", "m9", "m10"]
    assert seqs(store.tail("s", 50)) == list(range(1, 11))


def test_tail_before_seq_pages_backwards(store: Store) -> None:
    fill(store, "s", 10)
    assert seqs(store.tail("s", 3, before_seq=8)) == [5, 6, 7]
    assert seqs(store.tail("s", 3, before_seq=2)) == [1]
    assert store.tail("s", 3, before_seq=1) == []


def test_tail_with_a_non_positive_limit_is_empty(store: Store) -> None:
    fill(store, "s", 3)
    assert store.tail("s", 0) == []
    assert store.tail("s", -1) == []


def test_get_returns_requested_seqs_in_order_and_skips_missing(store: Store) -> None:
    fill(store, "s", 5)
    assert seqs(store.get("s", [4, 2, 99, 2, 0])) == [2, 4]
    assert store.get("s", []) == []


# -- malformed messages ----------------------------------------------------------------
# `Message.create` validates, but the dataclass constructor and `dataclasses.replace` do not:
# every store checks each message again (`validate_messages`) before it writes anything.

GOOD = Message.create("user", "hello")
CALL = {"id": "c1", "name": "weather", "args": {"city": "Paris"}}

MALFORMED: dict[str, Message] = {
    "dict content": dataclasses.replace(GOOD, content={"a": "b"}),  # type: ignore[arg-type]
    "int content": dataclasses.replace(GOOD, content=42),  # type: ignore[arg-type]
    "None content": dataclasses.replace(GOOD, content=None),  # type: ignore[arg-type]
    "bytes part": dataclasses.replace(GOOD, content=[b"raw"]),  # type: ignore[list-item]
    "role as a str": dataclasses.replace(GOOD, role="user"),  # type: ignore[arg-type]
    "status as a str": dataclasses.replace(GOOD, status="completed"),  # type: ignore[arg-type]
    "tool message without tool_call_id": Message(role=Role.TOOL, content="sunny"),
    "tool message with empty tool_call_id": Message(role=Role.TOOL, content="sunny", tool_call_id=""),
    "tool calls on a user message": dataclasses.replace(GOOD, tool_calls=(CALL,)),
    "tool call without a name": Message(
        role=Role.ASSISTANT, content="", tool_calls=({"id": "c", "args": {}},)
    ),
    "tool call args as a JSON string": Message(
        role=Role.ASSISTANT, content="", tool_calls=({"id": "c", "name": "f", "args": "{}"},)
    ),
    "metadata as a list": dataclasses.replace(GOOD, metadata=[("k", "v")]),  # type: ignore[arg-type]
    "metadata with an int key": dataclasses.replace(GOOD, metadata={1: "v"}),  # type: ignore[dict-item]
    "NaN in metadata": dataclasses.replace(GOOD, metadata={"score": float("nan")}),
    "an object in metadata": dataclasses.replace(GOOD, metadata={"when": object()}),
    "lone surrogate in name": dataclasses.replace(GOOD, name="bad \ud800"),
    "empty name": dataclasses.replace(GOOD, name=""),
    "NaN timestamp": dataclasses.replace(GOOD, timestamp=float("nan")),
    "negative token count": dataclasses.replace(GOOD, token_count=-1),
}


@pytest.mark.parametrize("bad", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_message_built_without_create_is_refused_and_nothing_changes(
    store: Store, bad: Message
) -> None:
    store.append("s", [Message.create("user", "before")])
    with pytest.raises(InvalidMessageError, match="nothing was stored"):
        store.append("s", [Message.create("user", "fine"), bad])
    assert texts(store.messages("s")) == ["before"]
    assert store.stats("s").message_count == 1
    assert seqs(store.append("s", [Message.create("user", "after")])) == [2]


def test_dict_content_never_reaches_the_log_so_later_reads_still_work(store: Store) -> None:
    with pytest.raises(InvalidMessageError, match="content of a user message must be a str or a list"):
        store.append("s", [dataclasses.replace(GOOD, content={"a": "b"})])  # type: ignore[arg-type]
    store.append("s", [Message.create("user", "next")])
    assert texts(store.messages("s")) == ["next"]
    assert texts(store.tail("s", 5)) == ["next"]


def test_a_refused_first_append_leaves_no_session_behind(store: Store) -> None:
    with pytest.raises(InvalidMessageError, match="nothing was stored"):
        store.append("s", [Message.create("user", "fine"), MALFORMED["role as a str"]], user_id="u")
    assert store.sessions() == []
    assert store.sessions(user_id="u") == []
    assert store.stats("s").message_count == 0


def test_append_takes_a_list_not_a_single_message(store: Store) -> None:
    with pytest.raises(InvalidMessageError, match="list of Message"):
        store.append("s", GOOD)  # type: ignore[arg-type]
    assert store.messages("s") == []


def test_a_message_built_directly_and_well_formed_is_stored(store: Store) -> None:
    direct = Message(role=Role.ASSISTANT, content="", tool_calls=(CALL,), status=TurnStatus.COMPLETED)
    [stored] = store.append("s", [direct])
    assert store.messages("s") == [stored]
    assert stored.tool_calls == (CALL,)


@pytest.mark.parametrize("role", ["user", "system", "assistant"])
def test_empty_text_is_stored_for_every_role(store: Store, role: str) -> None:
    store.append("s", [Message.create(role, "")])
    assert [m.content for m in store.messages("s")] == [""]


# -- status and stats --------------------------------------------------------------------


def test_set_status_changes_only_that_message(store: Store) -> None:
    store.append("s", [user("q"), dataclasses.replace(assistant("a"), status=TurnStatus.RUNNING)])
    updated = store.set_status("s", 2, TurnStatus.FAILED)
    assert updated.status is TurnStatus.FAILED
    assert updated.text == "a"
    assert [m.status for m in store.messages("s")] == [TurnStatus.COMPLETED, TurnStatus.FAILED]


def test_set_status_of_an_unknown_seq_raises(store: Store) -> None:
    fill(store, "s", 1)
    with pytest.raises(InvalidMessageError, match="seq=5"):
        store.set_status("s", 5, TurnStatus.CANCELLED)


@pytest.mark.parametrize("ids", [[None], ["c1", "c1"]], ids=["no id", "one id twice"])
def test_tool_calls_no_chat_api_could_answer_are_refused_and_nothing_stored(
    store: Store, ids: list[str | None]
) -> None:
    calls = [{"id": call_id, "name": "f", "args": {}} for call_id in ids]
    with pytest.raises(InvalidMessageError, match="nothing was stored"):
        store.append("s", [user("Q"), Message.create("assistant", "", tool_calls=calls)])
    assert store.messages("s") == []


def test_the_question_an_answer_belongs_to_is_kept(store: Store) -> None:
    store.append("s", [user("Q1"), user("Q2")])
    answer = dataclasses.replace(Message.create("assistant", "A1", reply_to_seq=1), token_count=2)
    (stored,) = store.append("s", [answer, assistant("plain")])[:1]
    assert stored.reply_to_seq == 1
    assert [m.reply_to_seq for m in store.messages("s")] == [None, None, 1, None]
    assert [m.reply_to_seq for m in store.tail("s", 2)] == [1, None]
    assert store.get("s", [3])[0].reply_to_seq == 1
    assert store.set_status("s", 3, TurnStatus.FAILED).reply_to_seq == 1


def test_stats_count_messages_tokens_and_user(store: Store) -> None:
    store.append("s", [user("a", tokens=5), assistant("b", tokens=7)], user_id="ana")
    store.append("s", [user("c")])
    stats = store.stats("s")
    assert (stats.message_count, stats.last_seq, stats.total_tokens) == (3, 3, 12)
    assert stats.user_id == "ana"
    assert stats.created_at is not None and stats.updated_at is not None
    assert stats.created_at <= stats.updated_at


def test_stats_of_an_unknown_session_are_zero(store: Store) -> None:
    stats = store.stats("nobody")
    assert (stats.message_count, stats.last_seq, stats.total_tokens, stats.user_id) == (0, 0, 0, None)


def test_the_first_user_of_a_session_owns_it(store: Store) -> None:
    store.append("s", [user("a")])
    store.append("s", [user("b")], user_id="ana")
    store.append("s", [user("c")], user_id="ana")
    assert store.stats("s").user_id == "ana"
    assert store.sessions(user_id="ana") == ["s"]


def test_an_append_as_another_user_is_refused_and_stores_nothing(store: Store) -> None:
    store.append("s", [user("ana's secret")], user_id="ana")
    with pytest.raises(SessionOwnerError):
        store.append("s", [user("bob's question")], user_id="bob")
    assert [m.text for m in store.messages("s")] == ["ana's secret"]
    assert store.stats("s").user_id == "ana"
    assert store.sessions(user_id="bob") == []


def test_the_refusal_names_the_session_and_the_refused_user_not_the_owner(store: Store) -> None:
    store.append("shared-1", [user("a")], user_id="owner-ana")
    with pytest.raises(SessionOwnerError) as refused:
        store.append("shared-1", [user("b")], user_id="bob")
    assert "'shared-1'" in str(refused.value) and "'bob'" in str(refused.value)
    assert "owner-ana" not in str(refused.value)
    assert refused.value.owner_user_id == "owner-ana"


@pytest.mark.parametrize("other", HOSTILE_IDS[:8])
def test_every_other_user_id_is_refused(store: Store, other: str) -> None:
    store.append("s", [user("a")], user_id="ana")
    with pytest.raises(SessionOwnerError):
        store.append("s", [user("b")], user_id=other)


def test_an_append_without_a_user_is_no_claim_on_an_owned_session(store: Store) -> None:
    store.append("s", [user("a")], user_id="ana")
    store.append("s", [assistant("b")])
    assert store.stats("s").user_id == "ana"
    assert store.forget_user("ana") == ["s"]
    assert store.messages("s") == []


def test_forget_user_deletes_what_the_user_wrote_and_nothing_of_another_user(store: Store) -> None:
    store.append("1", [user("ana's")], user_id="ana")
    with pytest.raises(SessionOwnerError):
        store.append("1", [user("bob's")], user_id="bob")
    store.append("2", [user("bob's")], user_id="bob")
    assert store.forget_user("bob") == ["2"]
    assert [m.text for m in store.messages("1")] == ["ana's"]
    assert store.messages("2") == []


# -- state records -------------------------------------------------------------------------


def test_put_state_with_expected_version_zero_creates_only_once(store: Store) -> None:
    first = store.put_state("s", "summary", "v1", expected_version=0)
    assert first is not None and first.version == 1
    assert store.put_state("s", "summary", "other", expected_version=0) is None
    record = store.get_state("s", "summary")
    assert record is not None and (record.value, record.version) == ("v1", 1)


def test_put_state_with_a_stale_version_is_refused(store: Store) -> None:
    store.put_state("s", "summary", "v1")
    store.put_state("s", "summary", "v2", expected_version=1)
    assert store.put_state("s", "summary", "late", expected_version=1) is None
    record = store.get_state("s", "summary")
    assert record is not None and (record.value, record.version) == ("v2", 2)


def test_put_state_without_a_version_overwrites(store: Store) -> None:
    store.put_state("s", "facts", "{}")
    record = store.put_state("s", "facts", '{"city": "Oslo"}')
    assert record is not None and record.version == 2
    assert store.get_state("s", "facts") == record


def test_missing_state_is_none(store: Store) -> None:
    assert store.get_state("s", "summary") is None


def test_delete_state_removes_only_that_key(store: Store) -> None:
    store.put_state("s", "summary", "x")
    store.put_state("s", "facts", "y")
    store.delete_state("s", "summary")
    store.delete_state("s", "never-written")
    assert store.get_state("s", "summary") is None
    facts = store.get_state("s", "facts")
    assert facts is not None and facts.value == "y"


def test_state_keys_that_look_like_separators_do_not_collide(store: Store) -> None:
    keys = ["a", "v:a", "n:a", ":a", "a:", "*", "v:"]
    for key in keys:
        store.put_state("s", key, f"value of {key}")
    for key in keys:
        record = store.get_state("s", key)
        assert record is not None and (record.value, record.version) == (f"value of {key}", 1)


def test_a_session_read_whole_is_its_stats_and_the_records_it_has(store: Store) -> None:
    store.append("s", [user("a", 3), assistant("b", 4)], user_id="ana")
    store.put_state("s", "summary", "we met")
    store.put_state("s", "facts", '{"name": "多多"}')
    store.put_state("s", "facts", '{"name": "Rex"}')
    store.put_state("other", "missing", "not this session's")
    snapshot = read_session(store, "s", ["summary", "facts", "missing"])
    assert snapshot.stats == store.stats("s")
    assert (snapshot.stats.message_count, snapshot.stats.total_tokens, snapshot.stats.user_id) == (
        2,
        7,
        "ana",
    )
    assert snapshot.states == {
        "summary": store.get_state("s", "summary"),
        "facts": store.get_state("s", "facts"),
    }
    assert snapshot.states["facts"].version == 2
    assert read_session(store, "s", []).states == {}


def test_a_session_never_written_reads_as_empty(store: Store) -> None:
    snapshot = read_session(store, "nobody", ["summary", "facts"])
    assert snapshot.stats == store.stats("nobody")
    assert (snapshot.stats.message_count, snapshot.stats.last_seq) == (0, 0)
    assert snapshot.states == {}


def test_a_session_read_whole_keeps_hostile_ids_and_keys_apart(store: Store) -> None:
    ids = HOSTILE_IDS[::3]
    keys = ["a", "v:a", "n:a", ":a", "*", "summary"]
    for number, session_id in enumerate(ids):
        store.append(session_id, [user(f"m{number}")] * (number % 3 + 1))
        for key in keys[: number % len(keys) + 1]:
            store.put_state(session_id, key, f"{key} of {session_id}")
    for number, session_id in enumerate(ids):
        snapshot = read_session(store, session_id, keys)
        assert snapshot.stats == store.stats(session_id)
        assert snapshot.stats.message_count == number % 3 + 1
        assert snapshot.states == {
            key: record for key in keys if (record := store.get_state(session_id, key)) is not None
        }
        assert all(record.value.endswith(f" of {session_id}") for record in snapshot.states.values())


def test_state_is_per_session(store: Store) -> None:
    store.put_state("s1", "summary", "one")
    assert store.get_state("s2", "summary") is None


def test_state_values_keep_unicode_and_json_text(store: Store) -> None:
    value = '{"name": "多多", "quote": "\\"x\\"", "emoji": "🐶"}'
    store.put_state("s", "facts", value)
    record = store.get_state("s", "facts")
    assert record is not None and record.value == value


def test_put_state_requiring_a_seq_is_written_once_the_session_has_reached_it(store: Store) -> None:
    fill(store, "s", 3)
    record = store.put_state("s", "summary", "through 3", expected_version=0, requires_seq=3)
    assert record is not None and record.version == 1
    assert store.put_state("s", "summary", "through 1", requires_seq=1) is not None
    stored = store.get_state("s", "summary")
    assert stored is not None and (stored.value, stored.version) == ("through 1", 2)


def test_put_state_requiring_a_seq_beyond_the_last_one_is_refused(store: Store) -> None:
    fill(store, "s", 2)
    assert store.put_state("s", "summary", "through 3", requires_seq=3) is None
    assert store.get_state("s", "summary") is None


def test_put_state_requiring_a_seq_is_refused_for_a_session_that_does_not_exist(store: Store) -> None:
    assert store.put_state("nobody", "summary", "x", expected_version=0, requires_seq=0) is None
    assert store.put_state("nobody", "facts", "x", requires_seq=1) is None
    assert store.get_state("nobody", "summary") is None and store.get_state("nobody", "facts") is None
    assert store.sessions() == []


def test_state_planned_before_a_clear_is_not_written_back_after_it(store: Store) -> None:
    store.append("s", [user("my secret"), assistant("noted")], user_id="ana")
    planned = store.get_state("s", "summary")  # a summarizer plans from version 0 up to seq 2
    store.clear("s")
    late = store.put_state(
        "s", "summary", "my secret", expected_version=planned.version if planned else 0, requires_seq=2
    )
    assert late is None
    assert store.get_state("s", "summary") is None
    assert store.sessions() == [] and store.sessions(user_id="ana") == []
    assert store.stats("s").message_count == 0


def test_state_planned_before_forget_user_is_not_written_back_after_it(store: Store) -> None:
    fill(store, "s", 2)
    store.append("s", [user("mine")], user_id="ana")
    store.put_state("s", "facts", "v1", requires_seq=3)
    store.forget_user("ana")
    assert store.put_state("s", "facts", "v2", expected_version=1, requires_seq=3) is None
    assert store.put_state("s", "facts", "v2", expected_version=0, requires_seq=3) is None
    assert store.get_state("s", "facts") is None
    assert store.sessions() == []


def test_put_state_requiring_a_seq_still_checks_the_version(store: Store) -> None:
    fill(store, "s", 2)
    store.put_state("s", "summary", "v1")
    assert store.put_state("s", "summary", "stale", expected_version=0, requires_seq=2) is None
    record = store.get_state("s", "summary")
    assert record is not None and record.value == "v1"


def test_a_state_only_session_has_reached_seq_zero_only(store: Store) -> None:
    store.put_state("s", "summary", "x")
    assert store.put_state("s", "summary", "y", requires_seq=0) is not None
    assert store.put_state("s", "summary", "z", requires_seq=1) is None
    record = store.get_state("s", "summary")
    assert record is not None and record.value == "y"


# -- listing, deleting, retention -----------------------------------------------------------


def test_clear_removes_log_state_and_listing(store: Store) -> None:
    store.append("s", [user("a")], user_id="ana")
    store.put_state("s", "summary", "x")
    store.clear("s")
    assert store.messages("s") == []
    assert store.get_state("s", "summary") is None
    assert store.stats("s").message_count == 0
    assert store.sessions() == []
    assert store.sessions(user_id="ana") == []


def test_clear_leaves_other_sessions_alone(store: Store) -> None:
    fill(store, "s1", 2)
    fill(store, "s2", 3)
    store.clear("s1")
    assert seqs(store.messages("s2")) == [1, 2, 3]


def test_a_cleared_session_starts_again_at_seq_one(store: Store) -> None:
    fill(store, "s", 3)
    store.clear("s")
    assert seqs(store.append("s", [user("again")])) == [1]


def test_sessions_lists_all_or_one_users_sessions(store: Store) -> None:
    store.append("s1", [user("a")], user_id="ana")
    store.append("s2", [user("b")], user_id="bob")
    store.append("s3", [user("c")], user_id="ana")
    store.append("s4", [user("d")])
    assert store.sessions() == ["s1", "s2", "s3", "s4"]
    assert store.sessions(user_id="ana") == ["s1", "s3"]
    assert store.sessions(user_id="nobody") == []


def test_a_state_only_session_is_listed(store: Store) -> None:
    store.put_state("s", "summary", "x")
    assert store.sessions() == ["s"]


def test_forget_user_deletes_that_users_sessions_and_returns_their_ids(store: Store) -> None:
    store.append("s1", [user("a")], user_id="ana")
    store.put_state("s1", "facts", '{"dog": "Duoduo"}')
    store.append("s2", [user("b")], user_id="bob")
    store.append("s3", [user("c")], user_id="ana")
    assert store.forget_user("ana") == ["s1", "s3"]
    assert store.messages("s1") == [] and store.messages("s3") == []
    assert store.get_state("s1", "facts") is None
    assert store.sessions() == ["s2"]
    assert store.sessions(user_id="ana") == []
    assert texts(store.messages("s2")) == ["b"]


def test_forget_user_of_an_unknown_user_deletes_nothing(store: Store) -> None:
    store.append("s1", [user("a")], user_id="ana")
    assert store.forget_user("nobody") == []
    assert store.sessions() == ["s1"]


def test_forget_user_does_not_touch_similar_user_ids(store: Store) -> None:
    similar = ["a", "a*", "a?", "a:b", "a:b:sessions", "*", "a%2A"]
    for user_id in similar:
        store.append(f"session of {user_id}", [user("hello")], user_id=user_id)
    assert store.forget_user("a") == ["session of a"]
    assert store.forget_user("*") == ["session of *"]
    assert store.sessions() == sorted(f"session of {u}" for u in similar if u not in ("a", "*"))


def test_a_session_forgotten_with_its_user_can_be_used_again(store: Store) -> None:
    store.append("s", [user("old")], user_id="ana")
    store.forget_user("ana")
    store.append("s", [user("new")], user_id="ana")
    assert texts(store.messages("s")) == ["new"]
    assert store.sessions(user_id="ana") == ["s"]


def test_expire_idle_deletes_only_sessions_idle_longer_than_the_age(store: Store) -> None:
    store.append("old", [user("a")], user_id="ana")
    store.put_state("old", "summary", "x")
    time.sleep(0.3)
    boundary = time.time()
    time.sleep(0.3)
    store.append("fresh", [user("b")])
    assert store.expire_idle(time.time() - boundary) == ["old"]
    assert store.sessions() == ["fresh"]
    assert store.messages("old") == [] and store.get_state("old", "summary") is None
    assert store.sessions(user_id="ana") == []


def test_a_state_write_counts_as_activity(store: Store) -> None:
    store.append("s", [user("a")])
    time.sleep(0.3)
    boundary = time.time()
    time.sleep(0.3)
    store.put_state("s", "summary", "x")
    assert store.expire_idle(time.time() - boundary) == []
    assert store.sessions() == ["s"]


def test_expire_idle_with_an_age_longer_than_any_session_deletes_nothing(store: Store) -> None:
    fill(store, "s", 2)
    assert store.expire_idle(3600) == []
    assert store.expire_idle(float("inf")) == []
    assert seqs(store.messages("s")) == [1, 2]


@pytest.mark.parametrize("age", [-1, float("nan"), "10"])
def test_expire_idle_rejects_an_invalid_age(store: Store, age: object) -> None:
    with pytest.raises(ConfigError, match="older_than_seconds"):
        store.expire_idle(age)  # type: ignore[arg-type]


# -- hostile ids ------------------------------------------------------------------------------


def test_hostile_session_ids_never_share_data(store: Store) -> None:
    for index, session_id in enumerate(HOSTILE_IDS):
        store.append(session_id, [user(f"message {index}")], user_id=session_id)
        store.put_state(session_id, "summary", f"summary {index}")
    for index, session_id in enumerate(HOSTILE_IDS):
        assert texts(store.messages(session_id)) == [f"message {index}"]
        assert texts(store.tail(session_id, 10)) == [f"message {index}"]
        record = store.get_state(session_id, "summary")
        assert record is not None and record.value == f"summary {index}"
        assert store.stats(session_id).message_count == 1
        assert store.sessions(user_id=session_id) == [session_id]
    assert store.sessions() == sorted(HOSTILE_IDS)


@pytest.mark.parametrize("unusable", UNUSABLE_IDS, ids=["nul", "10k-chars"])
def test_an_unusable_id_is_kept_apart_or_refused_with_invalid_session_id_error(
    store: Store, unusable: str
) -> None:
    store.append("a", [user("the plain one")])
    try:
        store.append(unusable, [user("the unusable one")], user_id=unusable)
    except InvalidSessionIdError as exc:
        assert "session_id" in str(exc)
        assert store.sessions() == ["a"]
    else:
        assert texts(store.messages(unusable)) == ["the unusable one"]
        assert store.sessions(user_id=unusable) == [unusable]
        store.clear(unusable)
    assert texts(store.messages("a")) == ["the plain one"]


def test_sql_and_format_looking_text_is_stored_and_read_back_exactly(store: Store) -> None:
    originals = [
        Message.create("user", text, name=f"n{i}{text[:8]}", metadata={text: text})
        for i, text in enumerate(SQL_LOOKING_TEXTS)
    ]
    store.append(SQL_LOOKING_TEXTS[0], originals, user_id=SQL_LOOKING_TEXTS[1])
    for key in SQL_LOOKING_TEXTS:
        store.put_state(SQL_LOOKING_TEXTS[0], key, key)
    back = store.messages(SQL_LOOKING_TEXTS[0])
    assert [dataclasses.replace(m, seq=None) for m in back] == originals
    for key in SQL_LOOKING_TEXTS:
        record = store.get_state(SQL_LOOKING_TEXTS[0], key)
        assert record is not None and record.value == key
    assert store.sessions(user_id=SQL_LOOKING_TEXTS[1]) == [SQL_LOOKING_TEXTS[0]]
    assert store.forget_user(SQL_LOOKING_TEXTS[1]) == [SQL_LOOKING_TEXTS[0]]
    assert store.sessions() == []


def test_clearing_a_hostile_id_leaves_lookalikes_alone(store: Store) -> None:
    for session_id in HOSTILE_IDS:
        store.append(session_id, [user(f"in {session_id}")])
    doomed = ("a", "*", "a:b", "{a}", "'", "%s")
    for session_id in doomed:
        store.clear(session_id)
    survivors = [s for s in HOSTILE_IDS if s not in doomed]
    assert store.sessions() == sorted(survivors)
    for session_id in survivors:
        assert texts(store.messages(session_id)) == [f"in {session_id}"]


# -- persistence and damage ---------------------------------------------------------------------


def test_a_reopened_store_sees_every_session(persistent_backend: Backend) -> None:
    first = persistent_backend.open()
    first.append("s1", [user("a", tokens=3), assistant("b", tokens=4)], user_id="ana")
    first.put_state("s1", "summary", "so far")
    first.append("s2", [user("c")])
    first.close()
    second = persistent_backend.open()
    try:
        assert texts(second.messages("s1")) == ["a", "b"]
        assert second.stats("s1").total_tokens == 7
        assert second.sessions(user_id="ana") == ["s1"]
        record = second.get_state("s1", "summary")
        assert record is not None and record.value == "so far"
        assert seqs(second.append("s2", [user("d")])) == [2]
    finally:
        second.close()


@pytest.mark.parametrize("damage", ["{broken", "null", ""])
def test_a_malformed_stored_record_raises_store_error_and_spares_other_sessions(
    persistent_backend: Backend, damage: str
) -> None:
    store = persistent_backend.open()
    try:
        fill(store, "bad", 3)
        fill(store, "good", 3)
        persistent_backend.corrupt("bad", 2, damage)
        with pytest.raises(StoreError, match=r"seq=2 of session 'bad' is malformed"):
            store.messages("bad")
        with pytest.raises(StoreError, match="seq=2"):
            store.get("bad", [2])
        assert texts(store.tail("bad", 1)) == ["m3"]
        assert texts(store.messages("good")) == ["m1", "m2", "m3"]
        assert store.stats("bad").message_count == 3
    finally:
        store.close()


# -- log generations ---------------------------------------------------------------------


def generation(store: Store, session_id: str = "s") -> str | None:
    return store.stats(session_id).generation


def test_a_new_log_has_a_generation(store: Store) -> None:
    fill(store, "s", 1)
    assert generation(store)


def test_a_session_with_no_log_has_no_generation(store: Store) -> None:
    assert generation(store, "never-written") is None


def test_appending_and_status_changes_keep_the_generation(store: Store) -> None:
    fill(store, "s", 2)
    before = generation(store)
    fill(store, "s", 1)
    store.set_status("s", 1, TurnStatus.FAILED)
    store.put_state("s", "k", "v")
    assert generation(store) == before


def test_two_sessions_have_different_generations(store: Store) -> None:
    fill(store, "a", 1)
    fill(store, "b", 1)
    assert generation(store, "a") != generation(store, "b")


def test_a_cleared_session_written_again_has_a_new_generation(store: Store) -> None:
    fill(store, "s", 2)
    before = generation(store)
    store.clear("s")
    fill(store, "s", 2)
    assert generation(store) not in (None, before)


def test_a_session_forgotten_with_its_user_and_written_again_has_a_new_generation(store: Store) -> None:
    store.append("s", [user("card 4111")], user_id="ana")
    before = generation(store)
    store.forget_user("ana")
    store.append("s", [user("hello")], user_id="bob")
    assert generation(store) not in (None, before)


def test_deleting_messages_changes_the_generation(store: Store) -> None:
    fill(store, "s", 3)
    before = generation(store)
    store.delete_messages("s", [2])
    assert generation(store) not in (None, before)


def test_replacing_a_message_changes_the_generation(store: Store) -> None:
    fill(store, "s", 3)
    before = generation(store)
    store.replace_message("s", 2, user("edited"))
    assert generation(store) not in (None, before)


def test_a_generation_is_seen_by_every_store_on_the_same_data(persistent_backend: Backend) -> None:
    first, second = persistent_backend.open(), persistent_backend.open()
    fill(first, "s", 1)
    assert generation(second) == generation(first)
    second.delete_messages("s", [1])
    assert generation(first) == generation(second)
    first.close()
    second.close()


# -- deleting and replacing single messages ------------------------------------------------


def test_delete_messages_removes_only_those_and_returns_them(store: Store) -> None:
    fill(store, "s", 5)
    deleted = store.delete_messages("s", [4, 2])
    assert seqs(deleted) == [2, 4]
    assert texts(deleted) == ["m2", "m4"]
    assert texts(store.messages("s")) == ["m1", "m3", "m5"]
    assert store.get("s", [1, 2, 3, 4]) == store.messages("s", through_seq=3)


def test_delete_messages_updates_counts_and_tokens_but_never_reuses_a_seq(store: Store) -> None:
    store.append("s", [user("a", tokens=5), assistant("b", tokens=7), user("c", tokens=11)])
    store.delete_messages("s", [3])
    stats = store.stats("s")
    assert (stats.message_count, stats.last_seq, stats.total_tokens) == (2, 3, 12)
    assert seqs(store.append("s", [user("d")])) == [4]


def test_deleting_an_unknown_seq_deletes_nothing_and_names_it(store: Store) -> None:
    fill(store, "s", 3)
    with pytest.raises(InvalidMessageError, match="no message with seq 7"):
        store.delete_messages("s", [1, 7])
    assert texts(store.messages("s")) == ["m1", "m2", "m3"]
    assert store.stats("s").message_count == 3


def test_deleting_a_seq_twice_raises_the_second_time(store: Store) -> None:
    fill(store, "s", 2)
    store.delete_messages("s", [1])
    with pytest.raises(InvalidMessageError, match="seq 1"):
        store.delete_messages("s", [1])


def test_deleting_from_an_unknown_session_raises(store: Store) -> None:
    with pytest.raises(InvalidMessageError, match="no message with seq 1"):
        store.delete_messages("nobody", [1])
    assert store.sessions() == []


def test_deleting_no_seqs_changes_nothing(store: Store) -> None:
    fill(store, "s", 2)
    before = generation(store)
    assert store.delete_messages("s", []) == []
    assert generation(store) == before


@pytest.mark.parametrize("bad", [[0], [-1], [True], ["1"], [1.0], "1", 1])
def test_delete_messages_refuses_what_is_not_a_list_of_seqs(store: Store, bad: object) -> None:
    fill(store, "s", 2)
    with pytest.raises(InvalidMessageError, match="seq"):
        store.delete_messages("s", bad)  # type: ignore[arg-type]
    assert store.stats("s").message_count == 2


@pytest.mark.parametrize("huge", [2**53, 2**63, 2**64 + 1])
def test_a_seq_past_the_largest_is_refused_by_every_call_that_names_one(store: Store, huge: int) -> None:
    fill(store, "s", 2)
    for call in (
        lambda: store.delete_messages("s", [1, huge]),
        lambda: store.replace_message("s", huge, user("x")),
        lambda: store.set_status("s", huge, TurnStatus.FAILED),
    ):
        with pytest.raises(InvalidMessageError, match=f"up to {MAX_SEQ}"):
            call()
    assert texts(store.messages("s")) == ["m1", "m2"]


@pytest.mark.parametrize("huge", [2**53, 2**63, 2**64 + 1])
def test_reads_treat_a_seq_past_the_largest_as_absent_or_unbounded(store: Store, huge: int) -> None:
    fill(store, "s", 3)
    assert seqs(store.get("s", [2, huge, -huge])) == [2]
    assert seqs(store.messages("s", after_seq=1, through_seq=huge)) == [2, 3]
    assert store.messages("s", after_seq=huge) == []
    assert seqs(store.messages("s", after_seq=-huge)) == [1, 2, 3]
    assert seqs(store.tail("s", 2, before_seq=huge)) == [2, 3]
    assert store.tail("s", 2, before_seq=-huge) == []


def test_the_largest_seq_is_accepted(store: Store) -> None:
    fill(store, "s", 1)
    with pytest.raises(InvalidMessageError, match=f"no message with seq {MAX_SEQ}"):
        store.delete_messages("s", [MAX_SEQ])
    assert store.get("s", [MAX_SEQ]) == []


def test_tail_skips_deleted_messages_and_still_fills_its_limit(store: Store) -> None:
    fill(store, "s", 10)
    store.delete_messages("s", [7, 8, 9])
    assert texts(store.tail("s", 3)) == ["m5", "m6", "m10"]
    assert texts(store.tail("s", 2, before_seq=9)) == ["m5", "m6"]
    assert texts(store.tail("s", 50)) == ["m1", "m2", "m3", "m4", "m5", "m6", "m10"]


def test_tail_of_a_log_whose_newest_messages_were_all_deleted(store: Store) -> None:
    fill(store, "s", 40)
    store.delete_messages("s", list(range(3, 41)))
    assert texts(store.tail("s", 5)) == ["m1", "m2"]
    store.delete_messages("s", [1, 2])
    assert store.tail("s", 5) == []


def test_replace_message_keeps_the_seq_and_changes_the_rest(store: Store) -> None:
    store.append("s", [user("q", tokens=3), assistant("my card is 4111", tokens=9), user("next", tokens=2)])
    stored = store.replace_message("s", 2, assistant("my card is [removed]", tokens=6))
    assert stored.seq == 2 and stored.text == "my card is [removed]"
    assert store.messages("s")[1] == stored
    assert texts(store.messages("s")) == ["q", "my card is [removed]", "next"]
    stats = store.stats("s")
    assert (stats.message_count, stats.last_seq, stats.total_tokens) == (3, 3, 11)


def test_replacing_an_unknown_seq_raises_and_changes_nothing(store: Store) -> None:
    fill(store, "s", 2)
    with pytest.raises(InvalidMessageError, match="no message with seq 5"):
        store.replace_message("s", 5, user("x"))
    assert texts(store.messages("s")) == ["m1", "m2"]


@pytest.mark.parametrize("bad", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_replacement_is_refused_like_an_append(store: Store, bad: Message) -> None:
    fill(store, "s", 2)
    before = generation(store)
    with pytest.raises(InvalidMessageError):
        store.replace_message("s", 1, bad)
    assert texts(store.messages("s")) == ["m1", "m2"]
    assert generation(store) == before

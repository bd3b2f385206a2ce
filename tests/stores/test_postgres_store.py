"""What only the PostgreSQL stores promise: construction, a pool of your own, the schema, the async twin."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
import psycopg_pool
import pytest
from postgres_server import drop_schema, new_schema
from psycopg.conninfo import make_conninfo

from convmem import (
    AsyncPostgresStore,
    ConfigError,
    ConversationMemory,
    Message,
    PostgresStore,
    StoreError,
    TurnStatus,
)
from convmem._errors import SessionOwnerError

pytestmark = pytest.mark.postgres


def user(text: str) -> Message:
    return Message.create("user", text)


def test_the_url_may_be_given_by_position_or_keyword(postgres_url: str, schema: str) -> None:
    with PostgresStore(postgres_url, schema=schema) as first:
        first.append("s", [user("one")])
    with PostgresStore(url=postgres_url, schema=schema) as second:
        assert [m.text for m in second.messages("s")] == ["one"]


def test_a_pool_passed_in_is_used_and_left_open(postgres_url: str, schema: str) -> None:
    with psycopg_pool.ConnectionPool(postgres_url, min_size=1, max_size=2, open=True) as pool:
        store = PostgresStore(pool=pool, schema=schema)
        store.append("s", [user("through your pool")], user_id="ana")
        assert store.sessions(user_id="ana") == ["s"]
        store.close()
        with pool.connection() as conn:
            rows = conn.execute(f'SELECT count(*) FROM "{schema}".messages').fetchall()
        assert rows == [(1,)]


# -- stores dropped without close ----------------------------------------------------------------


def watchdog_threads() -> int:
    return sum(thread.name == "convmem-postgres-watchdog" for thread in threading.enumerate())


def settles(condition: Callable[[], bool], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_stores_over_a_shared_pool_dropped_without_close_leave_no_watchdog_threads(
    postgres_url: str, schema: str
) -> None:
    before = watchdog_threads()
    with psycopg_pool.ConnectionPool(postgres_url, min_size=1, max_size=2, open=True) as pool:
        for request in range(20):  # a store per request, as a server may make them
            store = PostgresStore(pool=pool, schema=schema)
            store.append(f"s{request}", [user("hi")])
            del store
            gc.collect()
        assert settles(lambda: watchdog_threads() <= before), (
            f"{watchdog_threads() - before} watchdog threads outlived their stores"
        )
        assert len(PostgresStore(pool=pool, schema=schema).sessions()) == 20  # the pool is still open


def test_stores_with_their_own_pool_dropped_without_close_leave_no_connections_or_threads(
    postgres_url: str, schema: str
) -> None:
    application = f"fixpg_{uuid.uuid4().hex[:12]}"

    def backends() -> int:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            found = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [application]
            ).fetchone()
        assert found is not None
        return int(found[0])

    url = make_conninfo(postgres_url, application_name=application)
    stores = [PostgresStore(url, schema=schema) for _ in range(5)]
    for request, store in enumerate(stores):
        store.append(f"s{request}", [user("hi")])
    assert backends() >= 5  # each store's pool keeps a connection
    del stores, store
    gc.collect()
    assert settles(lambda: backends() == 0), f"{backends()} connections outlived their stores"
    assert settles(lambda: watchdog_threads() == 0), "a watchdog thread outlived its store"


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        ({}, "exactly one of url"),
        ({"url": "postgresql://x/y", "pool": object()}, "exactly one of url"),
        ({"url": "postgresql://x/y", "schema": "Bad-Name"}, "schema"),
        ({"url": "postgresql://x/y", "schema": "a" * 64}, "schema"),
        ({"url": "postgresql://x/y", "schema": 'x"; DROP SCHEMA public; --'}, "schema"),
        ({"url": "postgresql://x/y", "timeout": 0}, "timeout"),
        ({"url": "postgresql://x/y", "timeout": float("inf")}, "timeout"),
        ({"url": "postgresql://x/y", "max_connections": 0}, "max_connections"),
        ({"url": "not a url = = ="}, "PostgreSQL URL"),
    ],
)
def test_bad_arguments_are_config_errors_before_any_connection(
    arguments: dict[str, object], complaint: str
) -> None:
    with pytest.raises(ConfigError, match=complaint):
        PostgresStore(**arguments)  # type: ignore[arg-type]


def test_the_password_never_appears_in_the_repr(private_postgres_url_with_password: str) -> None:
    store = PostgresStore(private_postgres_url_with_password, schema=new_schema(), timeout=2)
    try:
        assert "s3cret" not in repr(store)
    finally:
        store.close()


@pytest.fixture
def private_postgres_url_with_password(postgres_url: str) -> str:
    # Trust authentication ignores the password; it is only there to be hidden.
    return postgres_url.replace("postgres@", "postgres:s3cret@", 1)


def test_stores_in_different_schemas_do_not_see_each_other(postgres_url: str, schema: str) -> None:
    other = new_schema()
    try:
        with (
            PostgresStore(postgres_url, schema=schema) as first,
            PostgresStore(postgres_url, schema=other) as second,
        ):
            first.append("s", [user("first")], user_id="ana")
            second.append("s", [user("second")], user_id="ana")
            assert second.forget_user("ana") == ["s"]
            assert [m.text for m in first.messages("s")] == ["first"]
    finally:
        drop_schema(postgres_url, other)


def test_the_schema_records_its_version_and_reopening_changes_nothing(postgres_url: str, schema: str) -> None:
    PostgresStore(postgres_url, schema=schema).close()
    PostgresStore(postgres_url, schema=schema).close()
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(f'SELECT version, description FROM "{schema}".schema_version').fetchall()
    assert rows == [
        (1, "sessions, messages and state"),
        (2, "messages.reply_to_seq: the question an answer belongs to"),
        (3, "a generation per session log"),
        (4, "vectors: recall embeddings, so a new server never embeds a stored session again"),
        (5, "lexical_docs: recall's keyword index, for stores opened with lexical_index='tsvector'"),
        (
            6,
            "lexical_docs: BM25 (term counts, lengths, per-index totals) and a per-index lexeme for the GIN index",
        ),
        (7, "lexical_postings: each term's documents in blocks, what a keyword search reads"),
        (8, "recall's keyword index of each user's history; the per-session keyword index goes"),
    ]


def test_a_version_1_schema_gains_reply_to_seq_and_keeps_its_messages(postgres_url: str, schema: str) -> None:
    from convmem._stores.postgres.migrations import _MIGRATIONS

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(
            f'CREATE TABLE "{schema}".schema_version (version integer PRIMARY KEY, '
            "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for statement in _MIGRATIONS[0][2]:
            conn.execute(statement.format(s=f'"{schema}"'))
        conn.execute(f"INSERT INTO \"{schema}\".schema_version (version, description) VALUES (1, 'v1')")
        conn.execute(
            f'INSERT INTO "{schema}".sessions (session_id, created_at, updated_at, last_seq, message_count) '
            "VALUES ('s', 0, 0, 1, 1)"
        )
        conn.execute(
            f'INSERT INTO "{schema}".messages (session_id, seq, role, content, status, ts) '
            """VALUES ('s', 1, 'user', '"old question"', 'running', 0)"""
        )
    with PostgresStore(postgres_url, schema=schema) as store:
        (old,) = store.messages("s")
        assert (old.text, old.reply_to_seq) == ("old question", None)
        (answer,) = store.append("s", [Message.create("assistant", "A", reply_to_seq=1)])
        assert store.get("s", [answer.seq or 0])[0].reply_to_seq == 1


def test_a_schema_of_version_2_is_migrated_and_its_sessions_get_distinct_generations(
    postgres_url: str, schema: str
) -> None:
    with PostgresStore(postgres_url, schema=schema) as store:
        store.append("a", [user("a")])
        store.append("b", [user("b")])
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # as convmem before migration 3 left it
        conn.execute(
            f'DROP TABLE "{schema}".recall_histories, "{schema}".recall_index_sessions, '
            f'"{schema}".recall_units, "{schema}".recall_postings; '
            f'DROP FUNCTION "{schema}".recall_index_session_gone()'
        )
        conn.execute(f'DROP TABLE "{schema}".vectors')
        conn.execute(f'ALTER TABLE "{schema}".sessions DROP COLUMN generation')
        conn.execute(f'DELETE FROM "{schema}".schema_version WHERE version >= 3')
    with PostgresStore(postgres_url, schema=schema) as store:
        generations = {store.stats(s).generation for s in ("a", "b")}
        assert None not in generations and len(generations) == 2
        assert [m.text for m in store.messages("a")] == ["a"]


def test_a_schema_dropped_under_a_running_store_gives_a_store_error(postgres_url: str, schema: str) -> None:
    with PostgresStore(postgres_url, schema=schema) as store:
        store.append("s", [user("a")])
        drop_schema(postgres_url, schema)
        with pytest.raises(StoreError, match="schema"):
            store.messages("s")


# -- the async twin ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "table", ["recall_postings", "recall_units", "recall_index_sessions", "recall_histories"]
)
async def test_async_store_forgets_a_user_whose_recall_table_was_dropped(
    postgres_url: str, schema: str, table: str, caplog: pytest.LogCaptureFixture
) -> None:
    with PostgresStore(postgres_url, schema=schema) as sync_store:
        memory = ConversationMemory("ana-1", sync_store, user_id="ana")
        memory.add_turn("My corgi is called Duoduo.", "Noted.")
        asker = ConversationMemory("ana-2", sync_store, user_id="ana")
        recalled = asker.build_context("What is my corgi called?", 1024).recalled
        assert any("Duoduo" in item.text for item in recalled)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{schema}".{table}')
    with caplog.at_level(logging.WARNING, logger="convmem"):
        async with AsyncPostgresStore(postgres_url, schema=schema) as store:
            await store.forget_user("ana")
            assert await store.messages("ana-1") == []
            await store.append("bo-1", [user("my corgi is called Bobo")], user_id="bo")
            await store.clear("bo-1")
            await store.append("bo-1", [user("my corgi is called Bobo")], user_id="bo")
        with PostgresStore(postgres_url, schema=schema) as sync_store:  # recall: sync only
            for attempt in range(2):  # reads the logs if the table was still missing, then the table
                asker = ConversationMemory(f"bo-{attempt + 2}", sync_store, user_id="bo")
                recalled = asker.build_context("What is my corgi called?", 1024).recalled
                assert [item.text for item in recalled if "corgi" in item.text]
                assert not [item.text for item in recalled if "Duoduo" in item.text]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        (made,) = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f'"{schema}".{table}',)).fetchone()
    assert made
    assert [r for r in caplog.records if table in r.getMessage() and "made again" in r.getMessage()]


async def test_async_store_appends_reads_and_changes_status(postgres_url: str, schema: str) -> None:
    async with AsyncPostgresStore(postgres_url, schema=schema) as store:
        stored = await store.append("s", [user("a"), user("b"), user("c")], user_id="ana")
        assert [m.seq for m in stored] == [1, 2, 3]
        assert [m.text for m in await store.tail("s", 2)] == ["b", "c"]
        assert [m.seq for m in await store.messages("s", after_seq=1, through_seq=2)] == [2]
        assert [m.seq for m in await store.get("s", [3, 1])] == [1, 3]
        changed = await store.set_status("s", 2, TurnStatus.FAILED)
        assert changed.status is TurnStatus.FAILED
        stats = await store.stats("s")
        assert (stats.message_count, stats.user_id) == (3, "ana")


async def test_async_store_reads_stats_and_state_together(postgres_url: str, schema: str) -> None:
    async with AsyncPostgresStore(postgres_url, schema=schema) as store:
        await store.append("s", [user("a"), user("b")], user_id="ana")
        await store.put_state("s", "summary", "v1")
        snapshot = await store.read_session("s", ["summary", "facts"])
        assert snapshot.stats == await store.stats("s")
        assert snapshot.states == {"summary": await store.get_state("s", "summary")}


async def test_async_append_as_another_user_is_refused(postgres_url: str, schema: str) -> None:
    async with AsyncPostgresStore(postgres_url, schema=schema) as store:
        await store.append("s", [user("a")], user_id="ana")
        with pytest.raises(SessionOwnerError):
            await store.append("s", [user("b")], user_id="bob")
        assert [m.text for m in await store.messages("s")] == ["a"]


async def test_async_concurrent_appends_get_distinct_consecutive_seqs(postgres_url: str, schema: str) -> None:
    async with AsyncPostgresStore(postgres_url, schema=schema, max_connections=4) as store:
        batches = await asyncio.gather(*(store.append("s", [user(f"m{i}")]) for i in range(50)))
        assert sorted(m.seq or 0 for batch in batches for m in batch) == list(range(1, 51))


async def test_async_state_compare_and_set_and_requires_seq(postgres_url: str, schema: str) -> None:
    async with AsyncPostgresStore(postgres_url, schema=schema) as store:
        await store.append("s", [user("a"), user("b")])
        assert await store.put_state("s", "summary", "through 3", requires_seq=3) is None
        first = await store.put_state("s", "summary", "v1", expected_version=0, requires_seq=2)
        assert first is not None and first.version == 1
        assert await store.put_state("s", "summary", "late", expected_version=0) is None
        await store.clear("s")
        assert (
            await store.put_state("s", "summary", "after clear", expected_version=1, requires_seq=2) is None
        )
        assert await store.get_state("s", "summary") is None


def test_sync_and_async_stores_share_one_schema(postgres_url: str, schema: str) -> None:
    async def write_async() -> None:
        async with AsyncPostgresStore(postgres_url, schema=schema) as store:
            await store.append("s", [user("from async")], user_id="ana")

    with PostgresStore(postgres_url, schema=schema) as sync_store:
        sync_store.append("s", [user("from sync")])
        asyncio.run(write_async())
        assert [m.text for m in sync_store.messages("s")] == ["from sync", "from async"]
        assert sync_store.sessions(user_id="ana") == ["s"]


async def test_async_store_raises_store_error_when_unreachable() -> None:
    from redis_server import free_port

    store = AsyncPostgresStore(f"postgresql://postgres@127.0.0.1:{free_port()}/postgres", timeout=1)
    with pytest.raises(StoreError, match=r"no connection within 1 s"):
        await store.append("s", [user("hi")])
    await store.close()


async def test_async_store_deletes_and_replaces_messages_and_renews_the_generation(
    postgres_url: str, schema: str
) -> None:
    async with AsyncPostgresStore(postgres_url, schema=schema) as store:
        await store.append("s", [user("a"), user("b"), user("c")])
        first = (await store.stats("s")).generation
        assert [m.text for m in await store.delete_messages("s", [2])] == ["b"]
        second = (await store.stats("s")).generation
        replaced = await store.replace_message("s", 3, user("C"))
        assert replaced.seq == 3
        assert [m.text for m in await store.messages("s")] == ["a", "C"]
        assert len({first, second, (await store.stats("s")).generation}) == 3

"""What only the Redis stores promise: key layout and escaping (one slot per session and per user,
on a single node and on a real 3-master Cluster), TTL, bounded scripts, errors, and the async twin."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster
from redis.crc import key_slot
from redis_server import delete_prefix, free_port, new_prefix

from convmem import (
    AsyncRedisStore,
    ConfigError,
    ConversationMemory,
    InvalidMessageError,
    Message,
    Recall,
    RedisStore,
    StoreError,
    TurnStatus,
)
from convmem._errors import SessionOwnerError
from convmem._stores.redis.layout import LOGS_PER_PIPELINE
from convmem._stores.redis.records import _escape

pytestmark = pytest.mark.redis

HOSTILE_IDS = [
    "a",
    "a*",
    "a?",
    "*",
    "a:b",
    "a:b:log",
    "{a}",
    "a}",
    "}{",
    "a%3Ab",
    "../x",
    "a\x00b",
    "会话",
    "x" * 10_000,
]


@dataclasses.dataclass(frozen=True)
class Target:
    """A single Redis server or a Cluster, as the tests reach it."""

    url: str
    cluster: bool

    def raw(self, **options: Any) -> Any:
        if self.cluster:
            return redis.cluster.RedisCluster.from_url(self.url, **options)
        return redis.Redis.from_url(self.url, **options)


@pytest.fixture(params=["single", "cluster"])
def target(request: pytest.FixtureRequest) -> Target:
    if request.param == "cluster":
        return Target(request.getfixturevalue("redis_cluster_url"), True)
    return Target(request.getfixturevalue("redis_url"), False)


@pytest.fixture
def redis_url_only(redis_url: str) -> str:
    return redis_url


@pytest.fixture
def prefix(target: Target) -> Iterator[str]:
    chosen = new_prefix()
    yield chosen
    delete_prefix(target.url, chosen, cluster=target.cluster)


@pytest.fixture
def client(target: Target) -> Iterator[Any]:
    raw = target.raw(decode_responses=True)
    yield raw
    raw.close()


@pytest.fixture
def store(target: Target, prefix: str) -> Iterator[RedisStore]:
    opened = RedisStore(target.url, cluster=target.cluster, prefix=prefix)
    yield opened
    opened.close()


@pytest.fixture
async def async_store(target: Target, prefix: str) -> AsyncIterator[AsyncRedisStore]:
    opened = AsyncRedisStore(target.url, cluster=target.cluster, prefix=prefix)
    yield opened
    await opened.close()


def user(text: str) -> Message:
    return Message.create("user", text)


def keys_of(client: Any, prefix: str) -> list[str]:
    return sorted(client.scan_iter(match=f"{prefix}:*", count=1000))


def session_key(prefix: str, session_id: str, part: str) -> str:
    return f"{prefix}:session:{{{_escape(session_id)}}}:{part}"


def slot(key: str) -> int:
    """The Cluster hash slot of `key`, as Redis computes it (hash tags included)."""
    return int(key_slot(key.encode()))


# -- key layout -------------------------------------------------------------------------------


def test_keys_hold_no_raw_separator_glob_or_control_characters(
    store: RedisStore, client: Any, prefix: str
) -> None:
    for session_id in HOSTILE_IDS:
        store.append(session_id, [user("hi")], user_id=session_id)
        store.put_state(session_id, "summary", "x")
    escaped = r"[A-Za-z0-9_.~%-]+"
    layout = re.compile(
        rf"{re.escape(prefix)}:(session:\{{{escaped}\}}:(meta|log|state)|user:\{{{escaped}\}}:sessions)"
    )
    keys = keys_of(client, prefix)
    assert len(keys) == 4 * len(HOSTILE_IDS)
    assert [k for k in keys if not layout.fullmatch(k)] == []


def test_every_key_of_a_session_and_of_a_user_shares_one_hash_slot(
    store: RedisStore, client: Any, prefix: str
) -> None:
    for session_id in HOSTILE_IDS:
        store.append(session_id, [user("hi")], user_id=f"owner {session_id}")
        store.put_state(session_id, "summary", "x")
    for session_id in HOSTILE_IDS:
        keys = [session_key(prefix, session_id, part) for part in ("meta", "log", "state")]
        assert len({slot(k) for k in keys}) == 1
        assert client.exists(*keys) == 3  # one slot: one EXISTS may name them all, even on a Cluster
    # Sessions spread over the slots (and so over the Cluster's nodes).
    assert len({slot(session_key(prefix, s, "meta")) for s in HOSTILE_IDS}) > len(HOSTILE_IDS) // 2


def test_stores_with_different_prefixes_do_not_see_each_other(target: Target, prefix: str) -> None:
    other_prefix = new_prefix()
    first = RedisStore(target.url, cluster=target.cluster, prefix=prefix)
    second = RedisStore(target.url, cluster=target.cluster, prefix=other_prefix)
    try:
        first.append("s", [user("first")], user_id="ana")
        second.append("s", [user("second")], user_id="ana")
        assert [m.text for m in first.messages("s")] == ["first"]
        second.forget_user("ana")
        assert [m.text for m in first.messages("s")] == ["first"]
        assert second.sessions() == []
        assert first.sessions(user_id="ana") == ["s"]
    finally:
        first.close()
        second.close()
        delete_prefix(target.url, other_prefix, cluster=target.cluster)


def test_records_are_stored_as_plain_json(store: RedisStore, client: Any, prefix: str) -> None:
    store.append("s", [Message.create("user", "多多 is my dog", metadata={"k": 1})])
    raw = client.hget(session_key(prefix, "s", "log"), "1")
    assert isinstance(raw, str)
    record = json.loads(raw)
    assert record["role"] == "user"
    assert json.loads(record["content"]) == "多多 is my dog"


def test_sync_and_async_stores_share_one_layout(target: Target, prefix: str) -> None:
    sync_store = RedisStore(target.url, cluster=target.cluster, prefix=prefix)

    async def write_async() -> None:
        async with AsyncRedisStore(target.url, cluster=target.cluster, prefix=prefix) as async_store:
            await async_store.append("s", [user("from async")], user_id="ana")

    try:
        sync_store.append("s", [user("from sync")])
        asyncio.run(write_async())
        assert [m.text for m in sync_store.messages("s")] == ["from sync", "from async"]
        assert sync_store.sessions(user_id="ana") == ["s"]
    finally:
        sync_store.close()


def test_the_first_append_with_a_user_lists_the_session_in_the_users_set(
    store: RedisStore, client: Any, prefix: str
) -> None:
    store.append("s", [user("before any user")])
    store.append("s", [user("claimed")], user_id="ana")
    store.append("s", [user("again")], user_id="ana")
    assert client.smembers(f"{prefix}:user:{{ana}}:sessions") == {"s"}
    assert store.stats("s").user_id == "ana"


def test_forget_user_drops_set_entries_of_sessions_the_user_does_not_own(
    store: RedisStore, client: Any, prefix: str
) -> None:
    store.append("mine", [user("a")], user_id="ana")
    store.append("theirs", [user("b")], user_id="bob")
    user_set = f"{prefix}:user:{{ana}}:sessions"
    client.sadd(user_set, "theirs", "gone")  # left by a crash between registration and claim
    assert store.sessions(user_id="ana") == ["mine"]
    assert store.forget_user("ana") == ["mine"]
    assert client.exists(user_set) == 0
    assert store.sessions() == ["theirs"]


def test_expire_idle_prunes_set_entries_of_sessions_that_are_gone(
    store: RedisStore, client: Any, prefix: str
) -> None:
    store.append("kept", [user("a")], user_id="ana")
    user_set = f"{prefix}:user:{{ana}}:sessions"
    client.sadd(user_set, "expired-by-ttl")
    assert store.expire_idle(3600) == []
    assert client.smembers(user_set) == {"kept"}


# -- bounded work and damaged data ---------------------------------------------------------------


def hmget_calls(client: Any, key: str) -> int:
    if hasattr(client, "nodes_manager"):
        stats = client.info("commandstats", target_nodes=client.get_node_from_key(key))
    else:
        stats = client.info("commandstats")
    return int(stats.get("cmdstat_hmget", {}).get("calls", 0))


def test_a_damaged_last_seq_does_not_make_a_read_walk_every_seq(
    target: Target, prefix: str, client: Any
) -> None:
    # A short timeout: a script walking 30 million seqs would fail it instead of passing slowly.
    with RedisStore(target.url, cluster=target.cluster, prefix=prefix, socket_timeout=5) as store:
        store.append("s", [user(f"m{i}") for i in range(5)])
        meta = session_key(prefix, "s", "meta")
        client.hset(meta, "last_seq", "30000000")
        before = hmget_calls(client, meta)
        assert [m.text for m in store.messages("s")] == [f"m{i}" for i in range(5)]
        assert [m.text for m in store.messages("s", after_seq=3)] == ["m3", "m4"]
        assert len(store.tail("s", 3)) <= 3
        # Each read asked Redis for at most the fields of one window, not 30 million of them.
        assert hmget_calls(client, meta) - before <= 1


@pytest.mark.parametrize("entry", ["%zz", "%FF", "\xff", "%61", "a b"])
def test_an_invalid_escape_in_a_users_set_raises_store_error(
    store: RedisStore, client: Any, prefix: str, entry: str
) -> None:
    store.append("s", [user("a")], user_id="ana")
    client.sadd(f"{prefix}:user:{{ana}}:sessions", entry)
    with pytest.raises(StoreError, match="not an id escaped by convmem"):
        store.forget_user("ana")


def test_an_invalid_escape_in_a_sessions_owner_raises_store_error(
    store: RedisStore, client: Any, prefix: str
) -> None:
    store.append("s", [user("a")], user_id="ana")
    client.hset(session_key(prefix, "s", "meta"), "user_id", "%E2%28")
    with pytest.raises(StoreError, match="not an id escaped by convmem"):
        store.stats("s")


@pytest.mark.parametrize("escaped", ["%zz", "%FF", "%C3%28"])
def test_an_invalid_escape_in_a_session_key_raises_store_error(
    store: RedisStore, client: Any, prefix: str, escaped: str
) -> None:
    store.append("s", [user("a")])
    client.hset(f"{prefix}:session:{{{escaped}}}:meta", "last_seq", "1")
    with pytest.raises(StoreError, match="not an id escaped by convmem"):
        store.sessions()
    with pytest.raises(StoreError, match="not an id escaped by convmem"):
        store.expire_idle(0)


# -- TTL ----------------------------------------------------------------------------------------


def test_a_ttl_is_set_on_every_key_of_the_session(target: Target, prefix: str, client: Any) -> None:
    with RedisStore(target.url, cluster=target.cluster, prefix=prefix, ttl_seconds=60) as store:
        store.append("s", [user("hi")], user_id="ana")
        store.put_state("s", "summary", "x")
    for part in ("meta", "log", "state"):
        assert 0 < client.pttl(session_key(prefix, "s", part)) <= 60_000, part
    # The user's set outlives any one session; expire_idle prunes it once they are gone.
    assert client.pttl(f"{prefix}:user:{{ana}}:sessions") == -1


@pytest.mark.parametrize("write", ["append", "set_status", "put_state", "delete_state"])
def test_every_write_refreshes_the_ttl_of_all_session_keys(
    target: Target, prefix: str, client: Any, write: str
) -> None:
    with RedisStore(target.url, cluster=target.cluster, prefix=prefix, ttl_seconds=60) as store:
        store.append("s", [user("hi")])
        store.put_state("s", "summary", "x")
        keys = [session_key(prefix, "s", part) for part in ("meta", "log", "state")]
        for key in keys:
            client.pexpire(key, 5_000)
        if write == "append":
            store.append("s", [user("again")])
        elif write == "set_status":
            store.set_status("s", 1, TurnStatus.CANCELLED)
        elif write == "put_state":
            store.put_state("s", "facts", "{}")
        else:
            store.delete_state("s", "summary")
            store.put_state("s", "summary", "y")  # the state hash must survive for the check
        assert [client.pttl(key) > 5_000 for key in keys] == [True, True, True]


def test_a_session_past_its_ttl_is_gone_and_its_index_entry_is_swept(
    target: Target, prefix: str, client: Any
) -> None:
    with RedisStore(target.url, cluster=target.cluster, prefix=prefix, ttl_seconds=0.2) as store:
        store.append("s", [user("hi")], user_id="ana")
        time.sleep(0.5)
        assert store.messages("s") == []
        assert store.sessions() == []
        assert store.sessions(user_id="ana") == []
        assert store.stats("s").message_count == 0
        assert store.expire_idle(0) == []
        assert keys_of(client, prefix) == []


def test_without_a_ttl_keys_never_expire(store: RedisStore, client: Any, prefix: str) -> None:
    store.append("s", [user("hi")])
    assert client.pttl(session_key(prefix, "s", "log")) == -1


@pytest.mark.parametrize("ttl", [0, -5, float("nan"), float("inf"), "60", True])
def test_an_invalid_ttl_is_a_config_error(redis_url: str, ttl: object) -> None:
    with pytest.raises(ConfigError, match="ttl_seconds"):
        RedisStore(redis_url, ttl_seconds=ttl)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad_prefix", ["", "a*", "a b", "a?", "{a}", "a\n"])
def test_an_unsafe_prefix_is_a_config_error(redis_url: str, bad_prefix: str) -> None:
    with pytest.raises(ConfigError, match="prefix"):
        RedisStore(redis_url, prefix=bad_prefix)


# -- errors -------------------------------------------------------------------------------------


def test_an_unreachable_server_raises_store_error_naming_address_and_action() -> None:
    port = free_port()
    store = RedisStore(f"redis://127.0.0.1:{port}/0", socket_timeout=1)
    with pytest.raises(StoreError, match=rf"127\.0\.0\.1:{port}.*append to session 's'"):
        store.append("s", [user("hi")])
    with pytest.raises(StoreError, match="reachable"):
        store.tail("s", 5)
    store.close()


def test_a_malformed_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Redis URL"):
        RedisStore("http://example.invalid/0")


def test_a_foreign_key_of_the_wrong_type_raises_store_error(
    store: RedisStore, client: Any, prefix: str
) -> None:
    client.set(session_key(prefix, "s", "log"), "not a hash")
    with pytest.raises(StoreError, match="key prefix"):
        store.append("s", [user("hi")])
    assert store.stats("s").message_count == 0
    assert store.sessions() == []


def test_damaged_counters_refuse_an_append_without_writing_any_of_it(
    store: RedisStore, client: Any, prefix: str
) -> None:
    store.append("s", [user("a")])
    meta = session_key(prefix, "s", "meta")
    client.hset(meta, "count", "garbage")
    with pytest.raises(StoreError, match="damaged"):
        store.append("s", [user("b"), user("c")])
    assert client.hlen(session_key(prefix, "s", "log")) == 1
    assert client.hget(meta, "last_seq") == "1"


def test_a_message_that_is_not_utf8_is_refused_before_anything_is_written(store: RedisStore) -> None:
    broken = dataclasses.replace(user("ok"), content="lone \ud800 surrogate")
    with pytest.raises(InvalidMessageError, match="UTF-8"):
        store.append("s", [user("first"), broken])
    assert store.sessions() == []


def test_a_passed_client_is_used_and_left_open(target: Target, prefix: str) -> None:
    own = target.raw()
    store = RedisStore(prefix=prefix, client=own)
    store.append("s", [user("hi")], user_id="ana")
    assert store.sessions(user_id="ana") == ["s"]
    store.close()
    assert own.ping() is True
    assert own.exists(session_key(prefix, "s", "log")) == 1
    own.close()


def test_a_client_with_decoded_responses_works_too(target: Target, prefix: str) -> None:
    own = target.raw(decode_responses=True)
    store = RedisStore(prefix=prefix, client=own)
    store.append("s", [user("héllo")], user_id="ana")
    store.put_state("s", "summary", "ü")
    assert [m.text for m in store.tail("s", 5)] == ["héllo"]
    assert store.stats("s").user_id == "ana"
    assert store.sessions(user_id="ana") == ["s"]
    assert store.expire_idle(3600) == []
    own.close()


# -- the async twin ------------------------------------------------------------------------------


async def test_async_store_appends_and_reads(async_store: AsyncRedisStore) -> None:
    stored = await async_store.append("s", [user("a"), user("b"), user("c")], user_id="ana")
    assert [m.seq for m in stored] == [1, 2, 3]
    assert [m.text for m in await async_store.tail("s", 2)] == ["b", "c"]
    assert [m.seq for m in await async_store.messages("s", after_seq=1, through_seq=2)] == [2]
    assert [m.seq for m in await async_store.get("s", [3, 1])] == [1, 3]
    changed = await async_store.set_status("s", 2, TurnStatus.FAILED)
    assert changed.status is TurnStatus.FAILED
    stats = await async_store.stats("s")
    assert (stats.message_count, stats.user_id) == (3, "ana")


async def test_async_concurrent_appends_get_distinct_consecutive_seqs(async_store: AsyncRedisStore) -> None:
    batches = await asyncio.gather(*(async_store.append("s", [user(f"m{i}")]) for i in range(50)))
    assigned = sorted(m.seq or 0 for batch in batches for m in batch)
    assert assigned == list(range(1, 51))
    assert sorted(m.text for m in await async_store.messages("s")) == sorted(f"m{i}" for i in range(50))


async def test_async_calls_beyond_the_pool_size_wait_for_a_connection(redis_url: str) -> None:
    prefix = new_prefix()
    async with AsyncRedisStore(redis_url, prefix=prefix, max_connections=2) as small:
        batches = await asyncio.gather(*(small.append("s", [user(f"m{i}")]) for i in range(40)))
        assert sorted(m.seq or 0 for batch in batches for m in batch) == list(range(1, 41))
    delete_prefix(redis_url, prefix)


def test_an_async_store_used_in_a_second_event_loop_says_to_make_one_per_loop(redis_url: str) -> None:
    """redis.asyncio connections belong to the loop that made them: a second loop (another
    `asyncio.run`) gets a clear error, and the first loop's data is untouched."""
    prefix = new_prefix()
    store = AsyncRedisStore(redis_url, prefix=prefix)
    first = asyncio.new_event_loop()
    try:
        first.run_until_complete(store.append("s", [user("one")]))
        with pytest.raises(ConfigError, match="first used in another event loop"):
            asyncio.run(store.append("s", [user("two")]))
        assert [m.text for m in first.run_until_complete(store.messages("s"))] == ["one"]
        first.run_until_complete(store.close())
    finally:
        first.close()
        delete_prefix(redis_url, prefix)


def test_threads_beyond_the_pool_size_wait_for_a_connection(redis_url: str) -> None:
    prefix = new_prefix()
    with RedisStore(redis_url, prefix=prefix, max_connections=2) as small:
        seqs: list[int] = []

        def work() -> None:
            for i in range(10):
                seqs.extend(m.seq or 0 for m in small.append("s", [user(f"m{i}")]))

        threads = [threading.Thread(target=work) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(seqs) == list(range(1, 81))
    delete_prefix(redis_url, prefix)


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_an_invalid_pool_size_is_a_config_error(redis_url: str, size: object) -> None:
    with pytest.raises(ConfigError, match="max_connections"):
        RedisStore(redis_url, max_connections=size)  # type: ignore[arg-type]


async def test_async_state_compare_and_set(async_store: AsyncRedisStore) -> None:
    first = await async_store.put_state("s", "summary", "v1", expected_version=0)
    assert first is not None and first.version == 1
    assert await async_store.put_state("s", "summary", "late", expected_version=0) is None
    record = await async_store.get_state("s", "summary")
    assert record is not None and record.value == "v1"
    await async_store.delete_state("s", "summary")
    assert await async_store.get_state("s", "summary") is None


async def test_async_store_reads_stats_and_state_together(async_store: AsyncRedisStore) -> None:
    await async_store.append("s", [user("a"), user("b")], user_id="ana")
    await async_store.put_state("s", "summary", "v1")
    snapshot = await async_store.read_session("s", ["summary", "facts"])
    assert snapshot.stats == await async_store.stats("s")
    assert snapshot.states == {"summary": await async_store.get_state("s", "summary")}


async def test_async_put_state_requiring_a_seq_is_refused_once_the_session_is_gone(
    async_store: AsyncRedisStore,
) -> None:
    await async_store.append("s", [user("a"), user("b")])
    assert await async_store.put_state("s", "summary", "through 3", requires_seq=3) is None
    written = await async_store.put_state("s", "summary", "through 2", expected_version=0, requires_seq=2)
    assert written is not None and written.version == 1
    await async_store.clear("s")
    assert await async_store.put_state("s", "summary", "late", expected_version=0, requires_seq=2) is None
    assert await async_store.get_state("s", "summary") is None
    assert await async_store.sessions() == []


def test_a_state_write_requiring_a_seq_is_refused_after_the_session_expired_by_ttl(
    target: Target, prefix: str
) -> None:
    with RedisStore(target.url, cluster=target.cluster, prefix=prefix, ttl_seconds=0.2) as short_lived:
        short_lived.append("s", [user("a")])
        time.sleep(0.4)
        assert short_lived.put_state("s", "summary", "late", expected_version=0, requires_seq=1) is None
        assert short_lived.get_state("s", "summary") is None
        assert short_lived.sessions() == []


def test_damaged_counters_refuse_a_state_write_requiring_a_seq(
    store: RedisStore, client: Any, prefix: str
) -> None:
    store.append("s", [user("a")])
    client.hset(session_key(prefix, "s", "meta"), "last_seq", "not a number")
    with pytest.raises(StoreError, match="damaged"):
        store.put_state("s", "summary", "x", requires_seq=1)
    assert store.get_state("s", "summary") is None


async def test_async_forget_user_clear_and_expire_idle(async_store: AsyncRedisStore) -> None:
    await async_store.append("s1", [user("a")], user_id="ana")
    await async_store.append("s2", [user("b")], user_id="bob")
    await async_store.append("s3", [user("c")])
    assert await async_store.forget_user("ana") == ["s1"]
    await async_store.clear("s2")
    assert await async_store.sessions() == ["s3"]
    assert await async_store.expire_idle(0) == ["s3"]
    assert await async_store.sessions() == []


async def test_async_append_as_another_user_is_refused(async_store: AsyncRedisStore) -> None:
    await async_store.append("s", [user("a")], user_id="ana")
    with pytest.raises(SessionOwnerError):
        await async_store.append("s", [user("b")], user_id="bob")
    assert [m.text for m in await async_store.messages("s")] == ["a"]


async def test_async_store_raises_store_error_when_unreachable() -> None:
    port = free_port()
    store = AsyncRedisStore(f"redis://127.0.0.1:{port}/0", socket_timeout=1)
    with pytest.raises(StoreError, match=rf"127\.0\.0\.1:{port}"):
        await store.append("s", [user("hi")])
    await store.close()


# -- construction, Cluster and migration ------------------------------------------------------------


def test_url_may_be_passed_by_keyword(target: Target, prefix: str) -> None:
    with RedisStore(url=target.url, cluster=target.cluster, prefix=prefix) as store:
        store.append("s", [user("hi")])
        assert [m.text for m in store.messages("s")] == ["hi"]


def test_url_and_client_together_are_a_config_error(redis_url: str) -> None:
    own = redis.Redis.from_url(redis_url)
    with pytest.raises(ConfigError, match="not both"):
        RedisStore(redis_url, client=own)
    own.close()


def test_an_unreachable_cluster_raises_store_error_naming_it() -> None:
    port = free_port()
    with pytest.raises(StoreError, match=rf"127\.0\.0\.1:{port}.*reachable"):
        RedisStore(f"redis://127.0.0.1:{port}", cluster=True, socket_timeout=1)


async def test_an_async_cluster_client_passed_in_is_used(redis_cluster_url: str) -> None:
    prefix = new_prefix()
    own = redis.asyncio.cluster.RedisCluster.from_url(redis_cluster_url)
    try:
        store = AsyncRedisStore(prefix=prefix, client=own)
        for i in range(20):
            await store.append(f"s{i}", [user("hi")], user_id="ana")
        assert await store.sessions(user_id="ana") == sorted(f"s{i}" for i in range(20))
        assert await store.forget_user("ana") == sorted(f"s{i}" for i in range(20))
        assert await store.sessions() == []
    finally:
        await own.aclose()
        delete_prefix(redis_cluster_url, prefix, cluster=True)


def test_data_written_without_hash_tags_is_migrated_in_place(redis_url: str) -> None:
    prefix = new_prefix()
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        # What convmem wrote before hash tags: no braces, a global index, user_key in meta.
        record = json.dumps(
            {"role": "user", "content": json.dumps("old words"), "status": "completed", "ts": 1.0}
        )
        escaped = _escape("chat:1")
        raw.hset(f"{prefix}:session:{escaped}:meta", mapping={
            "last_seq": 1, "count": 1, "tokens": 3, "user_id": "ana", "created_at": "1.0",
            "updated_at": "2.0", "user_key": f"{prefix}:user:ana:sessions",
        })  # fmt: skip
        raw.hset(f"{prefix}:session:{escaped}:log", "1", record)
        raw.hset(f"{prefix}:session:{escaped}:state", mapping={"v:summary": "so far", "n:summary": 1})
        raw.sadd(f"{prefix}:sessions", escaped)
        raw.sadd(f"{prefix}:user:ana:sessions", escaped)
        with RedisStore(redis_url, prefix=prefix) as store:
            assert store.sessions() == []
            assert store.migrate_untagged_keys() == 1
            assert store.migrate_untagged_keys() == 0
            assert [m.text for m in store.messages("chat:1")] == ["old words"]
            assert store.stats("chat:1").total_tokens == 3
            summary = store.get_state("chat:1", "summary")
            assert summary is not None and summary.value == "so far"
            assert store.sessions(user_id="ana") == ["chat:1"]
            assert [m.seq for m in store.append("chat:1", [user("new")], user_id="ana")] == [2]
            assert store.forget_user("ana") == ["chat:1"]
        assert keys_of(raw, prefix) == []
    finally:
        raw.close()
        delete_prefix(redis_url, prefix)


def test_migrating_untagged_keys_on_a_cluster_is_a_config_error(redis_cluster_url: str) -> None:
    with (
        RedisStore(redis_cluster_url, cluster=True, prefix=new_prefix()) as store,
        pytest.raises(ConfigError, match="cluster import"),
    ):
        store.migrate_untagged_keys()


async def test_async_store_deletes_and_replaces_messages_and_renews_the_generation(
    async_store: AsyncRedisStore,
) -> None:
    await async_store.append("s", [user("a"), user("b"), user("c")])
    first = (await async_store.stats("s")).generation
    assert [m.text for m in await async_store.delete_messages("s", [2])] == ["b"]
    second = (await async_store.stats("s")).generation
    replaced = await async_store.replace_message("s", 3, user("C"))
    assert replaced.seq == 3
    assert [m.text for m in await async_store.messages("s")] == ["a", "C"]
    assert len({first, second, (await async_store.stats("s")).generation}) == 3


def test_counters_stay_integers_at_any_size(store: RedisStore, client: Any, prefix: str) -> None:
    store.append("s", [user("first")])
    store.put_state("s", "summary", "v1")
    meta, _, state = (f"{prefix}:session:{{{_escape('s')}}}:{part}" for part in ("meta", "log", "state"))
    big = 10**15
    client.hset(meta, "last_seq", big)  # a log that has reached seq 10^15
    client.hset(state, "n:summary", big)
    stored = store.append("s", [user("second"), user("third")])
    assert [m.seq for m in stored] == [big + 1, big + 2]
    assert client.hget(meta, "last_seq") == str(big + 2)
    assert [m.seq for m in store.tail("s", 2)] == [big + 1, big + 2]
    assert [m.text for m in store.messages("s", after_seq=big)] == ["second", "third"]
    assert store.stats("s").last_seq == big + 2
    record = store.put_state("s", "summary", "v2", expected_version=big)
    assert record is not None and record.version == big + 1
    assert store.get_state("s", "summary") == record


# -- a returning user's logs, read at once --------------------------------------------------------


def _returning_user(store: RedisStore) -> None:
    for number, place in enumerate(["Bergen", "Lyon", "Osaka"]):
        earlier = ConversationMemory(f"trip-{number}", store, user_id="ana")
        earlier.add_turn(f"My trip number {number} was to {place}.", "Lovely!")
        earlier.flush()
        earlier.close()


def test_a_returning_users_logs_read_at_once_are_recalled_as_logs_read_one_by_one(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _returning_user(store)
    query = "Where did my trips take me?"
    at_once = ConversationMemory("new", store, user_id="ana", recall=Recall()).build_context(query=query)
    monkeypatch.setattr(RedisStore, "read_logs", lambda self, session_ids: {})  # each read on its own
    one_by_one = ConversationMemory("new", store, user_id="ana", recall=Recall()).build_context(query=query)
    assert at_once.memory_text == one_by_one.memory_text
    assert all(place in at_once.memory_text for place in ("Bergen", "Lyon", "Osaka"))


def test_a_damaged_record_in_one_log_does_not_keep_the_users_other_sessions_from_recall(
    store: RedisStore, client: Any, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The logs read at once fail as a whole on one damaged record: each is then read on
    its own, and only the damaged session is left out."""
    _returning_user(store)
    client.hset(session_key(prefix, "trip-1", "log"), "1", "not json")
    memory = ConversationMemory("new", store, user_id="ana", recall=Recall())
    with caplog.at_level(logging.WARNING, logger="convmem"):
        context = memory.build_context(query="Where did my trips take me?")
    assert "Bergen" in context.memory_text and "Osaka" in context.memory_text
    assert "Lyon" not in context.memory_text
    assert "could not read 4 session logs at once" in caplog.text
    assert "trip-1" in caplog.text


def requests_sent(store: RedisStore, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The requests `store` sends from now on (a command, a pipeline or a script each: a
    round trip each), until ``monkeypatch.undo()``."""
    perform = store._perform
    sent: list[Any] = []

    def recording(request: Any) -> Any:
        sent.append(request)
        return perform(request)

    monkeypatch.setattr(store, "_perform", recording)
    return sent


def test_many_logs_are_read_a_bounded_pipeline_at_a_time(
    store: RedisStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [f"s{number}" for number in range(LOGS_PER_PIPELINE * 2 + 3)]
    for number, session_id in enumerate(ids):
        store.append(session_id, [user(f"message {number}.{n}") for n in range(number % 3 + 1)])
    requests = requests_sent(store, monkeypatch)
    found = store.read_logs(ids)
    monkeypatch.undo()
    assert len(requests) == 3
    assert all(len(request.commands) <= 3 * LOGS_PER_PIPELINE for request in requests)
    assert list(found) == ids
    for session_id in ids:
        assert found[session_id].messages == store.messages(session_id)
        assert found[session_id].stats == found[session_id].stats_after == store.stats(session_id)


# -- a user's scope in one round trip -------------------------------------------------------------


def test_a_users_scope_read_again_takes_one_round_trip_and_sees_what_other_stores_changed(
    target: Target, store: RedisStore, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store guesses the user's sessions from its last read: one round trip while they
    stay the same, a second one for sessions another process added, none kept that it
    forgot."""
    other = RedisStore(target.url, cluster=target.cluster, prefix=prefix)
    for number in range(3):
        store.append(f"s{number}", [user(f"message {number}")], user_id="ana")
        store.put_state(f"s{number}", "facts", f"facts {number}")
    trips = requests_sent(store, monkeypatch)

    def scope_trips() -> tuple[list[str], set[str], int]:
        trips.clear()
        scope = store.read_user_scope("new", ["summary"], "ana", "facts")
        assert scope.user_sessions == other.user_session_stats("ana")
        return [s.session_id for s in scope.user_sessions], set(scope.user_states), len(trips)

    assert scope_trips() == (["s0", "s1", "s2"], {"s0", "s1", "s2"}, 2)  # nothing to guess from
    assert scope_trips() == (["s0", "s1", "s2"], {"s0", "s1", "s2"}, 1)
    other.append("s3", [user("added elsewhere")], user_id="ana")
    other.delete_state("s1", "facts")
    assert scope_trips() == (["s0", "s1", "s2", "s3"], {"s0", "s2"}, 2)
    assert scope_trips() == (["s0", "s1", "s2", "s3"], {"s0", "s2"}, 1)
    other.clear("s0")
    other.append("s0", [user("now bob's")], user_id="bob")
    assert scope_trips() == (["s1", "s2", "s3"], {"s2"}, 1)  # s0 is bob's now
    other.close()

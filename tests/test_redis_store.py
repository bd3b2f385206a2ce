"""What only the Redis stores promise: key layout and escaping, TTL, errors, and the async twin."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator

import pytest
import redis
from redis_server import RedisUnavailable, delete_prefix, free_port, new_prefix, shared_redis_url

from convmem import Message, StoreError, TurnStatus
from convmem._errors import ConfigError, InvalidMessageError
from convmem._redis_store import AsyncRedisStore, RedisStore

pytestmark = pytest.mark.redis

HOSTILE_IDS = ["a", "a*", "a?", "*", "a:b", "a:b:log", "{a}", "a}", "a%3Ab", "../x", "a\x00b", "会话", "x" * 10_000]


@pytest.fixture(scope="session")
def redis_url() -> str:
    try:
        return shared_redis_url()
    except RedisUnavailable as exc:
        pytest.skip(f"Redis cannot be started at all: {exc}")


@pytest.fixture
def prefix(redis_url: str) -> Iterator[str]:
    chosen = new_prefix()
    yield chosen
    delete_prefix(redis_url, chosen)


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    raw = redis.Redis.from_url(redis_url, decode_responses=True)
    yield raw
    raw.close()


@pytest.fixture
def store(redis_url: str, prefix: str) -> Iterator[RedisStore]:
    opened = RedisStore(redis_url, prefix=prefix)
    yield opened
    opened.close()


@pytest.fixture
async def async_store(redis_url: str, prefix: str) -> AsyncIterator[AsyncRedisStore]:
    opened = AsyncRedisStore(redis_url, prefix=prefix)
    yield opened
    await opened.close()


def user(text: str) -> Message:
    return Message.create("user", text)


def keys_of(client: redis.Redis, prefix: str) -> list[str]:
    return sorted(client.scan_iter(match=f"{prefix}:*", count=1000))


# -- key layout -------------------------------------------------------------------------------


def test_keys_hold_no_raw_separator_glob_or_control_characters(
    store: RedisStore, client: redis.Redis, prefix: str
) -> None:
    for session_id in HOSTILE_IDS:
        store.append(session_id, [user("hi")], user_id=session_id)
        store.put_state(session_id, "summary", "x")
    escaped = r"[A-Za-z0-9_.~%-]+"
    layout = re.compile(
        rf"{re.escape(prefix)}:(sessions|session:{escaped}:(meta|log|state)|user:{escaped}:sessions)"
    )
    keys = keys_of(client, prefix)
    assert len(keys) == 1 + 4 * len(HOSTILE_IDS)
    assert [k for k in keys if not layout.fullmatch(k)] == []


def test_stores_with_different_prefixes_do_not_see_each_other(redis_url: str, prefix: str) -> None:
    other_prefix = new_prefix()
    first = RedisStore(redis_url, prefix=prefix)
    second = RedisStore(redis_url, prefix=other_prefix)
    try:
        first.append("s", [user("first")], user_id="ana")
        second.append("s", [user("second")], user_id="ana")
        assert [m.text for m in first.messages("s")] == ["first"]
        second.forget_user("ana")
        assert [m.text for m in first.messages("s")] == ["first"]
        assert second.sessions() == []
    finally:
        first.close()
        second.close()
        delete_prefix(redis_url, other_prefix)


def test_records_are_stored_as_plain_json(store: RedisStore, client: redis.Redis, prefix: str) -> None:
    store.append("s", [Message.create("user", "多多 is my dog", metadata={"k": 1})])
    raw = client.hget(f"{prefix}:session:s:log", "1")
    assert isinstance(raw, str)
    record = json.loads(raw)
    assert record["role"] == "user"
    assert json.loads(record["content"]) == "多多 is my dog"


def test_sync_and_async_stores_share_one_layout(redis_url: str, prefix: str) -> None:
    sync_store = RedisStore(redis_url, prefix=prefix)

    async def write_async() -> None:
        async with AsyncRedisStore(redis_url, prefix=prefix) as async_store:
            await async_store.append("s", [user("from async")], user_id="ana")

    try:
        sync_store.append("s", [user("from sync")])
        asyncio.run(write_async())
        assert [m.text for m in sync_store.messages("s")] == ["from sync", "from async"]
        assert sync_store.sessions(user_id="ana") == ["s"]
    finally:
        sync_store.close()


# -- TTL ----------------------------------------------------------------------------------------


def test_a_ttl_is_set_on_every_key_of_the_session(redis_url: str, prefix: str, client: redis.Redis) -> None:
    with RedisStore(redis_url, prefix=prefix, ttl_seconds=60) as store:
        store.append("s", [user("hi")], user_id="ana")
        store.put_state("s", "summary", "x")
    for key in ("session:s:meta", "session:s:log", "session:s:state", "user:ana:sessions"):
        assert 0 < client.pttl(f"{prefix}:{key}") <= 60_000, key


@pytest.mark.parametrize("write", ["append", "set_status", "put_state", "delete_state"])
def test_every_write_refreshes_the_ttl_of_all_session_keys(
    redis_url: str, prefix: str, client: redis.Redis, write: str
) -> None:
    with RedisStore(redis_url, prefix=prefix, ttl_seconds=60) as store:
        store.append("s", [user("hi")])
        store.put_state("s", "summary", "x")
        keys = [f"{prefix}:session:s:{part}" for part in ("meta", "log", "state")]
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
    redis_url: str, prefix: str, client: redis.Redis
) -> None:
    with RedisStore(redis_url, prefix=prefix, ttl_seconds=0.2) as store:
        store.append("s", [user("hi")], user_id="ana")
        time.sleep(0.5)
        assert store.messages("s") == []
        assert store.sessions() == []
        assert store.sessions(user_id="ana") == []
        assert store.stats("s").message_count == 0
        assert store.expire_idle(0) == []
        assert keys_of(client, prefix) == []


def test_without_a_ttl_keys_never_expire(store: RedisStore, client: redis.Redis, prefix: str) -> None:
    store.append("s", [user("hi")])
    assert client.pttl(f"{prefix}:session:s:log") == -1


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
    store: RedisStore, client: redis.Redis, prefix: str
) -> None:
    client.set(f"{prefix}:session:s:log", "not a hash")
    with pytest.raises(StoreError, match="key prefix"):
        store.append("s", [user("hi")])
    assert store.stats("s").message_count == 0
    assert store.sessions() == []


def test_damaged_counters_refuse_an_append_without_writing_any_of_it(
    store: RedisStore, client: redis.Redis, prefix: str
) -> None:
    store.append("s", [user("a")])
    meta = f"{prefix}:session:s:meta"
    client.hset(meta, "count", "garbage")
    with pytest.raises(StoreError, match="damaged"):
        store.append("s", [user("b"), user("c")])
    assert client.hlen(f"{prefix}:session:s:log") == 1
    assert client.hget(meta, "last_seq") == "1"


def test_a_message_that_is_not_utf8_is_refused_before_anything_is_written(store: RedisStore) -> None:
    broken = dataclasses.replace(user("ok"), content="lone \ud800 surrogate")
    with pytest.raises(InvalidMessageError, match="UTF-8"):
        store.append("s", [user("first"), broken])
    assert store.sessions() == []


def test_a_passed_client_is_used_and_left_open(redis_url: str, prefix: str) -> None:
    own = redis.Redis.from_url(redis_url)
    store = RedisStore(prefix=prefix, client=own)
    store.append("s", [user("hi")])
    store.close()
    assert own.ping() is True
    assert own.exists(f"{prefix}:session:s:log") == 1
    own.close()


def test_a_client_with_decoded_responses_works_too(redis_url: str, prefix: str) -> None:
    own = redis.Redis.from_url(redis_url, decode_responses=True)
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


async def test_async_calls_beyond_the_pool_size_wait_for_a_connection(redis_url: str, prefix: str) -> None:
    async with AsyncRedisStore(redis_url, prefix=prefix, max_connections=2) as small:
        batches = await asyncio.gather(*(small.append("s", [user(f"m{i}")]) for i in range(40)))
        assert sorted(m.seq or 0 for batch in batches for m in batch) == list(range(1, 41))


def test_threads_beyond_the_pool_size_wait_for_a_connection(redis_url: str, prefix: str) -> None:
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
    redis_url: str, prefix: str
) -> None:
    with RedisStore(redis_url, prefix=prefix, ttl_seconds=0.2) as short_lived:
        short_lived.append("s", [user("a")])
        time.sleep(0.4)
        assert short_lived.put_state("s", "summary", "late", expected_version=0, requires_seq=1) is None
        assert short_lived.get_state("s", "summary") is None
        assert short_lived.sessions() == []


def test_damaged_counters_refuse_a_state_write_requiring_a_seq(
    store: RedisStore, client: redis.Redis, prefix: str
) -> None:
    store.append("s", [user("a")])
    client.hset(f"{prefix}:session:s:meta", "last_seq", "not a number")
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


async def test_async_store_raises_store_error_when_unreachable() -> None:
    port = free_port()
    store = AsyncRedisStore(f"redis://127.0.0.1:{port}/0", socket_timeout=1)
    with pytest.raises(StoreError, match=rf"127\.0\.0\.1:{port}"):
        await store.append("s", [user("hi")])
    await store.close()

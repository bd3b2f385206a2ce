"""Recall vectors kept in PostgreSQL: a new server loads them instead of embedding again,
and every way a session or its log goes away takes its vectors with it."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator, Sequence

import numpy as np
import psycopg
import pytest

import convmem
from convmem import (
    AsyncPostgresStore,
    ConfigError,
    ConversationMemory,
    HashingEmbedder,
    Message,
    PostgresStore,
    Recall,
    TiktokenCounter,
)
from convmem._stores.postgres.vectors import PostgresVectorIndex

pytestmark = pytest.mark.postgres

DIMENSION = 64
COUNTER = TiktokenCounter()


class CountingEmbedder(HashingEmbedder):
    """A hashing embedder that counts the texts it embeds as documents; `name` may be changed."""

    def __init__(self, dimension: int = DIMENSION, *, name: str | None = None) -> None:
        super().__init__(dimension)
        if name is not None:
            self._name = name
        self.documents: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.documents.extend(texts)
        return super().embed_documents(texts)


@pytest.fixture
def servers(postgres_url: str, schema: str) -> Iterator[tuple[PostgresStore, PostgresStore]]:
    """Two store objects on one schema: two servers of one application."""
    first = PostgresStore(postgres_url, schema=schema)
    second = PostgresStore(postgres_url, schema=schema)
    yield first, second
    first.close()
    second.close()


def server(store: PostgresStore, embedder: CountingEmbedder | None = None) -> tuple[Recall, CountingEmbedder]:
    embedder = embedder or CountingEmbedder()
    return Recall(embedder, index_factory=store.vector_index_factory(embedder)), embedder


def sql(url: str, text: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(text, params)
        return cursor.fetchall() if cursor.description is not None else []


def rows(url: str, schema: str, session_id: str | None = None) -> list[tuple[object, ...]]:
    where = "" if session_id is None else " WHERE session_id = %s"
    params = () if session_id is None else (session_id,)
    return sql(
        url,
        f'SELECT session_id, model, unit_id, generation, dimension, vector FROM "{schema}".vectors{where} '
        "ORDER BY session_id, unit_id",
        params,
    )


PETS = [
    "My dog is called Duoduo and he loves chasing squirrels.",
    "The cat sleeps on the radiator all winter.",
    "We planted tomatoes and basil on the balcony.",
    "My sister lives in Lisbon and teaches piano.",
    "The train to Porto leaves at seven in the morning.",
    "I am allergic to peanuts, so no satay please.",
]


def fill(
    store: PostgresStore, recall: Recall, session_id: str = "s", *, user_id: str | None = None
) -> list[Message]:
    stored = store.append(session_id, [Message.create("user", text) for text in PETS], user_id=user_id)
    recall.add(session_id, stored, store=store)
    return stored


def search(recall: Recall, store: PostgresStore, query: str, session_id: str = "s") -> str:
    return recall.search(session_id, query, store=store, max_tokens=400, counter=COUNTER).text


# -- a new server ---------------------------------------------------------------------------


def test_a_new_server_searches_stored_vectors_without_embedding_any_unit(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, second = servers
    recall_one, embedder_one = server(first)
    fill(first, recall_one)
    assert len(embedder_one.documents) == len(PETS)

    recall_two, embedder_two = server(second)
    text = search(recall_two, second, "what is my dog called?")

    assert "Duoduo" in text
    assert embedder_two.documents == []
    assert recall_two.stats("s", store=second)["vectors"] == len(PETS)
    assert recall_two.stats("s", store=second)["kind"] == "postgres"


def test_stored_rows_are_the_float32_bytes_of_the_unit_vectors(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, _ = servers
    recall, embedder = server(first)
    stored = fill(first, recall)
    generation = first.stats("s").generation

    table = rows(postgres_url, schema, "s")
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in table] == [
        ("s", embedder.name, m.seq, generation, DIMENSION) for m in stored
    ]
    expected = HashingEmbedder(DIMENSION).embed_documents(PETS)
    for row, vector in zip(table, expected, strict=True):
        data = bytes(row[5])  # type: ignore[arg-type]
        assert len(data) == 4 * DIMENSION
        np.testing.assert_allclose(np.frombuffer(data, dtype="<f4"), vector, rtol=1e-6, atol=1e-7)


def test_a_server_sees_vectors_another_server_added_after_it_loaded_them(
    servers: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = servers
    recall_one, _ = server(first)
    fill(first, recall_one)
    recall_two, embedder_two = server(second)
    assert "Duoduo" in search(recall_two, second, "dog")

    later = first.append("s", [Message.create("user", "Our parrot Kiwi whistles the national anthem.")])
    recall_one.add("s", later, store=first)
    assert "Kiwi" in search(recall_two, second, "which bird of mine whistles an anthem?")
    index = recall_two._mirrors.find("s").index
    assert index is not None and later[0].seq in index
    # The unit it found stored is not embedded again by this server's next add.
    own = second.append("s", [Message.create("user", "Kiwi also likes apples.")])
    recall_two.add("s", own, store=second)
    assert embedder_two.documents == ["Kiwi also likes apples."]


def test_a_session_dropped_from_the_bounded_cache_comes_back_from_the_table(
    servers: tuple[PostgresStore, PostgresStore],
) -> None:
    first, _ = servers
    embedder = CountingEmbedder()
    recall = Recall(embedder, index_factory=first.vector_index_factory(embedder), max_sessions=1)
    fill(first, recall, "one")
    fill(first, recall, "two")  # "one" leaves this process
    assert recall.stats("one", store=first)["vectors"] == 0
    embedded = len(embedder.documents)
    assert "Duoduo" in search(recall, first, "what is my dog called?", "one")
    assert len(embedder.documents) == embedded
    assert recall.stats("one", store=first)["vectors"] == len(PETS)


def test_sessions_are_walls_in_the_table_and_in_search(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, second = servers
    recall_one, _ = server(first)
    fill(first, recall_one, "ana")
    bob = first.append("bob", [Message.create("user", "I play chess on Sundays.")])
    recall_one.add("bob", bob, store=first)

    recall_two, _ = server(second)
    assert "Duoduo" not in search(recall_two, second, "what is my dog called?", "bob")
    assert {r[0] for r in rows(postgres_url, schema, "bob")} == {"bob"}
    assert len(rows(postgres_url, schema, "bob")) == 1


def test_memories_on_two_servers_share_the_vectors(
    servers: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = servers
    recall_one, _ = server(first)
    memory = ConversationMemory("chat", first, recall=recall_one)
    memory.add_turn("My dog is called Duoduo.", "What a lovely name!")
    for day in range(30):
        memory.add_turn(f"Day {day}: the weather report said rain again.", "Take an umbrella.")

    recall_two, embedder_two = server(second)
    context = ConversationMemory("chat", second, recall=recall_two).build_context(
        query="What is my dog called?", budget=300
    )
    assert "Duoduo" in context.to_text()
    assert embedder_two.documents == []
    assert (
        recall_two.stats("chat", store=second)["vectors"]
        == recall_one.stats("chat", store=first)["vectors"]
        > 0
    )


# -- deletes take the vectors with them -------------------------------------------------------


def test_forget_session_with_the_async_store_deletes_the_vectors(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, _ = servers
    recall, _ = server(first)
    fill(first, recall, "s")
    fill(first, recall, "kept")

    async def forget() -> None:
        async with AsyncPostgresStore(postgres_url, schema=schema) as store:
            await convmem.aforget_session(store, "s", recall=recall)

    asyncio.run(forget())
    assert rows(postgres_url, schema, "s") == []
    assert len(rows(postgres_url, schema, "kept")) == len(PETS)
    assert recall.stats("s", store=first)["vectors"] == 0


def test_recall_forget_deletes_the_sessions_rows_for_every_server(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, second = servers
    recall_one, _ = server(first)
    fill(first, recall_one, "s")
    fill(first, recall_one, "kept")
    recall_two, _ = server(second)
    recall_two.forget("s", store=second)  # a server that never mirrored the session
    assert rows(postgres_url, schema, "s") == []
    assert len(rows(postgres_url, schema, "kept")) == len(PETS)


def test_clear_deletes_the_sessions_vectors(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, _ = servers
    recall, _ = server(first)
    fill(first, recall, "s")
    fill(first, recall, "kept")
    first.clear("s")
    assert rows(postgres_url, schema, "s") == []
    assert len(rows(postgres_url, schema, "kept")) == len(PETS)


def test_forget_user_deletes_the_vectors_of_that_users_sessions_only(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, _ = servers
    recall, _ = server(first)
    fill(first, recall, "ana-1", user_id="ana")
    fill(first, recall, "ana-2", user_id="ana")
    fill(first, recall, "bob-1", user_id="bob")
    assert first.forget_user("ana") == ["ana-1", "ana-2"]
    assert {r[0] for r in rows(postgres_url, schema)} == {"bob-1"}


def test_expire_idle_deletes_the_vectors_of_expired_sessions(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, _ = servers
    recall, _ = server(first)
    fill(first, recall, "old")
    fill(first, recall, "fresh")
    sql(
        postgres_url,
        f'UPDATE "{schema}".sessions SET updated_at = updated_at - 7200 WHERE session_id = %s',
        ("old",),
    )
    assert first.expire_idle(3600) == ["old"]
    assert {r[0] for r in rows(postgres_url, schema)} == {"fresh"}


def test_delete_messages_drops_the_old_generations_vectors_and_a_new_server_serves_none_of_them(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, second = servers
    recall_one, _ = server(first)
    stored = fill(first, recall_one)
    dog = stored[0].seq
    first.delete_messages("s", [dog])
    assert rows(postgres_url, schema, "s") == []  # in the transaction that changed the generation

    recall_two, embedder_two = server(second)
    assert "Duoduo" not in search(recall_two, second, "what is my dog called?")
    assert sorted(embedder_two.documents) == sorted(PETS[1:])
    generation = first.stats("s").generation
    table = rows(postgres_url, schema, "s")
    assert {r[3] for r in table} == {generation}
    assert dog not in {r[2] for r in table}


def test_a_server_holding_the_session_stores_what_it_kept_under_the_new_generation(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, second = servers
    recall_one, embedder_one = server(first)
    stored = fill(first, recall_one)
    second.delete_messages("s", [stored[0].seq])  # another server edits the log
    search(recall_one, first, "cat")  # this server follows the new log
    assert len(embedder_one.documents) == len(PETS)  # nothing embedded again

    generation = first.stats("s").generation
    table = rows(postgres_url, schema, "s")
    assert [(r[2], r[3]) for r in table] == [(m.seq, generation) for m in stored[1:]]
    recall_three, embedder_three = server(second)
    search(recall_three, second, "cat")
    assert embedder_three.documents == []


def test_a_replaced_message_is_never_served_with_its_old_vector(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, second = servers
    recall_one, _ = server(first)
    stored = fill(first, recall_one)
    seq = stored[0].seq
    assert seq is not None
    recall_two, _ = server(second)
    search(recall_two, second, "dog")  # the second server holds the old vector

    new_text = "My hamster is called Biscuit."
    first.replace_message("s", seq, Message.create("user", new_text))
    assert rows(postgres_url, schema, "s") == []
    text = search(recall_two, second, "what is my hamster called?")
    recall_two.catch_up("s", second)

    assert "Duoduo" not in text
    expected = HashingEmbedder(DIMENSION).embed_documents([new_text])[0]
    table = {r[2]: bytes(r[5]) for r in rows(postgres_url, schema, "s")}  # type: ignore[arg-type]
    np.testing.assert_allclose(np.frombuffer(table[seq], dtype="<f4"), expected, rtol=1e-6, atol=1e-7)
    index = recall_two._mirrors.find("s").index
    assert index is not None
    np.testing.assert_allclose(index.vectors([seq])[seq], expected, rtol=1e-6, atol=1e-7)


def test_a_late_write_for_an_old_generation_stores_nothing(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, _ = servers
    first.append("s", [Message.create("user", "one"), Message.create("user", "two")])
    index = PostgresVectorIndex(first, session_id="s", dimension=DIMENSION, model="m")
    first.delete_messages("s", [2])  # the generation moves on after the index read it
    index.add([1], HashingEmbedder(DIMENSION).embed_documents(["one"]))
    assert rows(postgres_url, schema, "s") == []
    assert 1 in index  # still served here, until follow_generation says what stays


def test_racing_writers_and_edits_leave_only_vectors_of_the_current_log(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, second = servers
    recall_one, _ = server(first)
    recall_two, _ = server(second)
    stored = fill(first, recall_one)
    failures: list[BaseException] = []

    def writer(store: PostgresStore, recall: Recall, name: str) -> None:
        try:
            for i in range(12):
                new = store.append("s", [Message.create("user", f"{name} note {i}: the {name} likes tea")])
                recall.add("s", new, store=store)
                search(recall, store, f"what does {name} like?")
        except BaseException as exc:  # reported below
            failures.append(exc)

    def editor() -> None:
        try:
            for i in range(6):
                first.replace_message(
                    "s", stored[i].seq or 0, Message.create("user", f"edited {i}: sunflowers")
                )
                recall_two.catch_up("s", second)
            first.delete_messages("s", [stored[-1].seq or 0])
        except BaseException as exc:
            failures.append(exc)

    threads = [
        threading.Thread(target=writer, args=(first, recall_one, "ana")),
        threading.Thread(target=writer, args=(second, recall_two, "bob")),
        threading.Thread(target=editor),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    recall_one.catch_up("s", first)
    recall_two.catch_up("s", second)

    log = {m.seq: m.text for m in first.messages("s")}
    generation = first.stats("s").generation
    table = rows(postgres_url, schema, "s")
    assert table, "the racing writers stored nothing"
    assert {r[3] for r in table} == {generation}
    assert {r[2] for r in table} <= log.keys()
    embedder = HashingEmbedder(DIMENSION)
    for _, _, unit, _, _, data in table:
        expected = embedder.embed_documents([log[unit]])[0]  # type: ignore[index]
        np.testing.assert_allclose(np.frombuffer(bytes(data), dtype="<f4"), expected, rtol=1e-6, atol=1e-7)  # type: ignore[arg-type]
    for recall in (recall_one, recall_two):
        index = recall._mirrors.find("s").index
        assert index is not None
        for unit, vector in index.vectors(index.ids()).items():
            assert unit in log
            np.testing.assert_allclose(vector, embedder.embed_documents([log[unit]])[0], rtol=1e-6, atol=1e-7)


# -- what is not served ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(lambda: CountingEmbedder(name="another-model"), id="another model name"),
        pytest.param(lambda: CountingEmbedder(32, name=f"hashing-v1-{DIMENSION}"), id="another dimension"),
    ],
)
def test_vectors_of_another_embedder_are_not_served_but_embedded_again(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str, other: object
) -> None:
    first, second = servers
    recall_one, _ = server(first)
    fill(first, recall_one)
    embedder_two = other()  # type: ignore[operator]
    recall_two, _ = server(second, embedder_two)
    assert "Duoduo" in search(recall_two, second, "what is my dog called?")
    assert sorted(embedder_two.documents) == sorted(PETS)
    index = recall_two._mirrors.find("s").index
    assert index is not None and index.dimension == embedder_two.dimension
    assert all(v.shape == (embedder_two.dimension,) for v in index.vectors(index.ids()).values())


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(b"\x00\x01\x02", id="wrong length"),
        pytest.param(np.full(DIMENSION, np.nan, dtype="<f4").tobytes(), id="not finite"),
        pytest.param(bytes(4 * DIMENSION), id="zero vector"),
    ],
)
def test_a_damaged_row_is_skipped_with_a_warning_and_embedded_again(
    servers: tuple[PostgresStore, PostgresStore],
    postgres_url: str,
    schema: str,
    damage: bytes,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = servers
    recall_one, _ = server(first)
    stored = fill(first, recall_one)
    seq = stored[2].seq
    sql(
        postgres_url,
        f'UPDATE "{schema}".vectors SET vector = %s WHERE session_id = %s AND unit_id = %s',
        (damage, "s", seq),
    )
    recall_two, embedder_two = server(second)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        assert "tomatoes" in search(recall_two, second, "what did we plant on the balcony?")
    assert any("damaged" in r.getMessage() and f"unit {seq}" in r.getMessage() for r in caplog.records)
    assert embedder_two.documents == [PETS[2]]
    table = {r[2]: bytes(r[5]) for r in rows(postgres_url, schema, "s")}  # type: ignore[arg-type]
    assert len(table[seq]) == 4 * DIMENSION and np.isfinite(np.frombuffer(table[seq], dtype="<f4")).all()


# -- the schema -------------------------------------------------------------------------------


def test_a_schema_of_version_3_gains_the_vectors_table_and_keeps_its_sessions(
    postgres_url: str, schema: str
) -> None:
    with PostgresStore(postgres_url, schema=schema) as store:
        store.append("s", [Message.create("user", PETS[0])])
        generation = store.stats("s").generation
    # As convmem before migration 4 left it.
    sql(
        postgres_url,
        f'DROP TABLE "{schema}".recall_histories, "{schema}".recall_index_sessions, '
        f'"{schema}".recall_units, "{schema}".recall_postings; '
        f'DROP FUNCTION "{schema}".recall_index_session_gone()',
    )
    sql(postgres_url, f'DROP TABLE "{schema}".vectors')
    sql(postgres_url, f'DELETE FROM "{schema}".schema_version WHERE version >= 4')
    with PostgresStore(postgres_url, schema=schema) as store:
        assert store.stats("s").generation == generation
        recall, embedder = server(store)
        assert "Duoduo" in search(recall, store, "dog")
        assert embedder.documents == [PETS[0]]
    assert [(r[0], r[3]) for r in rows(postgres_url, schema)] == [("s", generation)]


# -- the index on its own ----------------------------------------------------------------------


def test_search_ranks_by_cosine_skips_excluded_ids_and_never_returns_more_than_held(
    servers: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = servers
    first.append("s", [Message.create("user", "x")])
    index = PostgresVectorIndex(first, session_id="s", dimension=3, model="m")
    index.add([1, 2, 3], np.array([[1, 0, 0], [0, 2, 0], [1, 1, 0]], dtype=np.float32))
    assert [u for u, _ in index.search(np.array([1, 0.1, 0]), 2)] == [1, 3]
    assert [u for u, _ in index.search(np.array([1, 0.1, 0]), 10, exclude=[1])] == [3, 2]
    assert index.search(np.array([0, 1, 0]), 1)[0] == (2, pytest.approx(1.0))
    index.remove([2, 99])
    assert index.ids() == {1, 3}
    again = PostgresVectorIndex(second, session_id="s", dimension=3, model="m")
    assert again.ids() == {1, 3}
    np.testing.assert_allclose(again.vectors([3])[3], np.array([1, 1, 0]) / np.sqrt(2), rtol=1e-6)
    again.clear()
    assert PostgresVectorIndex(first, session_id="s", dimension=3, model="m").ids() == set()


def test_newer_rows_of_another_dimension_are_passed_over_by_search(
    servers: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = servers
    first.append("s", [Message.create("user", "x")])
    mine = PostgresVectorIndex(first, session_id="s", dimension=3, model="m")
    mine.add([1], np.array([[1.0, 0, 0]]))
    assert mine.search(np.array([1.0, 0, 0]), 5) == [(1, pytest.approx(1.0))]  # read up to its own write
    other = PostgresVectorIndex(second, session_id="s", dimension=4, model="m")
    other.add([2], np.array([[0, 1.0, 0, 0]]))
    assert mine.search(np.array([0, 1.0, 0]), 5) == [(1, pytest.approx(0.0))]
    assert mine.ids() == {1}
    mine.add([3], np.array([[0, 1.0, 0]]))
    assert PostgresVectorIndex(second, session_id="s", dimension=3, model="m").ids() == {1, 3}


def test_many_removals_leave_search_and_vectors_exact(
    servers: tuple[PostgresStore, PostgresStore],
) -> None:
    first, second = servers
    first.append("s", [Message.create("user", "x")])
    matrix = np.random.default_rng(5).normal(size=(300, 8)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    index = PostgresVectorIndex(first, session_id="s", dimension=8, model="m")
    index.add(range(300), matrix)
    index.remove(range(0, 300, 3))
    index.remove(range(1, 300, 3))
    index.add([1000], matrix[:1])
    kept = [u for u in range(300) if u % 3 == 2] + [1000]
    assert index.ids() == set(kept)
    query = matrix[5]
    exact = sorted(kept, key=lambda u: -float(matrix[u if u < 300 else 0] @ query))[:10]
    assert [u for u, _ in index.search(query, 10)] == exact
    loaded = PostgresVectorIndex(second, session_id="s", dimension=8, model="m")
    assert loaded.ids() == set(kept)
    for unit, vector in loaded.vectors(kept).items():
        np.testing.assert_allclose(vector, matrix[unit if unit < 300 else 0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    ("ids", "vectors", "complaint"),
    [
        ([1], np.zeros((1, 3)), "zero vector"),
        ([1], np.array([[np.nan, 1, 0]]), "NaN"),
        ([1], np.ones((1, 4)), "3 dimensions"),
        ([1, 1], np.ones((2, 3)), "same id twice"),
        (["1"], np.ones((1, 3)), "unit ids must be ints"),
    ],
)
def test_bad_vectors_are_refused_before_anything_is_written(
    servers: tuple[PostgresStore, PostgresStore],
    postgres_url: str,
    schema: str,
    ids: list[object],
    vectors: np.ndarray,
    complaint: str,
) -> None:
    first, _ = servers
    first.append("s", [Message.create("user", "x")])
    index = PostgresVectorIndex(first, session_id="s", dimension=3, model="m")
    with pytest.raises(ConfigError, match=complaint):
        index.add(ids, vectors)  # type: ignore[arg-type]
    assert rows(postgres_url, schema) == []


@pytest.mark.parametrize("embedder", [None, 42, ""])
def test_the_factory_needs_the_embedder_or_its_name(
    servers: tuple[PostgresStore, PostgresStore], embedder: object
) -> None:
    with pytest.raises(ConfigError, match="embedder"):
        servers[0].vector_index_factory(embedder)  # type: ignore[arg-type]


def test_ids_that_look_like_sql_are_stored_as_they_are(
    servers: tuple[PostgresStore, PostgresStore], postgres_url: str, schema: str
) -> None:
    first, second = servers
    hostile = "x'); DROP TABLE vectors; --"
    recall, _ = server(first, CountingEmbedder(name="m'; DELETE FROM sessions; --"))
    fill(first, recall, hostile)
    recall_two, embedder_two = server(second, CountingEmbedder(name="m'; DELETE FROM sessions; --"))
    assert "Duoduo" in search(recall_two, second, "dog", hostile)
    assert embedder_two.documents == []
    assert {r[0] for r in rows(postgres_url, schema)} == {hostile}

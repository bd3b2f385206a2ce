"""On a `PostgresStore` opened with ``lexical_index="tsvector"``, recall's keyword index lives
in the ``lexical_docs`` table: shared by every server, kept to the log's generation, deleted
with what it indexes, and safe against any query text."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pytest

import convmem
from convmem import ConfigError, ConversationMemory, Message, PostgresStore, Recall, TiktokenCounter
from convmem._recall.lexical import BM25TextIndex, tokenize
from convmem._stores.postgres.lexical import PostgresLexicalIndex
from convmem._stores.postgres.postings import POSTINGS_BLOCK_BITS, decode_postings, document_terms

pytestmark = pytest.mark.postgres

COUNTER = TiktokenCounter()
FILLER = [
    ("user", "How was your weekend?"),
    ("assistant", "Pretty quiet, I mostly read a novel about sailors."),
    ("user", "Work has been busy with the quarterly report."),
    ("assistant", "Deadlines always pile up at the end of a quarter."),
]
CORGI = "I adopted a corgi named Duoduo last spring."


@pytest.fixture
def store(postgres_url: str, schema: str) -> Iterator[PostgresStore]:
    opened = PostgresStore(postgres_url, schema=schema, lexical_index="tsvector")
    yield opened
    opened.close()


def append(
    store: PostgresStore, session_id: str, items: Sequence[tuple[str, str]], user_id: str | None = None
) -> list[Message]:
    messages = []
    for role, text in items:
        message = Message.create(role, text)
        messages.append(dataclasses.replace(message, token_count=COUNTER.count_message(message)))
    return store.append(session_id, messages, user_id=user_id)


def recalled(recall: Recall, store: PostgresStore, query: str, session_id: str = "s1") -> list[str]:
    result = recall.search(session_id, query, store=store, counter=COUNTER, max_tokens=400)
    return [item.text for item in result.items]


def doc_rows(url: str, schema: str, session_id: str | None = None) -> list[tuple[str, str, int, list[str]]]:
    """(session, kind, doc id, lexemes) of the lexical documents, of one session or all."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT session_id, kind, doc_id, tsvector_to_array(terms) FROM "{schema}".lexical_docs '
            "WHERE %s::text IS NULL OR session_id = %s ORDER BY session_id, kind, doc_id",
            (session_id, session_id),
        ).fetchall()
    # Less the index's own lexeme (a space and a digest) and the marks of repeated terms.
    return [
        (sid, kind, int(doc), sorted(t for t in terms if not t.startswith(" ") and "\x1e" not in t))
        for sid, kind, doc, terms in rows
    ]


# -- recall by words through the table ----------------------------------------------------------


def test_recall_finds_an_old_message_through_the_tsvector_table(
    store: PostgresStore, postgres_url: str, schema: str
) -> None:
    append(store, "s1", [("user", CORGI), *FILLER])
    recall = Recall()
    assert "Duoduo" in recalled(recall, store, "what is the name of my corgi?")[0]
    assert isinstance(recall._state("s1", store).lexical_messages, PostgresLexicalIndex)
    rows = doc_rows(postgres_url, schema, "s1")
    assert ("s1", "messages", 1, sorted(set(tokenize(CORGI)))) in rows
    assert {kind for _, kind, _, _ in rows} == {"messages", "exchanges"}


def test_a_memory_recalls_english_and_chinese_words_from_the_table(
    store: PostgresStore, postgres_url: str, schema: str
) -> None:
    memory = ConversationMemory("s1", store)
    memory.add("user", "The wifi password at the cabin is heliotrope42.")
    memory.add("user", "我的狗叫多多，它喜欢在公园里追球。")
    for role, text in FILLER * 30:
        memory.add(role, text)
    context = memory.build_context(query="what was the cabin wifi password?", budget=1000)
    assert any("heliotrope42" in item.text for item in context.recalled)
    context = memory.build_context(query="我的狗叫什么名字？", budget=1000)
    assert any("多多" in item.text for item in context.recalled)
    lexemes = {term for _, _, _, terms in doc_rows(postgres_url, schema, "s1") for term in terms}
    assert {"heliotrope42", "多多", "狗叫"} <= lexemes
    memory.close()


@pytest.mark.parametrize(
    "query",
    [
        "a & !b | c:*",
        "corgi' | 'x",
        "corgi:* & (duoduo <-> spring)",
        "say \"corgi\" \\ \\\\ '' ",
        "\\",
        "'",
        ":",
        "😀🐶🎉",
        "corgi " + "x" * 20_000,
        "狗 " * 10_000,
        "",
    ],
)
def test_hostile_queries_give_valid_results(store: PostgresStore, query: str) -> None:
    append(store, "s1", [("user", CORGI), *FILLER])
    recall = Recall()
    texts = recalled(recall, store, query)
    assert all(isinstance(text, str) for text in texts)
    scores = recall._state("s1", store).lexical_scores("messages", query)
    if "corgi" in query:
        assert 1 in scores  # the quoted term still matches, whatever surrounds it
    else:
        assert 1 not in scores


def test_terms_with_tsquery_syntax_round_trip(store: PostgresStore) -> None:
    """Terms never hold these today (tokenize keeps word characters), but the index must
    not depend on it: every term is stored and matched as itself."""
    append(store, "s1", [("user", "x")])
    index = PostgresLexicalIndex(store, "s1", "messages")
    index.follow_log(store.stats("s1").generation)
    hostile = ["a'b", "c\\d", "e:f", "g & !h | i:*", "(", "'", "\\", "狗叫", "😀"]
    queries = store._queries
    for seq, term in enumerate(hostile, start=1):
        # Written as the index writes them (bypassing tokenize, which would split these).
        store._run(
            lambda seq=seq, term=term: queries.write_lexical(
                "s1",
                "messages",
                index._generation,
                [],
                [(seq, b"d", 1, f"{term}\x1f{term}\x1e", 1, f"{term}\x1e2")],
            ),
            "test write",
            transaction=True,
        )
    for seq, term in enumerate(hostile, start=1):
        found = store._run(
            lambda term=term: queries.lexical_matches("s1", "messages", [term]), "test read", transaction=True
        )
        assert (found.documents, found.total_length) == (len(hostile), len(hostile))
        # The term's one posting: its document, held twice (its repeats), of length 1.
        assert {t: [decode_postings(b) for b in blocks] for t, blocks in found.postings.items()} == {
            term: [[(seq, 2, 1)]]
        }, term


def test_a_second_server_finds_old_turns_without_writing(
    postgres_url: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = PostgresStore(postgres_url, schema=schema, lexical_index="tsvector")
    second = PostgresStore(postgres_url, schema=schema, lexical_index="tsvector")
    try:
        append(first, "s1", [("user", CORGI), *FILLER * 10])
        assert "Duoduo" in recalled(Recall(), first, "what is my corgi called?")[0]
        before = doc_rows(postgres_url, schema)
        writes: list[object] = []
        original = second._queries.write_lexical

        def counting(*args: object, **kwargs: object) -> object:
            writes.append(args)
            return original(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(second._queries, "write_lexical", counting)
        assert "Duoduo" in recalled(Recall(), second, "what is my corgi called?")[0]
        assert writes == []
        assert doc_rows(postgres_url, schema) == before
        # New turns appended through the second server are written once, by it.
        append(second, "s1", [("user", "The spare key is under the blue flowerpot.")])
        assert "flowerpot" in recalled(Recall(), second, "where is the spare key?")[0]
        assert len(writes) >= 1
        assert any("flowerpot" in terms for _, _, _, terms in doc_rows(postgres_url, schema))
    finally:
        first.close()
        second.close()


# -- what goes away with the log ---------------------------------------------------------------


def test_delete_and_replace_remove_the_documents_of_the_old_text(
    store: PostgresStore, postgres_url: str, schema: str
) -> None:
    stored = append(store, "s1", [("user", CORGI), *FILLER, ("user", "My locker code is 8812.")])
    recall = Recall()
    assert "Duoduo" in recalled(recall, store, "what is my corgi called?")[0]
    assert any("duoduo" in terms for *_, terms in doc_rows(postgres_url, schema))
    store.delete_messages("s1", [stored[0].seq or 0])
    # Deleted in the same transaction, before any recall runs again.
    assert doc_rows(postgres_url, schema) == []
    assert all("Duoduo" not in text for text in recalled(recall, store, "what is my corgi called?"))
    assert not any("duoduo" in terms for *_, terms in doc_rows(postgres_url, schema))
    assert any("8812" in terms for *_, terms in doc_rows(postgres_url, schema))
    store.replace_message("s1", stored[-1].seq or 0, Message.create("user", "My locker is number 40."))
    assert doc_rows(postgres_url, schema) == []
    assert all("8812" not in text for text in recalled(recall, store, "what is my locker code?"))
    assert not any("8812" in terms for *_, terms in doc_rows(postgres_url, schema))


def test_a_write_from_an_older_generation_is_refused(
    store: PostgresStore, postgres_url: str, schema: str
) -> None:
    stored = append(store, "s1", [("user", CORGI), *FILLER])
    index = PostgresLexicalIndex(store, "s1", "messages")
    index.follow_log(store.stats("s1").generation)
    store.delete_messages("s1", [stored[0].seq or 0])  # a new generation meanwhile
    index.add(1, CORGI)
    index.flush()
    assert doc_rows(postgres_url, schema) == []
    assert index.scores("corgi") == {}


def test_forgetting_and_expiring_sessions_delete_their_documents(
    store: PostgresStore, postgres_url: str, schema: str
) -> None:
    recall = Recall()
    for session_id, user in (("s1", "alice"), ("s2", "alice"), ("s3", "bob"), ("s4", "bob")):
        append(store, session_id, [("user", CORGI), *FILLER], user_id=user)
        assert "Duoduo" in recalled(recall, store, "corgi?", session_id)[0]
    assert {row[0] for row in doc_rows(postgres_url, schema)} == {"s1", "s2", "s3", "s4"}
    convmem.forget_session(store, "s1", recall=recall)
    assert {row[0] for row in doc_rows(postgres_url, schema)} == {"s2", "s3", "s4"}
    store.forget_user("alice")
    assert {row[0] for row in doc_rows(postgres_url, schema)} == {"s3", "s4"}
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'UPDATE "{schema}".sessions SET updated_at = 0 WHERE session_id = %s', ("s3",))
    assert store.expire_idle(3600) == ["s3"]
    assert {row[0] for row in doc_rows(postgres_url, schema)} == {"s4"}
    # The postings of the forgotten sessions went with their documents.
    assert {key[0] for key in postings_rows(postgres_url, schema)} == {"s4"}


# -- opting in ---------------------------------------------------------------------------------


def test_the_default_store_writes_no_documents(postgres_url: str, schema: str) -> None:
    store = PostgresStore(postgres_url, schema=schema)
    try:
        assert store.lexical_index == "process"
        append(store, "s1", [("user", CORGI), *FILLER * 30])
        memory = ConversationMemory("s1", store)
        memory.add("user", "The wifi password at the cabin is heliotrope42.")
        context = memory.build_context(query="what is my corgi called?", budget=1000)
        assert any("Duoduo" in item.text for item in context.recalled)
        assert doc_rows(postgres_url, schema) == []
    finally:
        store.close()


@pytest.mark.parametrize("value", ["fts5", "TSVECTOR", "", None, 1])
def test_an_unknown_lexical_index_is_refused(postgres_url: str, schema: str, value: object) -> None:
    with pytest.raises(ConfigError, match=r"lexical_index must be 'process'.*'tsvector'"):
        PostgresStore(postgres_url, schema=schema, lexical_index=value)  # type: ignore[arg-type]


def test_a_schema_of_version_4_gains_the_table_and_keeps_its_sessions(postgres_url: str, schema: str) -> None:
    with PostgresStore(postgres_url, schema=schema) as store:
        append(store, "s1", [("user", CORGI), *FILLER])
        generation = store.stats("s1").generation
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # as convmem before migration 5 left it
        conn.execute(
            f'DROP TABLE "{schema}".lexical_docs, "{schema}".lexical_stats, "{schema}".lexical_postings'
        )
        conn.execute(f'DELETE FROM "{schema}".schema_version WHERE version >= 5')
    with PostgresStore(postgres_url, schema=schema, lexical_index="tsvector") as store:
        assert store.stats("s1").generation == generation
        assert "Duoduo" in recalled(Recall(), store, "what is my corgi called?")[0]
    assert ("s1", "messages", 1, sorted(set(tokenize(CORGI)))) in doc_rows(postgres_url, schema)


# -- BM25 in SQL: the same scores as in the process ---------------------------------------------

CORPUS = [
    "My corgi Duoduo chases the ball, the ball, the red ball in the park.",
    "The quarterly budget is 300,000 yuan; the budget review is on Friday.",
    "We decided to migrate the database to PostgreSQL with nightly backups.",
    "我的狗叫多多，多多喜欢在公园里追球。",
    "Duoduo is a corgi.",
    "Thanks, that makes sense.",
    "The database migration needs a budget for the corgi-themed dashboard, the database is big.",
    "明天早上去上海的高铁几点出发？上海很远。",
    "Football, football and one ball: the corgi prefers the ball to football.",
]
QUERIES = [
    "what is my corgi called?",
    "database budget",
    "我的狗叫什么名字？",
    "ball ball corgi park Friday",
    "football ball",
    "上海 高铁",
    "no such words anywhere",
    "",
]


def fixed_index(store: PostgresStore, session_id: str = "s1") -> tuple[PostgresLexicalIndex, BM25TextIndex]:
    append(store, session_id, [("user", "x")])
    index = PostgresLexicalIndex(store, session_id, "messages")
    index.follow_log(store.stats(session_id).generation)
    reference = BM25TextIndex()
    for doc_id, text in enumerate(CORPUS, start=1):
        index.add(doc_id, text)
        reference.add(doc_id, text)
    return index, reference


def assert_same_bm25(index: PostgresLexicalIndex, reference: BM25TextIndex) -> None:
    for query in QUERIES:
        ours, theirs = index.scores(query), reference.scores(query)
        assert ours.keys() == theirs.keys(), query
        for doc_id, score in theirs.items():
            assert ours[doc_id] == pytest.approx(score, rel=1e-12), (query, doc_id)
        assert index.full_match(query) == pytest.approx(reference.full_match(query), rel=1e-12), query


def stats_rows(url: str, schema: str) -> dict[tuple[str, str], tuple[int, int]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT session_id, kind, documents, total_length FROM "{schema}".lexical_stats'
        ).fetchall()
        docs = conn.execute(
            f'SELECT session_id, kind, count(*), sum(length) FROM "{schema}".lexical_docs GROUP BY 1, 2'
        ).fetchall()
    stored = {(r[0], r[1]): (int(r[2]), int(r[3])) for r in rows if int(r[2])}
    assert stored == {(r[0], r[1]): (int(r[2]), int(r[3])) for r in docs}, "totals drifted from the rows"
    assert postings_rows(url, schema) == postings_of_docs(url, schema), "postings drifted from the rows"
    return stored


def postings_rows(url: str, schema: str) -> dict[tuple[str, str, str, int], list[tuple[int, int, int]]]:
    """(session, kind, term, block) -> decoded entries of lexical_postings."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT session_id, kind, term, block, postings FROM "{schema}".lexical_postings'
        ).fetchall()
    return {(r[0], r[1], r[2], int(r[3])): decode_postings(bytes(r[4])) for r in rows}


def postings_of_docs(url: str, schema: str) -> dict[tuple[str, str, str, int], list[tuple[int, int, int]]]:
    """What lexical_postings must hold: each term of each document of lexical_docs (of its
    session's current generation), with its count and the document's length, by doc id."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT d.session_id, d.kind, d.doc_id, d.length, tsvector_to_array(d.terms), d.repeats "
            f'FROM "{schema}".lexical_docs AS d JOIN "{schema}".sessions AS s '
            "ON s.session_id = d.session_id AND s.generation = d.generation ORDER BY d.doc_id"
        ).fetchall()
    expected: dict[tuple[str, str, str, int], list[tuple[int, int, int]]] = {}
    for session_id, kind, doc_id, length, lexemes, repeats in rows:
        for term, count in document_terms(lexemes, repeats).items():
            key = (session_id, kind, term, int(doc_id) >> POSTINGS_BLOCK_BITS)
            expected.setdefault(key, []).append((int(doc_id), count, int(length)))
    return expected


def test_scores_and_full_match_equal_bm25_in_the_process(
    store: PostgresStore, postgres_url: str, schema: str
) -> None:
    index, reference = fixed_index(store)
    assert_same_bm25(index, reference)
    # A term held three times counts three times, as in the process.
    assert index.scores("ball")[1] > index.scores("ball").get(2, 0.0)
    assert stats_rows(postgres_url, schema) == {
        ("s1", "messages"): (len(CORPUS), sum(len(tokenize(text)) for text in CORPUS))
    }


def test_removing_and_growing_documents_keep_scores_and_totals_exact(
    store: PostgresStore, postgres_url: str, schema: str
) -> None:
    index, reference = fixed_index(store)
    for doc_id in (2, 5):
        index.remove(doc_id)
        reference.remove(doc_id)
    grown = CORPUS[6] + " And the corgi needs a database of its own."
    index.add(7, grown)
    reference.add(7, grown)
    assert_same_bm25(index, reference)
    assert stats_rows(postgres_url, schema)[("s1", "messages")] == (
        len(reference),
        reference.bm25._total_length,
    )
    # clear() then adding back a subset: the rest (up to the last given) is deleted, the totals follow.
    index.clear()
    reference.clear()
    for doc_id in (1, 3, 4, len(CORPUS)):
        index.add(doc_id, CORPUS[doc_id - 1])
        reference.add(doc_id, CORPUS[doc_id - 1])
    assert_same_bm25(index, reference)
    assert stats_rows(postgres_url, schema)[("s1", "messages")] == (4, reference.bm25._total_length)


def test_the_store_deleting_messages_or_sessions_resets_the_totals(
    store: PostgresStore, postgres_url: str, schema: str
) -> None:
    recall = Recall()
    for session_id, user in (("s1", "alice"), ("s2", "alice"), ("s3", "bob")):
        append(store, session_id, [("user", CORGI), *FILLER, ("user", "My locker code is 8812.")], user)
        assert "Duoduo" in recalled(recall, store, "corgi?", session_id)[0]
    assert {key[0] for key in stats_rows(postgres_url, schema)} == {"s1", "s2", "s3"}
    store.delete_messages("s1", [1])
    assert {key[0] for key in stats_rows(postgres_url, schema)} == {"s2", "s3"}
    # Recall writes the session again from the new log, and the totals are those of its rows.
    assert all("Duoduo" not in text for text in recalled(recall, store, "corgi?", "s1"))
    assert ("s1", "messages") in stats_rows(postgres_url, schema)
    store.replace_message("s2", 6, Message.create("user", "My locker is number 40."))
    assert ("s2", "messages") not in stats_rows(postgres_url, schema)
    store.forget_user("alice")
    store.clear("s3")
    assert stats_rows(postgres_url, schema) == {}


def test_two_servers_and_concurrent_writers_keep_the_totals_exact(postgres_url: str, schema: str) -> None:
    import threading

    stores = [PostgresStore(postgres_url, schema=schema, lexical_index="tsvector") for _ in range(2)]
    try:
        append(stores[0], "s1", [("user", "x")])
        generation = stores[0].stats("s1").generation
        texts = {doc_id: f"{CORPUS[doc_id % len(CORPUS)]} item{doc_id}" for doc_id in range(1, 301)}
        errors: list[BaseException] = []

        def write(worker: int) -> None:
            try:
                index = PostgresLexicalIndex(stores[worker % 2], "s1", "messages")
                index.follow_log(generation)
                # Overlapping halves, added in different orders, some removed again.
                ids = sorted(texts)[worker * 50 : worker * 50 + 200]
                for doc_id in ids if worker % 2 else reversed(ids):
                    index.add(doc_id, texts[doc_id])
                    if doc_id % 17 == worker:
                        index.flush()
                index.flush()
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(worker,)) for worker in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        reference = BM25TextIndex()
        for doc_id, text in texts.items():
            reference.add(doc_id, text)
        assert stats_rows(postgres_url, schema)[("s1", "messages")] == (300, reference.bm25._total_length)
        for server in stores:
            index = PostgresLexicalIndex(server, "s1", "messages")
            index.follow_log(generation)
            for query in ("corgi ball", "database budget item7", "我的狗"):
                ours, theirs = index.scores(query), reference.scores(query)
                assert ours.keys() == theirs.keys()
                assert all(ours[d] == pytest.approx(theirs[d], rel=1e-12) for d in theirs)
    finally:
        for server in stores:
            server.close()


@pytest.mark.parametrize(
    "query",
    [
        "corgi' | 'x",
        "a & !b | c:*",
        "\\ ' \\'",
        " " + "0" * 32,
        "corgi " * 300 + " ".join(f"w{i}" for i in range(400)),
    ],
)
def test_hostile_queries_score_like_bm25_in_the_process(store: PostgresStore, query: str) -> None:
    index, reference = fixed_index(store)
    ours, theirs = index.scores(query), reference.scores(query)
    assert ours.keys() == theirs.keys()
    assert all(ours[d] == pytest.approx(theirs[d], rel=1e-12) for d in theirs)
    assert ("corgi" in query) == bool(ours)


def test_recall_across_sessions_puts_the_table_on_one_scale(store: PostgresStore) -> None:
    """full_match: a long session's matches no longer outweigh a short one's by their idf."""
    append(store, "short", [("user", CORGI), *FILLER], user_id="u")
    append(store, "long", [*FILLER * 40, ("user", "My corgi has a vet appointment.")], user_id="u")
    recall = Recall()
    for session_id in ("short", "long"):
        recalled(recall, store, "corgi named Duoduo", session_id)
        state = recall._state(session_id, store)
        index = state.lexical_messages
        assert isinstance(index, PostgresLexicalIndex)
        scores = state.lexical_scores("messages", "corgi named Duoduo")
        reference = BM25TextIndex()
        for seq, message in enumerate(store.messages(session_id), start=1):
            reference.add(seq, message.text)
        assert index.full_match("corgi named Duoduo") == pytest.approx(
            reference.full_match("corgi named Duoduo"), rel=1e-12
        )
        assert max(scores.values()) > 0


def test_a_schema_of_version_5_keeps_its_documents_and_gains_exact_counts(
    postgres_url: str, schema: str
) -> None:
    with PostgresStore(postgres_url, schema=schema, lexical_index="tsvector") as store:
        append(store, "s1", [("user", CORGI + " Duoduo, Duoduo!"), *FILLER * 5])
        assert "Duoduo" in recalled(Recall(), store, "what is my corgi called?")[0]
        stored = doc_rows(postgres_url, schema)
    # As convmem left it before migration 6: no length, repeats or totals; terms without the tag.
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{schema}".lexical_stats, "{schema}".lexical_postings')
        conn.execute(
            f'UPDATE "{schema}".lexical_docs SET terms = array_to_tsvector(ARRAY(SELECT t FROM '
            "unnest(tsvector_to_array(terms)) AS t WHERE t NOT LIKE ' %'))"
        )
        conn.execute(f'ALTER TABLE "{schema}".lexical_docs DROP COLUMN length, DROP COLUMN repeats')
        conn.execute(f'DELETE FROM "{schema}".schema_version WHERE version >= 6')
    with PostgresStore(postgres_url, schema=schema, lexical_index="tsvector") as store:
        # Old rows answer at once, with their distinct terms as length, and nothing rewritten yet.
        index = PostgresLexicalIndex(store, "s1", "messages")
        assert 1 in index.scores("duoduo")
        assert doc_rows(postgres_url, schema) == stored
        counts = stats_rows(postgres_url, schema)
        assert counts[("s1", "messages")][0] == len([r for r in stored if r[1] == "messages"])
        # A server that mirrors the session writes every row again, exact.
        recall = Recall()
        assert "Duoduo" in recalled(recall, store, "what is my corgi called?")[0]
        reference = BM25TextIndex()
        for seq, message in enumerate(store.messages("s1"), start=1):
            reference.add(seq, message.text)
        assert stats_rows(postgres_url, schema)[("s1", "messages")] == (
            len(reference),
            reference.bm25._total_length,
        )
        ours = recall._state("s1", store).lexical_scores("messages", "corgi Duoduo")
        theirs = reference.scores("corgi Duoduo")
        assert ours.keys() == theirs.keys()
        assert all(ours[d] == pytest.approx(theirs[d], rel=1e-12) for d in theirs)


def test_a_schema_of_version_6_gains_the_postings_of_its_documents(postgres_url: str, schema: str) -> None:
    with PostgresStore(postgres_url, schema=schema, lexical_index="tsvector") as store:
        index, reference = fixed_index(store)
        for doc_id in range(300, 600):  # a second and a third block of doc ids
            text = f"{CORPUS[doc_id % len(CORPUS)]} item{doc_id} item{doc_id}"
            index.add(doc_id, text)
            reference.add(doc_id, text)
        index.flush()
        expected = postings_rows(postgres_url, schema)
    # As convmem left it before migration 7: no postings, and the GIN index on the terms.
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{schema}".lexical_postings')
        conn.execute(f'CREATE INDEX lexical_docs_terms ON "{schema}".lexical_docs USING gin (terms)')
        conn.execute(f'DELETE FROM "{schema}".schema_version WHERE version >= 7')
    with PostgresStore(postgres_url, schema=schema, lexical_index="tsvector") as store:
        # The migration writes them in SQL, byte for byte what the write path makes.
        assert postings_rows(postgres_url, schema) == expected
        assert {key[3] for key in expected} == {0, 1, 2}
        index = PostgresLexicalIndex(store, "s1", "messages")
        index.follow_log(store.stats("s1").generation)
        assert_same_bm25(index, reference)


def _drive(conn: psycopg.Connection[Any], operation: Any) -> Any:
    """Run a `_Queries` operation's statements on `conn` (in whatever transaction it has)."""
    try:
        request = next(operation)
        while True:
            cursor = conn.execute(request.text, request.params)
            request = operation.send(cursor.fetchall() if cursor.description is not None else [])
    except StopIteration as done:
        return done.value


def test_a_longer_document_written_while_another_writer_holds_the_row_wins(
    store: PostgresStore, postgres_url: str, schema: str
) -> None:
    import threading

    append(store, "s1", [("user", "x")])
    generation = store.stats("s1").generation
    queries = store._queries
    short, long = "corgi", "corgi Duoduo chases the red ball"

    def doc(text: str) -> tuple[int, bytes, int, str, int, None]:
        return (
            5,
            text.encode()[:8],
            len(text),
            "\x1f".join(dict.fromkeys(tokenize(text))),
            len(tokenize(text)),
            None,
        )

    with psycopg.connect(postgres_url) as first, psycopg.connect(postgres_url) as second:
        # The first writer has inserted the short version and not committed yet.
        assert _drive(first, queries.write_lexical("s1", "messages", generation, [], [doc(short)]))
        done: list[bool] = []

        def write_long() -> None:
            done.append(_drive(second, queries.write_lexical("s1", "messages", generation, [], [doc(long)])))
            second.commit()

        thread = threading.Thread(target=write_long)
        thread.start()
        thread.join(0.5)
        assert thread.is_alive()  # waiting for the first writer's row
        first.commit()
        thread.join()
    assert done == [True]
    (row,) = [r for r in doc_rows(postgres_url, schema) if r[2] == 5]
    assert row[3] == sorted(set(tokenize(long)))
    assert stats_rows(postgres_url, schema)[("s1", "messages")] == (1, len(tokenize(long)))

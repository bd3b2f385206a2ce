"""`StoreCatalog`: a store read as users -> sessions -> messages, summary and facts, a page at a time."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import pytest
from inspector_data import fill
from shared_stores import SERVER_KINDS, location_for

from convmem import ConfigError, InMemoryStore, InvalidSessionIdError, SQLiteStore, Store
from convmem._inspect.catalog import StoreCatalog
from convmem._inspect.urls import open_store_url


def test_users_come_by_id_with_their_sessions_counts_and_sessions_without_a_user_last(
    filled_store: Store,
) -> None:
    page = StoreCatalog(filled_store).users()
    assert [row.user_id for row in page.items] == ["ana", "mallory", None]
    ana = page.items[0]
    expected = [filled_store.stats(s) for s in ("ana-lisbon", "ana-porto")]
    assert ana.sessions == 2
    assert ana.messages == sum(s.message_count for s in expected)
    assert ana.tokens == sum(s.total_tokens for s in expected)
    assert ana.first_at == min(s.created_at for s in expected if s.created_at is not None)
    assert ana.last_at == max(s.updated_at for s in expected if s.updated_at is not None)


def test_users_are_paged(filled_store: Store) -> None:
    catalog = StoreCatalog(filled_store)
    first, second = catalog.users(1, 2), catalog.users(2, 2)
    assert [row.user_id for row in first.items] == ["ana", "mallory"]
    assert [row.user_id for row in second.items] == [None]
    assert (first.total, first.pages, first.has_next, second.has_previous, second.has_next) == (
        3,
        2,
        True,
        True,
        False,
    )


def test_a_users_sessions_and_the_sessions_without_a_user(filled_store: Store) -> None:
    catalog = StoreCatalog(filled_store)
    ana = catalog.sessions("ana")
    assert [s.session_id for s in ana.items] == ["ana-lisbon", "ana-porto"]
    assert ana.items[1] == filled_store.stats("ana-porto")
    assert [s.session_id for s in catalog.sessions(None).items] == ["anon"]
    assert [s.session_id for s in catalog.sessions("ana", 2, 1).items] == ["ana-porto"]


def test_the_sql_listing_and_the_scanned_listing_agree(tmp_path: Path) -> None:
    """A SQLite file is listed by a query of its session table; the same store read
    through the Store protocol alone (as Redis and PostgreSQL are) lists the same."""

    class ProtocolOnly:
        def __init__(self, inner: Store) -> None:
            self.inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

    sqlite = fill(SQLiteStore(tmp_path / "chat.db"))
    by_sql = StoreCatalog(sqlite)
    by_scan = StoreCatalog(ProtocolOnly(sqlite))  # type: ignore[arg-type]
    assert type(by_sql._listing).__name__ == "_SQLiteListing"
    assert type(by_scan._listing).__name__ == "_ScannedListing"
    assert by_sql.users() == by_scan.users()
    for user in ("ana", "mallory", None):
        assert by_sql.sessions(user) == by_scan.sessions(user)
    sqlite.close()


def test_a_scan_reports_its_progress() -> None:
    seen: list[tuple[int, int]] = []
    StoreCatalog(fill(InMemoryStore()), progress=lambda done, total: seen.append((done, total))).users()
    assert seen[-1] == (4, 4)


def test_messages_are_paged_by_seq(filled_store: Store) -> None:
    catalog = StoreCatalog(filled_store)
    first = catalog.messages("ana-porto", 1, 5)
    assert [m.seq for m in first.items] == [1, 2, 3, 4, 5]
    assert (first.total, first.pages) == (12, 3)
    assert [m.seq for m in catalog.messages("ana-porto", 3, 5).items] == [11, 12]


def test_a_page_after_a_deletion_holds_fewer_messages(filled_store: Store) -> None:
    catalog = StoreCatalog(filled_store)
    catalog.delete_message("ana-porto", 2)
    assert [m.seq for m in catalog.messages("ana-porto", 1, 5).items] == [1, 3, 4, 5]


def test_a_session_shows_its_summary_and_the_facts_it_stated(filled_store: Store) -> None:
    detail = StoreCatalog(filled_store).session("ana-porto")
    assert detail.stats == filled_store.stats("ana-porto")
    facts = {fact.key: fact.value for fact in detail.facts}
    assert facts.get("city") == "Porto" and facts.get("pet_name") == "Pico"
    assert detail.summary.covers_through_seq > 0 and "pottery" in detail.summary.text


def test_a_users_facts_come_from_all_their_sessions(filled_store: Store) -> None:
    facts = StoreCatalog(filled_store).user_facts("ana")
    sessions = {fact.session_id for fact in facts}
    assert sessions == {"ana-porto", "ana-lisbon"}, [(f.key, f.value, f.session_id) for f in facts]


def test_search_finds_turns_in_each_of_a_users_sessions(filled_store: Store) -> None:
    catalog = StoreCatalog(filled_store)
    dog = catalog.search("ana", "corgi Pico")
    beach = catalog.search("ana", "beach near Lisbon")
    assert dog and {item.session_id for item in dog} == {"ana-porto"}
    assert any("corgi called Pico" in item.text for item in dog)
    assert beach and {item.session_id for item in beach} == {"ana-lisbon"}
    assert any("Carcavelos" in item.text for item in beach)


def test_search_never_reaches_another_user(filled_store: Store) -> None:
    items = StoreCatalog(filled_store).search("mallory", "Pico corgi Lisbon Porto")
    assert all(item.session_id == "mallory-1" for item in items)


def test_a_built_context_is_the_one_the_sessions_owner_would_get(filled_store: Store) -> None:
    """The owner's memory shares facts across their sessions: the Lisbon session knows about Pico."""
    context = StoreCatalog(filled_store).build_context("ana-lisbon", "What is my dog called?", 600)
    assert context.token_count <= 600
    assert "Pico" in context.memory_text


def test_forgetting_a_session_and_a_user(filled_store: Store) -> None:
    catalog = StoreCatalog(filled_store)
    catalog.users()  # a scanned listing is kept: forgetting must not leave it stale
    catalog.forget_session("anon")
    assert [row.user_id for row in catalog.users().items] == ["ana", "mallory"]
    assert catalog.forget_user("ana") == ["ana-lisbon", "ana-porto"]
    assert [row.user_id for row in catalog.users().items] == ["mallory"]
    assert filled_store.sessions() == ["mallory-1"]


@pytest.mark.parametrize(
    ("page", "size", "named"),
    [(0, 10, "page"), (1, 0, "page size"), (1, 1001, "page size"), (True, 10, "page"), (1, "5", "page size")],
)
def test_a_bad_page_is_a_clear_error(filled_store: Store, page: object, size: object, named: str) -> None:
    with pytest.raises(ConfigError, match=f"^{named} must be"):
        StoreCatalog(filled_store).users(page, size)  # type: ignore[arg-type]


def test_a_bad_id_is_refused_before_any_read(filled_store: Store) -> None:
    with pytest.raises(InvalidSessionIdError, match="control character"):
        StoreCatalog(filled_store).messages("a\nb")


def test_a_catalog_needs_a_store() -> None:
    with pytest.raises(ConfigError, match="must be a convmem Store, got str"):
        StoreCatalog("chat.db")  # type: ignore[arg-type]


# -- store URLs ------------------------------------------------------------------------------


def test_sqlite_urls_relative_absolute_and_a_bare_path(
    sqlite_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(sqlite_path.parent)
    for url in ("sqlite:///chat.db", f"sqlite:///{sqlite_path}", "chat.db", str(sqlite_path)):
        store = open_store_url(url)
        assert isinstance(store, SQLiteStore) and store.path.resolve() == sqlite_path.resolve(), url
        assert "ana-porto" in store.sessions()
        store.close()


def test_a_missing_sqlite_file_is_refused_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "typo.db"
    with pytest.raises(ConfigError, match="no SQLite file at"):
        open_store_url(f"sqlite:///{missing}")
    assert not missing.exists()


@pytest.mark.parametrize("url", ["mysql://host/db", "", "sqlite://"])
def test_an_unusable_url_names_the_forms_that_work(url: str) -> None:
    with pytest.raises(ConfigError, match=re.escape("sqlite:///chat.db")):
        open_store_url(url)


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_a_server_store_opened_by_url_is_browsed_like_an_embedded_one(
    kind: str, request: pytest.FixtureRequest
) -> None:
    location = location_for(kind, request)
    try:
        fill(location.open()).close()
        options = {"schema": location.namespace} if kind == "postgres" else {"prefix": location.namespace}
        if kind == "redis-cluster":
            options["cluster"] = "1"
        joiner = "&" if urlsplit(location.url).query else "?"
        store = open_store_url(location.url + joiner + urlencode(options))
        try:
            catalog = StoreCatalog(store)
            assert [row.user_id for row in catalog.users().items] == ["ana", "mallory", None]
            assert [s.session_id for s in catalog.sessions("ana").items] == ["ana-lisbon", "ana-porto"]
            assert [m.seq for m in catalog.messages("ana-porto", 2, 5).items] == [6, 7, 8, 9, 10]
            assert catalog.session("ana-porto").summary.text
            context = catalog.build_context("ana-lisbon", "What is my dog called?", 600)
            assert "Pico" in context.memory_text
        finally:
            store.close()
    finally:
        location.cleanup()

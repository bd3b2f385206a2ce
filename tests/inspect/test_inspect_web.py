"""`convmem serve`'s app, over HTTP without a browser: pages, escaping, and who may delete."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient

from convmem import ConfigError, SQLiteStore
from convmem._inspect.catalog import StoreCatalog
from convmem._inspect.web import check_bind, create_app

TOKEN = "write-token-0123456789"
BASE = "http://127.0.0.1:8765"


@pytest.fixture
def store(sqlite_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(sqlite_path)
    yield opened
    opened.close()


def client(store: SQLiteStore, token: str | None = TOKEN, page_size: int = 50) -> TestClient:
    return TestClient(create_app(StoreCatalog(store), write_token=token, page_size=page_size), base_url=BASE)


def test_every_page_loads(store: SQLiteStore) -> None:
    web = client(store)
    for url in (
        "/",
        "/user?id=ana",
        "/user?none=1",
        "/session?id=ana-porto",
        "/context?id=ana-lisbon&query=What+is+my+dog+called%3F&budget=400",
        "/search?user=ana&q=corgi",
        "/confirm?action=forget-session&id=anon",
    ):
        response = web.get(url)
        assert response.status_code == 200, url
        assert response.headers["content-security-policy"].startswith("default-src 'none'"), url


def test_the_users_page_is_paged(store: SQLiteStore) -> None:
    web = client(store, page_size=2)
    first = web.get("/").text
    assert "users 1-2 of 3 · page 1 of 2" in first and 'href="/?page=2"' in first
    assert "(no user)" in web.get("/?page=2").text


def test_a_session_page_shows_summary_facts_and_a_page_of_messages(store: SQLiteStore) -> None:
    page = client(store, page_size=4).get("/session?id=ana-porto").text
    assert "covers seq &le; 8" in page and "pottery" in page
    assert "Pico" in page and "seqs 1-4 of 12 · page 1 of 3" in page


def test_a_context_page_shows_the_bar_the_recalled_items_and_the_reasons(store: SQLiteStore) -> None:
    page = client(store).get("/context?id=ana-lisbon&query=What+is+my+dog+called%3F&budget=400").text
    assert 'class="cm-bar"' in page and "tokens used" in page
    assert "corgi called Pico" in page.split("cm-recalled")[1]
    assert "shares &#x27;called&#x27; with the query" in page


def test_an_unknown_session_is_not_found(store: SQLiteStore) -> None:
    assert client(store).get("/session?id=nobody").status_code == 404


def test_bad_input_is_a_clear_error_page(store: SQLiteStore) -> None:
    response = client(store).get("/context?id=ana-porto&query=hi&budget=-3")
    assert response.status_code == 400 and "budget must be from 1 to 1000000, got -3" in response.text


def test_stored_markup_is_escaped_on_every_page(store: SQLiteStore) -> None:
    web = client(store)
    for url in ("/session?id=mallory-1", "/search?user=mallory&q=document+title+pwned"):
        page = web.get(url).text
        assert "<script" not in page, url
        assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in page, url


def test_a_read_only_app_refuses_every_delete(store: SQLiteStore) -> None:
    web = client(store, token=None)
    response = web.post("/forget-session", data={"id": "anon", "token": TOKEN})
    assert response.status_code == 403 and "read-only" in response.text
    assert "Forget this session" not in web.get("/session?id=anon").text
    assert "anon" in store.sessions()


def test_a_delete_without_the_token_or_with_a_wrong_one_is_refused(store: SQLiteStore) -> None:
    web = client(store)
    assert web.post("/forget-session", data={"id": "anon"}).status_code == 403
    assert web.post("/forget-session", data={"id": "anon", "token": TOKEN + "x"}).status_code == 403
    assert "anon" in store.sessions()


def test_a_delete_from_another_site_is_refused_even_with_the_token(store: SQLiteStore) -> None:
    web = client(store)
    for origin in ("http://evil.example", "null"):
        response = web.post(
            "/forget-session", data={"id": "anon", "token": TOKEN}, headers={"origin": origin}
        )
        assert response.status_code == 403 and "another site" in response.text
    assert "anon" in store.sessions()


def test_a_get_never_deletes(store: SQLiteStore) -> None:
    web = client(store)
    assert web.get(f"/forget-session?id=anon&token={TOKEN}").status_code == 405
    assert "anon" in store.sessions()


def test_forget_a_session_a_user_and_delete_a_message_with_the_token(store: SQLiteStore) -> None:
    web = client(store)
    same_site = {"origin": BASE}
    assert (
        web.post("/forget-session", data={"id": "anon", "token": TOKEN}, headers=same_site).status_code == 200
    )
    assert "anon" not in store.sessions()
    response = web.post("/forget-user", data={"id": "ana", "token": TOKEN})
    assert response.status_code == 200 and "2 sessions deleted" in response.text
    assert store.sessions() == ["mallory-1"]
    assert (
        web.post("/delete-message", data={"id": "mallory-1", "seq": "1", "token": TOKEN}).status_code == 200
    )
    assert [m.seq for m in store.messages("mallory-1")] == [2]


def test_only_loopback_host_names_are_answered(store: SQLiteStore) -> None:
    """A page fetched through another name (DNS rebinding) gets nothing."""
    assert client(store).get("/", headers={"host": "attacker.example"}).status_code == 400
    remote = TestClient(create_app(StoreCatalog(store), allow_remote=True), base_url=BASE)
    assert remote.get("/", headers={"host": "inspector.internal"}).status_code == 200


def test_a_short_write_token_is_refused(store: SQLiteStore) -> None:
    with pytest.raises(ConfigError, match="at least 16 characters"):
        create_app(StoreCatalog(store), write_token="secret")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
def test_loopback_addresses_may_be_bound(host: str) -> None:
    check_bind(host, allow_remote=False)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.7", "inspector.example"])
def test_other_addresses_need_allow_remote(host: str) -> None:
    with pytest.raises(ConfigError, match="refusing to serve"):
        check_bind(host, allow_remote=False)
    check_bind(host, allow_remote=True)


def test_a_delete_that_names_no_message_is_a_clear_error(store: SQLiteStore) -> None:
    web = client(store)
    response = web.post("/delete-message", data={"id": "mallory-1", "token": TOKEN})
    assert response.status_code == 400 and "the request names no seq" in response.text
    assert web.get("/confirm?action=delete-message&id=mallory-1").status_code == 400
    assert [m.seq for m in store.messages("mallory-1")] == [1, 2]

"""`convmem serve` in a real browser: Debian's headless Chromium driven by Playwright.

Each test serves the inspector with uvicorn on a free loopback port and saves a
screenshot of every page it visits under its own tmp_path. Without Playwright
or Chromium the tests skip, and with ``CONVMEM_REQUIRE_EXTRAS=1`` (CI) that skip
fails the run.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")
sync_api = pytest.importorskip("playwright.sync_api")

from redis_server import free_port  # noqa: E402

from convmem import SQLiteStore  # noqa: E402
from convmem._inspect.catalog import StoreCatalog  # noqa: E402
from convmem._inspect.web import create_app  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "browser-token-0123456789"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"chromium cannot be started: {CHROMIUM} is missing (Debian: apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


class Served:
    """The inspector over `store`, served by uvicorn in a thread until `stop`."""

    def __init__(self, store: SQLiteStore, write_token: str | None) -> None:
        app = create_app(StoreCatalog(store), write_token=write_token)
        self.url = f"http://127.0.0.1:{free_port()}"
        port = int(self.url.rsplit(":", 1)[1])
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"the inspector did not start on {self.url}")
            time.sleep(0.02)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture
def store(sqlite_path: Path) -> Iterator[SQLiteStore]:
    opened = SQLiteStore(sqlite_path)
    yield opened
    opened.close()


@pytest.fixture
def served(store: SQLiteStore) -> Iterator[Served]:
    server = Served(store, TOKEN)
    yield server
    server.stop()


@pytest.fixture
def page(browser: Any, served: Served, tmp_path: Path) -> Iterator[Any]:
    context = browser.new_context(base_url=served.url, viewport={"width": 1200, "height": 900})
    opened = context.new_page()
    yield opened
    context.close()


def shot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 1000, f"the screenshot of {name} is empty"
    return path


def test_every_page_loads(page: Any, tmp_path: Path) -> None:
    page.goto("/")
    assert page.locator("table.cm-users").inner_text().count("ana") >= 1
    shot(page, tmp_path, "users")
    page.click("text=ana")
    assert "ana-porto" in page.locator("table.cm-sessions").inner_text()
    assert "Pico" in page.locator("table.cm-facts").inner_text()
    shot(page, tmp_path, "user")
    page.click("text=ana-porto")
    assert "corgi called Pico" in page.locator("table.cm-log").inner_text()
    assert "pottery" in page.locator(".cm-summary").inner_text()
    shot(page, tmp_path, "session")
    page.goto("/user?id=ana")
    page.fill("input[name=q]", "beach near Lisbon")
    page.click("text=Search")
    assert "Carcavelos" in page.locator("table.cm-results").inner_text()
    shot(page, tmp_path, "search")
    assert {path.name for path in tmp_path.glob("*.png")} == {
        "users.png",
        "user.png",
        "session.png",
        "search.png",
    }


def test_a_query_shows_the_budget_bar_and_the_recalled_items(page: Any, tmp_path: Path) -> None:
    page.goto("/session?id=ana-lisbon")
    page.fill("input[name=query]", "What is my dog called?")
    page.fill("input[name=budget]", "400")
    page.click("text=Build")
    bar = page.locator(".cm-bar")
    assert bar.is_visible()
    segments = bar.locator("span")
    assert segments.count() >= 3
    assert page.locator(".cm-seg-free").count() == 1
    assert "tokens used" in page.locator(".cm-headline").inner_text()
    recalled = page.locator("table.cm-recalled").inner_text()
    assert "corgi called Pico" in recalled and "ana-porto" in recalled
    assert "shares 'called' with the query" in recalled
    shot(page, tmp_path, "context")


def test_forgetting_a_session_with_the_token_removes_it(
    page: Any, store: SQLiteStore, tmp_path: Path
) -> None:
    page.goto("/session?id=anon")
    page.click("text=Forget this session")
    assert "This deletes session anon" in page.locator(".cm-notice").inner_text()
    shot(page, tmp_path, "confirm")
    page.fill("input[name=token]", TOKEN)
    page.click("text=Yes, delete")
    assert "Session anon was forgotten." in page.locator(".cm-done").inner_text()
    shot(page, tmp_path, "forgotten")
    assert "anon" not in store.sessions()
    page.goto("/user?none=1")
    assert "no sessions" in page.locator(".cm-pager").inner_text()


def test_forgetting_without_the_token_is_refused(page: Any, store: SQLiteStore, tmp_path: Path) -> None:
    page.goto("/confirm?action=forget-session&id=anon")
    page.fill("input[name=token]", "not the token")
    page.click("text=Yes, delete")
    assert "Refused: the write token is missing or wrong." in page.locator(".cm-refused").inner_text()
    shot(page, tmp_path, "refused")
    assert "anon" in store.sessions()


def test_a_read_only_inspector_offers_no_delete_and_refuses_one(
    browser: Any, store: SQLiteStore, tmp_path: Path
) -> None:
    server = Served(store, None)
    try:
        context = browser.new_context(base_url=server.url)
        page = context.new_page()
        page.goto("/session?id=anon")
        assert page.locator("button.cm-danger").count() == 0
        assert "read-only" in page.locator(".cm-mode").inner_text()
        page.goto("/confirm?action=forget-session&id=anon")
        assert "read-only" in page.locator(".cm-refused").inner_text()
        shot(page, tmp_path, "read-only")
        context.close()
    finally:
        server.stop()
    assert "anon" in store.sessions()


def test_stored_script_text_is_shown_as_text(page: Any, tmp_path: Path) -> None:
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto("/session?id=mallory-1")
    log = page.locator("table.cm-log").inner_text()
    assert "<script>document.title='pwned'</script>" in log
    assert "[bold]not markup[/bold] & <b>bold?</b>" in log
    assert page.locator("table.cm-log script").count() == 0
    assert page.locator("table.cm-log b").count() == 0
    assert "pwned" not in page.title() and dialogs == []
    shot(page, tmp_path, "stored-script")

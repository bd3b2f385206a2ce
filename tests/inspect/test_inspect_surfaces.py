"""The notebook, the terminal and the web page show the same facts about one built context."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

pytest.importorskip("rich")
pytest.importorskip("starlette")
pytest.importorskip("httpx")

from rich.console import Console
from starlette.testclient import TestClient

from convmem import BuiltContext, SQLiteStore
from convmem._inspect.catalog import StoreCatalog
from convmem._inspect.terminal import context_picture
from convmem._inspect.view import context_view
from convmem._inspect.web import create_app

QUERY = "What is my dog called?"
BUDGET = 260


def facts_of(context: BuiltContext) -> list[str]:
    """What any picture of `context` must say: the headline, each section's tokens, each
    recalled item's seqs, session, score and reason, each left-out entry's reason."""
    view = context_view(context)
    facts = [view.headline]
    facts += [f"{s.name} {s.tokens}" for s in view.segments]
    for item in view.recalled:
        facts += [item.session, f"{item.score:.3f}", item.why]
    facts += [entry.reason for entry in view.left_out]
    return facts


def test_notebook_terminal_and_browser_agree(sqlite_path: Path) -> None:
    store = SQLiteStore(sqlite_path)
    catalog = StoreCatalog(store)
    context = catalog.build_context("ana-lisbon", QUERY, BUDGET)
    facts = facts_of(context)
    assert context.recalled and context.dropped, "the build should recall and leave something out"

    notebook = html.unescape(context._repr_html_())
    console = Console(record=True, width=240, color_system=None)
    console.print(context_picture(context_view(context)))
    terminal = console.export_text()
    web = TestClient(create_app(catalog), base_url="http://127.0.0.1")
    page = html.unescape(
        web.get("/context", params={"id": "ana-lisbon", "query": QUERY, "budget": BUDGET}).text
    )
    store.close()

    for surface, text in (("notebook", notebook), ("terminal", terminal), ("web", page)):
        missing = [fact for fact in facts if fact not in " ".join(text.split())]
        assert not missing, f"the {surface} picture does not say {missing}"

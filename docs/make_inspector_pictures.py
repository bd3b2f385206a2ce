"""Draw the pictures of the memory inspector (README.md, docs/inspector.md) into docs/images/.

One conversation, one build, three surfaces:

  inspector-notebook.png   what Jupyter shows for a BuiltContext (its _repr_html_)
  inspector-terminal.png   ``convmem inspect ... --query ... --svg``, the SVG drawn in Chromium
  inspector-browser.png    ``convmem serve``'s context page

Needs convmem[cli,serve], playwright and Debian's chromium::

    python docs/make_inspector_pictures.py
"""

from __future__ import annotations

import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import uvicorn
from playwright.sync_api import sync_playwright

from convmem import ConversationMemory, SQLiteStore
from convmem._cli import main as convmem_cli
from convmem._inspect.catalog import StoreCatalog
from convmem._inspect.html import render_html
from convmem._inspect.web import create_app

IMAGES = Path(__file__).resolve().parent / "images"
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
QUERY = "What is my dog called, and where am I moving?"
BUDGET = 200
SESSIONS = [
    (
        "spring",
        datetime(2024, 3, 3, 14, 10, tzinfo=timezone.utc),
        [
            ("Hi! I finally adopted a dog, a corgi called Pico.", "Congratulations! How old is Pico?"),
            ("Two years old. He loves chasing tennis balls.", "Sounds like a happy dog."),
            ("We live in Porto, near the river.", "Lovely for morning walks."),
            ("ok", "Anything else?"),
        ],
    ),
    (
        "summer",
        datetime(2024, 4, 2, 9, 30, tzinfo=timezone.utc),
        [
            ("Big news: I am moving to Lisbon in June for a new job.", "Wow, what is the job?"),
            ("I work as a ceramics designer now.", "That fits you perfectly."),
            ("Can you suggest a beach near Lisbon?", "Carcavelos is easy to reach by train."),
            ("What should I cook tonight?", "Try a mushroom risotto."),
            ("Thanks!", "You're welcome!"),
        ],
    ),
]


def make_store(path: Path) -> SQLiteStore:
    store = SQLiteStore(path)
    for session_id, start, turns in SESSIONS:
        memory = ConversationMemory(session_id, store, user_id="ana")
        for number, (user, assistant) in enumerate(turns):
            when = start.timestamp() + 120 * number
            memory.add_messages(
                [
                    {"role": "user", "content": user, "timestamp": when},
                    {"role": "assistant", "content": assistant, "timestamp": when + 30},
                ]
            )
        memory.close()
    return store


def main() -> None:
    IMAGES.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "chat.db"
        store = make_store(db)
        catalog = StoreCatalog(store)
        context = catalog.build_context("summer", QUERY, BUDGET)
        notebook_page = Path(folder) / "notebook.html"
        notebook_page.write_text(
            "<!doctype html><meta charset=utf-8><body style='margin:12px;background:#fff'>"
            f"<div style='font:12px monospace;color:#555'>In [3]: memory.build_context(query=question, budget={BUDGET})</div>"
            + render_html(context),
            encoding="utf-8",
        )
        svg = Path(folder) / "terminal.svg"
        convmem_cli(
            [
                "inspect",
                f"sqlite:///{db}",
                "--session",
                "summer",
                "--query",
                QUERY,
                "--budget",
                str(BUDGET),
                "--width",
                "118",
                "--svg",
                str(svg),
            ]
        )

        app = create_app(catalog)
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=8799, log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.05)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": 1100, "height": 800})
                page.goto(notebook_page.as_uri())
                page.screenshot(path=str(IMAGES / "inspector-notebook.png"), full_page=True)
                page.goto(svg.as_uri())
                box = page.locator("svg").bounding_box()
                assert box is not None
                page.set_viewport_size({"width": int(box["width"]) + 20, "height": int(box["height"]) + 20})
                page.screenshot(path=str(IMAGES / "inspector-terminal.png"), clip=box)
                page.set_viewport_size({"width": 1100, "height": 800})
                page.goto(f"http://127.0.0.1:8799/context?id=summer&query={QUERY}&budget={BUDGET}")
                page.screenshot(path=str(IMAGES / "inspector-browser.png"), full_page=True)
                browser.close()
        finally:
            server.should_exit = True
            thread.join()
            store.close()
    for name in ("notebook", "terminal", "browser"):
        path = IMAGES / f"inspector-{name}.png"
        print(f"{path.relative_to(IMAGES.parent.parent)}: {path.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    main()

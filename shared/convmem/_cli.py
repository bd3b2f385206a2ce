"""The ``convmem`` command line.

convmem demo                       play a scripted conversation and explain the context
convmem sessions --db chat.db      list stored sessions
convmem show SESSION --db chat.db  print a session's raw log
convmem context SESSION --db chat.db --query "..." --budget 1024
                                   build a context and print it with its explain() table
convmem inspect STORE_URL [--user ID | --no-user] [--session ID [--query "..." --budget N]]
                                   users, sessions, a session's log, summary and facts, or a
                                   built context as a picture (rich: convmem[cli])
convmem serve STORE_URL [--host 127.0.0.1] [--port 8765]
                                   the same in a local web page (convmem[serve])
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from . import __version__
from ._config import MemoryConfig
from ._demo import DEMO_QUESTION, DEMO_SESSION, DEMO_SYSTEM_PROMPT, DEMO_TURNS
from ._errors import ConfigError, ConvMemError
from ._memory import ConversationMemory, open_store

if TYPE_CHECKING:
    from ._inspect.catalog import StoreCatalog

__all__ = ["main"]

WRITE_TOKEN_ENV = "CONVMEM_WRITE_TOKEN"


def _print_context(memory: ConversationMemory, query: str | None, budget: int) -> None:
    context = memory.build_context(query=query, budget=budget)
    print("== messages sent to the model ==")
    for message in context.messages:
        content = message["content"]
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        print(f"[{message['role']}] {text}")
    print()
    print("== explain() ==")
    print(context.explain())


def _demo(args: argparse.Namespace) -> int:
    config = MemoryConfig(
        system_prompt=DEMO_SYSTEM_PROMPT,
        keep_recent_turns=args.keep_recent_turns,
        budget=args.budget,
    )
    embedder = None
    if args.recall:
        from ._recall.embedder import SentenceTransformerEmbedder

        embedder = SentenceTransformerEmbedder()
    if args.db:
        memory = ConversationMemory.open(DEMO_SESSION, args.db, config=config, embedder=embedder)
        memory.clear()
    else:
        memory = ConversationMemory(DEMO_SESSION, config=config, embedder=embedder)
    print(
        f"Playing {len(DEMO_TURNS)} scripted turns "
        f"(keep_recent_turns={args.keep_recent_turns}, budget={args.budget})"
    )
    for user, assistant in DEMO_TURNS:
        memory.add_turn(user, assistant)
    memory.close()
    print(f"Stored {len(memory.messages())} messages; {memory.check()}")
    print(f"Late question: {DEMO_QUESTION}")
    print()
    _print_context(memory, DEMO_QUESTION, args.budget)
    print()
    print("== render_transcript('orchestration') ==")
    print(memory.render_transcript("orchestration"))
    return 0


def _sessions(args: argparse.Namespace) -> int:
    store = open_store(args.db)
    for session_id in store.sessions(user_id=args.user):
        stats = store.stats(session_id)
        print(f"{session_id}\t{stats.message_count} messages\t{stats.total_tokens} tokens")
    return 0


def _show(args: argparse.Namespace) -> int:
    memory = ConversationMemory.open(args.session, args.db)
    for message in memory.messages():
        extra = f" tool_calls={list(message.tool_calls)}" if message.tool_calls else ""
        print(f"{message.seq:>5} {message.status.value:<9} {message.role.value:<9} {message.text}{extra}")
    return 0


def _context(args: argparse.Namespace) -> int:
    memory = ConversationMemory.open(args.session, args.db, config=MemoryConfig(budget=args.budget))
    _print_context(memory, args.query, args.budget)
    return 0


def _needs(module: str, extra: str, command: str) -> None:
    try:
        __import__(module)
    except ImportError:
        raise ConfigError(f"convmem {command} needs {module}: pip install 'convmem[{extra}]'") from None


@contextmanager
def _scan_progress(console: Any) -> Iterator[Any]:
    """A progress bar for a store read session by session (one without a session table)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("reading sessions"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("scan", total=None)

        def report(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        yield report


def _open_catalog(url: str, progress: Any = None) -> StoreCatalog:
    from ._inspect.catalog import StoreCatalog
    from ._inspect.urls import open_store_url

    return StoreCatalog(open_store_url(url), progress=progress)


def _inspect(args: argparse.Namespace) -> int:
    _needs("rich", "cli", "inspect")
    from rich.console import Console

    from ._inspect import terminal
    from ._inspect.view import context_view

    console = Console(record=args.svg is not None, width=args.width)
    if args.query is not None and args.session is None:
        raise ConfigError("--query builds the context of a session: name it with --session")
    with _scan_progress(console) as progress:
        catalog = _open_catalog(args.store, progress)
        try:
            if args.session is not None and args.query is not None:
                with console.status("building the context (recall reads the session's log on first use)"):
                    context = catalog.build_context(args.session, args.query, args.budget)
                console.print(terminal.context_picture(context_view(context)))
            elif args.session is not None:
                console.print(terminal.session_picture(catalog.session(args.session)))
                console.print(
                    terminal.messages_table(catalog.messages(args.session, args.page, args.page_size))
                )
            elif args.user is not None or args.no_user:
                sessions = catalog.sessions(args.user, args.page, args.page_size)
                console.print(terminal.sessions_table(sessions, args.user))
                if args.user is not None:
                    console.print(
                        terminal.facts_table(
                            catalog.user_facts(args.user), "facts across the user's sessions"
                        )
                    )
            else:
                console.print(terminal.users_table(catalog.users(args.page, args.page_size)))
        finally:
            catalog.store.close()
    if args.svg is not None:
        console.save_svg(args.svg, title="convmem inspect")
    return 0


def _serve(args: argparse.Namespace) -> int:
    _needs("starlette", "serve", "serve")
    _needs("uvicorn", "serve", "serve")
    from ._inspect.web import check_bind, serve

    check_bind(args.host, allow_remote=args.allow_remote)
    token = os.environ.get(WRITE_TOKEN_ENV) or None
    catalog = _open_catalog(args.store)
    mode = "write mode: deletes need the token in $" + WRITE_TOKEN_ENV if token else "read-only"
    print(
        f"convmem inspector on http://{args.host}:{args.port}/ over {catalog.store!r} ({mode}); Ctrl-C stops it"
    )
    try:
        serve(catalog, host=args.host, port=args.port, write_token=token, allow_remote=args.allow_remote)
    finally:
        catalog.store.close()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="convmem",
        description="Conversation memory within a token budget.",
        epilog="Example: convmem demo --budget 600",
    )
    parser.add_argument("--version", action="version", version=f"convmem {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="play a scripted Chinese/English conversation and explain the built context",
        description="Plays a scripted conversation of 24 turns (offline, no model needed) in which early "
        "facts fall out of the recent window, then prints the context built for a late question "
        "and its explain() table.",
        epilog="Example: convmem demo --budget 600 --keep-recent-turns 4 --recall",
    )
    demo.add_argument("--budget", type=int, default=700, help="token budget of the context (default 700)")
    demo.add_argument(
        "--keep-recent-turns", type=int, default=6, help="turns in the recent window (default 6)"
    )
    demo.add_argument("--db", help="SQLite file to keep the demo session in (default: in memory)")
    demo.add_argument(
        "--recall",
        action="store_true",
        help="recall earlier turns by meaning too, not only by their words "
        "(sentence-transformers, convmem[retrieval])",
    )
    demo.set_defaults(run=_demo)

    sessions = commands.add_parser(
        "sessions",
        help="list the sessions stored in a SQLite file",
        epilog="Example: convmem sessions --db chat.db",
    )
    sessions.add_argument("--db", help="SQLite file (default: $CONVMEM_DB or ./convmem.db)")
    sessions.add_argument("--user", help="only sessions of this user id")
    sessions.set_defaults(run=_sessions)

    show = commands.add_parser(
        "show", help="print the raw log of a session", epilog="Example: convmem show session-1 --db chat.db"
    )
    show.add_argument("session", help="session id")
    show.add_argument("--db", help="SQLite file (default: $CONVMEM_DB or ./convmem.db)")
    show.set_defaults(run=_show)

    context = commands.add_parser(
        "context",
        help="build the context for a query and explain it",
        epilog='Example: convmem context session-1 --db chat.db --query "What is my name?" --budget 1024',
    )
    context.add_argument("session", help="session id")
    context.add_argument("--db", help="SQLite file (default: $CONVMEM_DB or ./convmem.db)")
    context.add_argument("--query", help="the new user message")
    context.add_argument("--budget", type=int, default=4096, help="token budget (default 4096)")
    context.set_defaults(run=_context)

    inspect = commands.add_parser(
        "inspect",
        help="look at a store: users, sessions, a session's log, summary and facts, a built context",
        description="Lists the users of a store (with their sessions' counts and dates), a user's sessions, "
        "or a session's summary, facts and messages, a page at a time; with --query, builds the context "
        "a memory on the session would send and draws it: the budget by section, the messages, what was "
        "recalled and why, what was left out. Needs rich (convmem[cli]).",
        epilog="Examples: convmem inspect sqlite:///chat.db  ·  convmem inspect sqlite:///chat.db --user ana  ·  "
        'convmem inspect redis://127.0.0.1:6379/0?prefix=chat --session s1 --query "Where do I live?" --budget 512',
    )
    inspect.add_argument(
        "store", help="store URL: sqlite:///chat.db, redis://host:6379/0, postgresql://user@host/db"
    )
    who = inspect.add_mutually_exclusive_group()
    who.add_argument("--user", help="list this user's sessions and facts")
    who.add_argument("--no-user", action="store_true", help="list the sessions written without a user")
    who.add_argument("--session", help="show this session's summary, facts and messages")
    inspect.add_argument("--query", help="with --session: build the context for this new message")
    inspect.add_argument(
        "--budget", type=int, default=1024, help="token budget of the context (default 1024)"
    )
    inspect.add_argument("--page", type=int, default=1, help="page of the listing, from 1 (default 1)")
    inspect.add_argument("--page-size", type=int, default=50, help="rows per page (default 50)")
    inspect.add_argument(
        "--width", type=int, default=None, help="columns to draw in (default: the terminal's)"
    )
    inspect.add_argument("--svg", help="also save what was drawn as an SVG picture to this file")
    inspect.set_defaults(run=_inspect)

    serve = commands.add_parser(
        "serve",
        help="a local web page over a store: users, sessions, messages, contexts and search",
        description="Serves the inspector on http://127.0.0.1:8765/ (Starlette and uvicorn: convmem[serve]). "
        "It only reads, unless $CONVMEM_WRITE_TOKEN holds a token (16 characters or more): then a "
        "message, a session or a user can be deleted from the page after typing that token. It "
        "refuses to listen on an address other than loopback without --allow-remote.",
        epilog="Example: CONVMEM_WRITE_TOKEN=$(openssl rand -hex 16) convmem serve sqlite:///chat.db",
    )
    serve.add_argument(
        "store", help="store URL: sqlite:///chat.db, redis://host:6379/0, postgresql://user@host/db"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port to listen on (default 8765)")
    serve.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow an address other than loopback: anyone who reaches it can read every conversation",
    )
    serve.set_defaults(run=_serve)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except ConvMemError as exc:
        print(f"convmem: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

"""The ``convmem`` command line.

convmem demo                       play a scripted conversation and explain the context
convmem sessions --db chat.db      list stored sessions
convmem show SESSION --db chat.db  print a session's raw log
convmem context SESSION --db chat.db --query "..." --budget 1024
                                   build a context and print it with its explain() table
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__
from ._config import MemoryConfig
from ._demo import DEMO_QUESTION, DEMO_SESSION, DEMO_SYSTEM_PROMPT, DEMO_TURNS
from ._errors import ConvMemError
from ._memory import ConversationMemory, open_store

__all__ = ["main"]


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

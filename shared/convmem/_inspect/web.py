"""``convmem serve``: a local web page over a store (Starlette, served by uvicorn; ``convmem[serve]``).

Pages, all read-only and all GET::

    /                         users, with their sessions' counts and dates
    /user?id=U                a user's sessions and facts, a search across their sessions
    /user?none=1              the sessions written without a user
    /session?id=S&page=N      a session's summary, facts and messages, a page at a time
    /context?id=S&query=Q&budget=B   the context a memory builds: budget bar, messages, reasons
    /search?user=U&q=Q        what recall finds for Q across the user's sessions

Started with a write token, the app also deletes: ``/confirm?...`` shows what
would go and a form that POSTs the token (typed by the person, never put in a
page or a URL) to ``/forget-session``, ``/forget-user`` or ``/delete-message``.
The token is checked on the server with a constant-time compare; a GET never
changes anything, a POST from another origin is refused, and without a token
every POST is refused. Every stored text is escaped, pages carry a Content
Security Policy that allows no script at all, and only loopback host names
are answered unless the app is made with ``allow_remote=True``.

List pages read a page of users or sessions (see `StoreCatalog`), never a log.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from .._errors import ConfigError, ConvMemError
from .._models import Message
from .catalog import DEFAULT_PAGE_SIZE, Page, StoreCatalog
from .html import STYLE, context_fragment, escape
from .view import context_view, format_time, shared_words

__all__ = ["DEFAULT_PORT", "LOOPBACK_HOSTS", "check_bind", "create_app", "serve"]

DEFAULT_PORT = 8765
DEFAULT_BUDGET = 1024
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
_MAX_BUDGET = 1_000_000
_MAX_QUERY_CHARS = 4000

_SECURITY_HEADERS = {
    # No script may run on these pages: even text that escaped escaping could not act.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    # Not "no-referrer": with it a browser sends "Origin: null" on a form's POST, which
    # the origin check must refuse; "same-origin" tells other sites nothing either.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}

_PAGE_STYLE = """
body { margin: 0; background: #fff; }
.cm-top { background: #111827; color: #f9fafb; padding: 8px 16px; display: flex; gap: 16px; align-items: baseline; }
.cm-top a { color: #f9fafb; }
.cm-top .cm-mode { margin-left: auto; font-size: 12px; color: #d1d5db; }
.cm-main { padding: 8px 16px 32px; }
.cm h2 { font-size: 17px; margin: 10px 0 6px; }
.cm form.cm-inline { display: inline; }
.cm input[type=text], .cm input[type=password] { width: 28em; padding: 3px 6px; }
.cm input[type=number] { width: 6em; padding: 3px 6px; }
.cm button { padding: 3px 10px; cursor: pointer; }
.cm button.cm-danger { background: #b91c1c; color: #fff; border: 1px solid #7f1d1d; border-radius: 3px; }
.cm .cm-pager { margin: 6px 0; }
.cm .cm-box { border: 1px solid #e5e7eb; border-radius: 4px; padding: 6px 10px; margin: 6px 0; }
.cm .cm-notice { border-left: 4px solid #b91c1c; padding: 6px 10px; background: #fef2f2; }
.cm .cm-done { border-left: 4px solid #059669; padding: 6px 10px; background: #ecfdf5; }
"""


def check_bind(host: str, *, allow_remote: bool) -> None:
    """Refuse (`ConfigError`) to listen on `host` unless it is a loopback address or `allow_remote`."""
    if allow_remote:
        return
    name = host.strip("[]")
    try:
        loopback = name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ConfigError(
            f"refusing to serve on {host!r}: that is not a loopback address, so anyone who can reach "
            "this machine could read every stored conversation. Use 127.0.0.1 (the default), or pass "
            "--allow-remote if that is really meant"
        )


def _link(path: str, **params: object) -> str:
    """A URL of this app, escaped for an attribute."""
    query = urlencode({key: value for key, value in params.items() if value is not None})
    return escape(f"{path}?{query}" if query else path)


def _page(title: str, body: str, *, writable: bool, status: int = 200) -> HTMLResponse:
    mode = "write mode: deleting asks for the write token" if writable else "read-only"
    document = (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{escape(title)} · convmem inspector</title>"
        f"<style>{STYLE}{_PAGE_STYLE}</style></head><body><div class=cm>"
        f'<div class=cm-top><a href="/"><b>convmem inspector</b></a><span>{escape(title)}</span>'
        f"<span class=cm-mode>{escape(mode)}</span></div>"
        f"<div class=cm-main>{body}</div></div></body></html>"
    )
    return HTMLResponse(document, status_code=status, headers=_SECURITY_HEADERS)


def _pager(page: Page[Any], path: str, noun: str, **params: object) -> str:
    if not page.total:
        return f'<div class="cm-pager cm-muted">no {escape(noun)}</div>'
    last = min(page.total, page.first + page.size - 1)
    parts = [f"{escape(noun)} {page.first}-{last} of {page.total} · page {page.number} of {page.pages}"]
    if page.has_previous:
        parts.append(f'<a rel=prev href="{_link(path, **params, page=page.number - 1)}">previous</a>')
    if page.has_next:
        parts.append(f'<a rel=next href="{_link(path, **params, page=page.number + 1)}">next</a>')
    return f'<div class="cm-pager">{" · ".join(parts)}</div>'


def _table(css: str, headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table of already escaped cells."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _number(value: str | None, name: str, default: int, low: int, high: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number from {low} to {high}, got {value!r:.40}") from None
    if not low <= number <= high:
        raise ConfigError(f"{name} must be from {low} to {high}, got {number}")
    return number


def _required(params: Any, name: str) -> str:
    value = params.get(name)
    if not value:
        raise ConfigError(f"the request names no {name}")
    return str(value)


class _Inspector:
    """The pages and actions over one `StoreCatalog`."""

    def __init__(self, catalog: StoreCatalog, write_token: str | None, page_size: int) -> None:
        self.catalog = catalog
        self.write_token = write_token
        self.page_size = page_size

    @property
    def writable(self) -> bool:
        return self.write_token is not None

    def page(self, title: str, body: str, status: int = 200) -> HTMLResponse:
        return _page(title, body, writable=self.writable, status=status)

    def _confirm_link(self, label: str, **params: object) -> str:
        """A button to the confirmation page of a delete (a GET: it only asks)."""
        if not self.writable:
            return ""
        fields = "".join(
            f'<input type=hidden name="{escape(name)}" value="{escape(value)}">'
            for name, value in params.items()
        )
        return (
            f'<form class="cm-inline cm-action" method=get action="/confirm">{fields}'
            f"<button type=submit class=cm-danger>{escape(label)}</button></form>"
        )

    # -- pages ---------------------------------------------------------------------

    def users(self, request: Request) -> Response:
        number = _number(request.query_params.get("page"), "page", 1, 1, 10**9)
        page = self.catalog.users(number, self.page_size)
        rows = [
            [
                f'<a href="{_link("/user", id=row.user_id)}">{escape(row.user_id)}</a>'
                if row.user_id is not None
                else f'<a href="{_link("/user", none=1)}" class=cm-muted>(no user)</a>',
                str(row.sessions),
                str(row.messages),
                str(row.tokens),
                format_time(row.first_at),
                format_time(row.last_at),
            ]
            for row in page.items
        ]
        body = (
            f"<h2>Users</h2><p class=cm-muted>{escape(repr(self.catalog.store))}</p>"
            + _pager(page, "/", "users")
            + _table("cm-users", ["user", "sessions", "messages", "tokens", "first", "last"], rows)
        )
        return self.page("users", body)

    def user(self, request: Request) -> Response:
        params = request.query_params
        user_id = None if params.get("none") else _required(params, "id")
        number = _number(params.get("page"), "page", 1, 1, 10**9)
        page = self.catalog.sessions(user_id, number, self.page_size)
        rows = [
            [
                f'<a href="{_link("/session", id=s.session_id)}">{escape(s.session_id)}</a>',
                str(s.message_count),
                str(s.total_tokens),
                format_time(s.created_at),
                format_time(s.updated_at),
            ]
            for s in page.items
        ]
        title = "(no user)" if user_id is None else f"user {user_id}"
        body = f"<h2>{escape(title)}</h2>"
        if user_id is not None:
            body += (
                '<form class=cm-box method=get action="/search">'
                f'<input type=hidden name=user value="{escape(user_id)}">'
                "Search this user's sessions: "
                '<input type=text name=q required placeholder="words or a question"> '
                "<button type=submit>Search</button></form>"
            )
            body += self._confirm_link("Forget this user…", action="forget-user", id=user_id)
        body += "<h3>Sessions</h3>" + _pager(
            page, "/user", "sessions", id=user_id, none=1 if user_id is None else None
        )
        body += _table("cm-sessions", ["session", "messages", "tokens", "created", "last write"], rows)
        if user_id is not None:
            body += "<h3>Facts across the user's sessions</h3>" + _facts_table(
                self.catalog.user_facts(user_id)
            )
        return self.page(title, body)

    def session(self, request: Request) -> Response:
        params = request.query_params
        session_id = _required(params, "id")
        detail = self.catalog.session(session_id)
        stats = detail.stats
        if not stats.message_count and not stats.last_seq and not detail.summary.text and not detail.facts:
            return self.page("not found", f"<p>There is no session {escape(session_id)}.</p>", 404)
        number = _number(params.get("page"), "page", 1, 1, 10**9)
        page = self.catalog.messages(session_id, number, self.page_size)
        owner = (
            f'<a href="{_link("/user", id=stats.user_id)}">{escape(stats.user_id)}</a>'
            if stats.user_id is not None
            else f'<a href="{_link("/user", none=1)}">(no user)</a>'
        )
        summary = detail.summary
        body = (
            f"<h2>Session {escape(session_id)}</h2>"
            f"<p>user {owner} · {stats.message_count} messages · {stats.total_tokens} tokens · "
            f"created {format_time(stats.created_at)} · last write {format_time(stats.updated_at)}</p>"
            '<form class=cm-box method=get action="/context">'
            f'<input type=hidden name=id value="{escape(session_id)}">'
            "Build the context for a new message: "
            '<input type=text name=query required placeholder="the next user message"> '
            f'budget <input type=number name=budget value="{DEFAULT_BUDGET}" min=1 max={_MAX_BUDGET}> '
            "<button type=submit>Build</button></form>"
            + self._confirm_link("Forget this session…", action="forget-session", id=session_id)
            + "<h3>Rolling summary</h3>"
            + (
                f'<p class=cm-muted>covers seq &le; {summary.covers_through_seq}</p><div class="cm-box cm-text cm-summary">'
                f"{escape(summary.text)}</div>"
                if summary.text.strip()
                else "<p class=cm-muted>No summary yet.</p>"
            )
            + "<h3>Facts this session stated</h3>"
            + _facts_table(detail.facts)
            + "<h3>Messages</h3>"
            + _pager(page, "/session", "seqs", id=session_id)
            + self._messages(session_id, page.items)
        )
        return self.page(f"session {session_id}", body)

    def _messages(self, session_id: str, messages: Sequence[Message]) -> str:
        rows = []
        for message in messages:
            speaker = f"{message.role.value} ({message.name})" if message.name else message.role.value
            row = [
                str(message.seq),
                format_time(message.timestamp),
                escape(speaker),
                escape(message.status.value),
                "" if message.token_count is None else str(message.token_count),
                f'<div class="cm-text">{escape(message.text)}</div>',
            ]
            if self.writable:
                row.append(
                    self._confirm_link("Delete…", action="delete-message", id=session_id, seq=message.seq)
                )
            rows.append(row)
        headers = ["seq", "time", "role", "status", "tokens", "content"] + ([""] if self.writable else [])
        return _table("cm-log", headers, rows)

    def context(self, request: Request) -> Response:
        params = request.query_params
        session_id = _required(params, "id")
        query = params.get("query") or None
        if query is not None and len(query) > _MAX_QUERY_CHARS:
            raise ConfigError(f"the query is {len(query)} characters long; the limit is {_MAX_QUERY_CHARS}")
        budget = _number(params.get("budget"), "budget", DEFAULT_BUDGET, 1, _MAX_BUDGET)
        context = self.catalog.build_context(session_id, query, budget)
        body = (
            f'<h2>Context for session <a href="{_link("/session", id=session_id)}">{escape(session_id)}</a></h2>'
            f"<p>query: <b class=cm-query>{escape(query or '(none)')}</b> · budget {budget} tokens</p>"
            + context_fragment(context_view(context))
        )
        return self.page(f"context of {session_id}", body)

    def search(self, request: Request) -> Response:
        params = request.query_params
        user_id = _required(params, "user")
        query = _required(params, "q")
        if len(query) > _MAX_QUERY_CHARS:
            raise ConfigError(f"the query is {len(query)} characters long; the limit is {_MAX_QUERY_CHARS}")
        items = self.catalog.search(user_id, query)
        rows = [
            [
                f'<a href="{_link("/session", id=item.session_id)}">{escape(item.session_id)}</a>',
                escape(", ".join(str(s) for s in item.seqs)),
                escape(item.time_label.strip("[]") or format_time(item.timestamp)),
                f"{item.score:.3f}",
                escape(", ".join(shared_words(query, item.text)) or "(by meaning or as a neighbour)"),
                f'<div class="cm-text">{escape(item.text)}</div>',
            ]
            for item in sorted(items, key=lambda found: -found.score)
        ]
        body = (
            f'<h2>Search in the sessions of <a href="{_link("/user", id=user_id)}">{escape(user_id)}</a></h2>'
            f"<p>query: <b class=cm-query>{escape(query)}</b> · {len(rows)} found, best first</p>"
            + _table("cm-results", ["session", "seq", "date", "score", "words in common", "text"], rows)
        )
        return self.page(f"search {user_id}", body)

    def confirm(self, request: Request) -> Response:
        if not self.writable:
            return self._refused("this inspector is read-only: start convmem serve with a write token")
        params = request.query_params
        action = _required(params, "action")
        target = _required(params, "id")
        hidden = f'<input type=hidden name=id value="{escape(target)}">'
        if action == "forget-session":
            stats = self.catalog.session(target).stats
            what = f"session {target}: {stats.message_count} messages, its summary and facts"
        elif action == "forget-user":
            sessions = self.catalog.sessions(target, 1, 1).total
            what = f"user {target}: all {sessions} of their sessions, with summaries and facts"
        elif action == "delete-message":
            seq = _number(_required(params, "seq"), "seq", 0, 1, 2**62)
            hidden += f'<input type=hidden name=seq value="{seq}">'
            what = f"message {seq} of session {target} (the summary and facts it fed are rebuilt)"
        else:
            raise ConfigError(
                f"unknown action {action!r:.40}; one of forget-session, forget-user, delete-message"
            )
        body = (
            f"<h2>Confirm</h2><div class=cm-notice>This deletes {escape(what)}. It cannot be undone.</div>"
            f'<form class=cm-box method=post action="/{escape(action)}">{hidden}'
            "Write token: <input type=password name=token autocomplete=off required> "
            f'<button type=submit class=cm-danger>Yes, delete</button></form><p><a href="/">Cancel</a></p>'
        )
        return self.page("confirm", body)

    # -- actions -------------------------------------------------------------------

    def _refused(self, why: str) -> HTMLResponse:
        return self.page("refused", f'<div class="cm-notice cm-refused">Refused: {escape(why)}.</div>', 403)

    def authorize(self, request: Request, form: dict[str, str]) -> HTMLResponse | None:
        """None when the request may write; else the refusal to send."""
        if self.write_token is None:
            return self._refused("this inspector is read-only: start convmem serve with a write token")
        # A browser names the page a POST came from; a sandboxed frame elsewhere says "null".
        origin = request.headers.get("origin")
        if origin is not None and urlsplit(origin).netloc != request.headers.get("host", ""):
            return self._refused("the request came from another site")
        token = form.get("token", "")
        if not hmac.compare_digest(token.encode(), self.write_token.encode()):
            return self._refused("the write token is missing or wrong")
        return None

    def forget_session(self, form: dict[str, str]) -> Response:
        session_id = _required(form, "id")
        self.catalog.forget_session(session_id)
        return self.page(
            "forgotten",
            f'<div class=cm-done>Session {escape(session_id)} was forgotten.</div><p><a href="/">Back to the users</a></p>',
        )

    def forget_user(self, form: dict[str, str]) -> Response:
        user_id = _required(form, "id")
        deleted = self.catalog.forget_user(user_id)
        return self.page(
            "forgotten",
            f"<div class=cm-done>User {escape(user_id)} was forgotten: {len(deleted)} sessions deleted.</div>"
            '<p><a href="/">Back to the users</a></p>',
        )

    def delete_message(self, form: dict[str, str]) -> Response:
        session_id = _required(form, "id")
        seq = _number(_required(form, "seq"), "seq", 0, 1, 2**62)
        self.catalog.delete_message(session_id, seq)
        return self.page(
            "deleted",
            f"<div class=cm-done>Message {seq} of session {escape(session_id)} was deleted.</div>"
            f'<p><a href="{_link("/session", id=session_id)}">Back to the session</a></p>',
        )


def _facts_table(facts: Sequence[Any]) -> str:
    if not facts:
        return "<p class=cm-muted>No facts.</p>"
    rows = [
        [
            escape(fact.key),
            escape(f"not {fact.value}" if fact.negated else fact.value),
            escape(fact.session_id or ""),
            "" if fact.seq is None else str(fact.seq),
            format_time(fact.timestamp),
        ]
        for fact in facts
    ]
    return _table("cm-facts", ["key", "value", "session", "seq", "said"], rows)


def _page_handler(
    inspector: _Inspector, page: Callable[[Request], Response]
) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        try:
            return await run_in_threadpool(page, request)
        except ConvMemError as exc:
            return inspector.page("error", f'<div class="cm-notice">{escape(exc)}</div>', 400)

    return handle


def _action_handler(
    inspector: _Inspector, action: Callable[[dict[str, str]], Response]
) -> Callable[[Request], Awaitable[Response]]:
    async def handle(request: Request) -> Response:
        body = await request.body()
        form = dict(parse_qsl(body.decode("utf-8", errors="replace"), keep_blank_values=True))
        refusal = inspector.authorize(request, form)
        if refusal is not None:
            return refusal
        try:
            return await run_in_threadpool(action, form)
        except ConvMemError as exc:
            return inspector.page("error", f'<div class="cm-notice">{escape(exc)}</div>', 400)

    return handle


def create_app(
    catalog: StoreCatalog,
    *,
    write_token: str | None = None,
    allow_remote: bool = False,
    page_size: int = DEFAULT_PAGE_SIZE,
) -> Starlette:
    """The inspector's ASGI app over `catalog` (see the module docstring).

    `write_token`: None (read-only) or a secret of at least 16 characters that a
    delete must carry. `allow_remote`: answer any Host header, not only loopback names.
    """
    if write_token is not None and (not isinstance(write_token, str) or len(write_token) < 16):
        raise ConfigError(
            "the write token must be a string of at least 16 characters (e.g. `openssl rand -hex 16`)"
        )
    inspector = _Inspector(catalog, write_token, page_size)
    routes = [
        Route("/", _page_handler(inspector, inspector.users)),
        Route("/user", _page_handler(inspector, inspector.user)),
        Route("/session", _page_handler(inspector, inspector.session)),
        Route("/context", _page_handler(inspector, inspector.context)),
        Route("/search", _page_handler(inspector, inspector.search)),
        Route("/confirm", _page_handler(inspector, inspector.confirm)),
        Route("/forget-session", _action_handler(inspector, inspector.forget_session), methods=["POST"]),
        Route("/forget-user", _action_handler(inspector, inspector.forget_user), methods=["POST"]),
        Route("/delete-message", _action_handler(inspector, inspector.delete_message), methods=["POST"]),
    ]
    hosts = ["*"] if allow_remote else list(LOOPBACK_HOSTS)
    return Starlette(routes=routes, middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)])


def serve(
    catalog: StoreCatalog,
    *,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    write_token: str | None = None,
    allow_remote: bool = False,
) -> None:
    """Serve the inspector with uvicorn until interrupted; refuses a non-loopback `host`
    unless `allow_remote` (`check_bind`)."""
    import uvicorn

    check_bind(host, allow_remote=allow_remote)
    app = create_app(catalog, write_token=write_token, allow_remote=allow_remote)
    uvicorn.run(app, host=host, port=port, log_level="warning")

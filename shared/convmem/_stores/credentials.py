"""Keeping the passwords of server URLs out of every error message and log line a store writes.

A Redis or PostgreSQL URL may carry a password (``redis://user:secret@host``,
``postgresql://app:secret@db/chat``, or a libpq ``password=secret`` option).
Stores name their server by host and port, and any text that could still hold
the URL (an error of the client library that quotes it) goes through `redact`.
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

__all__ = ["redact", "redact_url"]

HIDDEN = "***"
# user:password@ in a URL, and password=... in a libpq option string (quoted or not).
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s]*:)[^@\s]*@")
_OPTION = re.compile(r"(?P<head>\bpassword\s*=\s*)(?:'(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """`url` with its password replaced by ``***`` (a URL without one is returned as it is)."""
    text = _USERINFO.sub(lambda m: f"{m['head']}{HIDDEN}@", url)
    return _OPTION.sub(lambda m: f"{m['head']}{HIDDEN}", text)


def _password(url: str) -> str | None:
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    if password is None:
        match = _OPTION.search(url)
        password = match.group(0)[len(match["head"]) :].strip("'") if match else None
    return password or None


def redact(text: str, url: str | None) -> str:
    """`text` without the password of `url`, however it is quoted in it, nor any other
    URL's or option string's password."""
    if url:
        password = _password(url)
        if password:
            for form in {password, unquote(password)}:
                text = text.replace(form, HIDDEN)
    return redact_url(text)

"""The exception hierarchy: every error convmem raises on purpose is a `ConvMemError`."""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "ConfigError",
    "ConvMemError",
    "InvalidMessageError",
    "InvalidSessionIdError",
    "ModelTimeoutError",
    "SessionOwnerError",
    "StoreError",
]


class ConvMemError(Exception):
    """Base class of every error raised by convmem."""


class InvalidMessageError(ConvMemError, ValueError):
    """A message, role, content, tool call or turn status was rejected before it was stored."""


class InvalidSessionIdError(ConvMemError, ValueError):
    """A session or user id is empty, too long, or contains control characters."""


class ConfigError(ConvMemError, ValueError):
    """A configuration value is out of range or of the wrong type."""


class BudgetError(ConvMemError, ValueError):
    """A token budget is not positive, or too small for the mandatory parts of a context."""


class StoreError(ConvMemError):
    """The storage backend failed (I/O error, lost connection, corrupt record)."""


class ModelTimeoutError(ConvMemError, TimeoutError):
    """A model call (a summary, a fact extraction) took longer than ``MemoryConfig.model_timeout``.

    Nothing is lost: the turns stay in the log, and the work is retried later. Raised
    to the caller only by calls that ask for the work now (`summarize_now`); otherwise
    it is logged.
    """


class SessionOwnerError(ConvMemError, PermissionError):
    """A session written by one user was opened, read or appended to as another user.

    A session belongs to the first user that writes to it; every other user is
    refused, so nobody reads another user's conversation and `forget_user`
    deletes everything a user wrote. The message names the session and the
    refused user, not the owner: it is often shown to the refused user, and
    who owns a session is not theirs to learn. Server code that needs it for
    its own logs reads ``owner_user_id``.
    """

    def __init__(self, session_id: str, user_id: str, owner_user_id: str) -> None:
        self.session_id = session_id
        self.user_id = user_id
        self.owner_user_id = owner_user_id
        super().__init__(
            f"session {session_id!r:.80} belongs to another user; user {user_id!r:.80} may not read "
            "or write it. Give each user's conversations their own session ids (e.g. prefixed "
            "with the user id)"
        )

    def __reduce__(self) -> tuple[type[SessionOwnerError], tuple[str, str, str]]:
        return type(self), (self.session_id, self.user_id, self.owner_user_id)

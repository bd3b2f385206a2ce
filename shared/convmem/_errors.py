"""The exception hierarchy: every error convmem raises on purpose is a `ConvMemError`."""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "ConfigError",
    "ConvMemError",
    "InvalidMessageError",
    "InvalidSessionIdError",
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

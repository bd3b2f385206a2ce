"""The checks every option goes through, wherever it is given: one wording for one
mistake, naming the option, the value received and what is allowed.

    check_int("budget", budget)                                   # 1 .. MAX_INT_OPTION
    check_number("recall_share", share, low=0, high=1, allowed="a fraction in [0, 1)", high_open=True)
    check_choice("memory_placement", placement, ("user", "system", "developer"))
    check_bool("background", background)
"""

from __future__ import annotations

import math

from ._errors import ConfigError

__all__ = ["MAX_INT_OPTION", "check_bool", "check_choice", "check_int", "check_number"]

# Integer options are counts and sizes; beyond 32 bits they are typos, and they
# would overflow the float arithmetic that shares out a budget.
MAX_INT_OPTION = 2**31 - 1


def check_int(name: str, value: object, *, low: int = 1, or_none: bool = False) -> None:
    """Refuse anything but an int from `low` to `MAX_INT_OPTION` (or None, with `or_none`)."""
    if or_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_INT_OPTION:
        allowed = "None or an int" if or_none else "an int"
        raise ConfigError(f"{name} must be {allowed} from {low} to {MAX_INT_OPTION}, got {value!r:.60}")


def check_number(
    name: str,
    value: object,
    *,
    low: float,
    high: float,
    allowed: str,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Refuse anything but a finite int or float within [low, high] (ends excluded when open)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be {allowed}, got {type(value).__name__}: {value!r:.60}")
    if (
        not math.isfinite(value)
        or value < low
        or value > high
        or (low_open and value == low)
        or (high_open and value == high)
    ):
        raise ConfigError(f"{name} must be {allowed}, got {value!r}")


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    """Refuse anything but one of `allowed`."""
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {allowed}, got {value!r:.60}")


def check_bool(name: str, value: object) -> None:
    """Refuse anything but True or False (1, "yes" and None are mistakes, not switches)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r:.60}")

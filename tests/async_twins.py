"""Checking that a wrapper's async twins behave as its sync methods do.

A test module lists, per class, the sync methods that do no I/O (nothing to
wait for) and the twins whose names do not follow ``a<name>``; every other
public method a class defines is expected to have an async twin. Scenarios run
a piece of work once through sync methods and once, on fresh objects, through
their twins; the outcomes (a result made comparable, or an error's type and
message) must be equal, and together the scenarios must cover every pair.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class Pair:
    owner: type
    sync: str
    twin: str

    def __str__(self) -> str:
        return f"{self.owner.__name__}.{self.sync}/{self.twin}"


@dataclasses.dataclass(frozen=True)
class Scenario:
    name: str
    pairs: tuple[Pair, ...]
    run_sync: Callable[[], Any]
    run_async: Callable[[], Awaitable[Any]]


def is_async(function: object) -> bool:
    return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)


def own_sync_methods(cls: type) -> set[str]:
    """Public methods and properties `cls` defines itself that are neither coroutines nor async generators."""
    names = set()
    for name, value in vars(cls).items():
        if name.startswith("_") and name != "__call__":
            continue
        function = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
        if inspect.isfunction(function) and not is_async(function):
            names.add(name)
    return names


def expected_pairs(
    classes: Mapping[type, Iterable[str]], renamed: Mapping[tuple[type, str], str]
) -> tuple[set[Pair], list[str]]:
    """The pairs every class must have (all but the listed methods that do no I/O), and the
    sync methods among them whose twin is missing or is not a coroutine function."""
    pairs, missing = set(), []
    for cls, no_io in classes.items():
        for name in sorted(own_sync_methods(cls) - set(no_io)):
            twin = renamed.get((cls, name), f"a{name}")
            if not is_async(getattr(cls, twin, None)):
                missing.append(f"{cls.__name__}.{name} (no async {twin})")
            pairs.add(Pair(cls, name, twin))
    return pairs, missing


def outcome(run: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return ("result", run())
    except Exception as exc:
        return ("error", f"{type(exc).__name__}: {exc}")


async def aoutcome(run: Callable[[], Awaitable[Any]]) -> tuple[str, Any]:
    try:
        return ("result", await run())
    except Exception as exc:
        return ("error", f"{type(exc).__name__}: {exc}")

"""The checks of the store contract: each a plain function, registered with the capability
it needs (none: every store) and whether it opens a second store on the same data."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from .._stores.base import Store

__all__ = ["CHECKS", "OpenStore", "Raised", "StoreCheck", "check", "raises"]

_E = TypeVar("_E", bound=BaseException)

OpenStore = Callable[[], Store]
"""Opens a store on the contract's data: every call may open a new store, and all see the same data."""


@dataclasses.dataclass(frozen=True)
class StoreCheck:
    """One behaviour of the contract, run with `run(open_store)`; raises `AssertionError`
    (or the store's own exception) when the store does not behave so."""

    name: str
    capability: type | None
    """The capability protocol a store must declare for this check to apply; None for every store."""
    reopens: bool
    """Opens a second store on the same data after closing the first (skipped for stores that
    keep nothing once closed, such as `InMemoryStore`)."""
    function: Callable[[OpenStore], None] = dataclasses.field(repr=False)

    def run(self, open_store: OpenStore) -> None:
        """Run the check on stores `open_store` opens; returns nothing when the store passes."""
        self.function(open_store)

    def __str__(self) -> str:
        return self.name


CHECKS: list[StoreCheck] = []


def _case_id(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _with_store(open_store: OpenStore, body: Callable[[Store], None]) -> None:
    store = open_store()
    try:
        body(store)
    finally:
        store.close()


def check(
    *,
    cases: Sequence[Any] | None = None,
    ids: Sequence[str] | None = None,
    capability: type | None = None,
    reopens: bool = False,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register the decorated function as a check (one per case, given `cases`).

    A plain check takes a store (opened for it and closed after); a check that
    `reopens` takes the `OpenStore` itself; a check with `cases` also takes the case.
    """

    def register(function: Callable[..., None]) -> Callable[..., None]:
        if cases is None:
            runner = function if reopens else (lambda open_store: _with_store(open_store, function))
            CHECKS.append(StoreCheck(function.__name__, capability, reopens, runner))
            return function
        names = list(ids) if ids is not None else [_case_id(case) for case in cases]
        for name, case in zip(names, cases, strict=True):

            def run_case(open_store: OpenStore, case: Any = case) -> None:
                _with_store(open_store, lambda store: function(store, case))

            CHECKS.append(StoreCheck(f"{function.__name__}[{name}]", capability, reopens, run_case))
        return function

    return register


class Raised(Generic[_E]):
    """What `raises` caught: its ``value``."""

    value: _E


@contextmanager
def raises(expected: type[_E], match: str | None = None) -> Iterator[Raised[_E]]:
    """Assert that the block raises `expected`, with a message `match` searches, as
    ``pytest.raises`` does (the contract runs without pytest)."""
    raised: Raised[_E] = Raised()
    try:
        yield raised
    except expected as exc:
        if match is not None and not re.search(match, str(exc)):
            raise AssertionError(f"{type(exc).__name__} {str(exc)!r} does not match {match!r}") from exc
        raised.value = exc
    else:
        raise AssertionError(f"did not raise {expected.__name__}")

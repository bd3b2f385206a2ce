"""The store contract, for authors of a new store: every behaviour convmem relies on, as checks
to run against your store on a real server.

A store is done when the contract passes. The base checks apply to every `Store`
(appending and reading the log, owners, state records with compare-and-set,
deleting, retention, hostile ids, generations); each capability a store
declares among its bases (`convmem.integration`: `ReadsSession`, `ReadsStates`, `ReadsLogs`,
`ListsUserSessions`, `ReadsUserScope`, `HostsHistoryIndex`, `HostsVectors`, `HasFileLocation`)
adds its own. Nothing here needs pytest; with pytest, run one test per check::

    import pytest
    from convmem.testing import store_checks

    from mystore import MyStore

    @pytest.mark.parametrize("check", store_checks(MyStore), ids=str)
    def test_my_store_keeps_the_contract(check, tmp_path):
        check.run(lambda: MyStore(tmp_path / "data"))  # a fresh, empty namespace per test

or all of them in one call, which empties the data (with ``clear``) between checks
and raises `AssertionError` naming every check that failed::

    from convmem.testing import check_store

    check_store(lambda: MyStore("/tmp/contract"), MyStore)

The function you pass opens a store on the contract's data; each call may open a
new store (a new connection), and every store it opens sees the same data. Checks
marked `StoreCheck.reopens` open a second store after closing the first: leave
them out (``persistent=False``) for a store that keeps nothing once closed. An
async store runs the same checks through `blocking`::

    check_store(blocking(lambda: MyAsyncStore(url)), MyAsyncStore)
"""

from __future__ import annotations

import inspect
import traceback

from .._stores.base import Store
from .._stores.capabilities import (
    AsyncReadsSession,
    HasFileLocation,
    HostsHistoryIndex,
    HostsVectors,
    ListsUserSessions,
    ReadsLogs,
    ReadsSession,
    ReadsStates,
    ReadsUserScope,
)
from . import _capability_checks, _edits_checks, _lifecycle_checks, _log_checks, _state_checks
from ._blocking import BlockingStore, blocking
from ._registry import CHECKS, OpenStore, StoreCheck

__all__ = [
    "CAPABILITIES",
    "BlockingStore",
    "OpenStore",
    "StoreCheck",
    "blocking",
    "check_store",
    "store_checks",
]

# Imported for the checks they register.
_REGISTERED = (_log_checks, _state_checks, _lifecycle_checks, _edits_checks, _capability_checks)

CAPABILITIES: tuple[type, ...] = (
    ReadsSession,
    ReadsStates,
    ReadsLogs,
    ListsUserSessions,
    ReadsUserScope,
    HostsHistoryIndex,
    HostsVectors,
    HasFileLocation,
)
"""The capabilities the contract has checks for, in the order they run."""


def _declared(store_type: type) -> set[type]:
    if inspect.iscoroutinefunction(getattr(store_type, "append", None)):
        # An async store runs through `blocking`, which declares the sync twins.
        return {ReadsSession} if issubclass(store_type, AsyncReadsSession) else set()
    return {capability for capability in CAPABILITIES if issubclass(store_type, capability)}


def store_checks(store_type: type, *, persistent: bool = True) -> list[StoreCheck]:
    """The checks a store of `store_type` must pass: the base ones, and those of each capability
    it declares; without `persistent`, none that reopens the data."""
    declared = _declared(store_type)
    return [
        check
        for check in CHECKS
        if (check.capability is None or check.capability in declared) and (persistent or not check.reopens)
    ]


def check_store(open_store: OpenStore, store_type: type | None = None, *, persistent: bool = True) -> None:
    """Run every check of `store_type` (by default the type of the first store `open_store`
    opens) on the data `open_store` reaches, emptying it before each; raise `AssertionError`
    naming each check that failed and why."""
    if store_type is None:
        first = open_store()
        store_type = type(first)
        first.close()
    failures = []
    for check in store_checks(store_type, persistent=persistent):
        _empty(open_store)
        try:
            check.run(open_store)
        except Exception as exc:
            failures.append(f"{check.name}: {''.join(traceback.format_exception_only(exc)).strip()}")
    _empty(open_store)
    if failures:
        raise AssertionError(
            f"{len(failures)} check(s) of the store contract failed:\n" + "\n".join(failures)
        )


def _empty(open_store: OpenStore) -> None:
    store: Store = open_store()
    try:
        for session_id in store.sessions():
            store.clear(session_id)
    finally:
        store.close()

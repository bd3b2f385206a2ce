"""When a `Recall` searches the keyword index a store keeps, instead of mirroring logs.

A store that keeps recall's keyword index of its users' histories
(`HostsHistoryIndex`: SQLite and PostgreSQL unless opened with
``lexical_index="process"``) is searched through it when the engine recalls by
words alone with the rules the rows were derived by: no embedder, the default
unit rules, no neighbours. Otherwise, or when that search fails, recall mirrors
the logs in this process as before.
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable, Collection, Sequence
from typing import Any, cast

from .._stores.base import SessionStats, Store
from .._stores.capabilities import HostsHistoryIndex, offers
from .._tokens import TokenCounter
from .config import RecallConfig, RecallFilters
from .index_rows import HistoryTables, default_rules
from .kept_history import KeptHistories
from .plan import Blocking, Plan
from .render import RecallResult

__all__ = ["KeptRoute"]

logger = logging.getLogger("convmem")


class KeptRoute:
    """The part of a `Recall` that decides on, writes and searches histories stores keep."""

    def __init__(
        self, config_of: Callable[[], RecallConfig], *, words_only: bool, store_key: Callable[[Store], object]
    ) -> None:
        self._config_of = config_of  # the engine's config, which its user may replace
        self.histories = KeptHistories(config_of())
        self._words_only = words_only
        self._store_key = store_key
        self._tables_of: weakref.WeakKeyDictionary[Any, HistoryTables | None] = weakref.WeakKeyDictionary()

    def tables(self, store: Store | None) -> HistoryTables | None:
        """The keyword index `store` keeps of its users' histories, when recall searches it."""
        config = self._config_of()
        self.histories.config = config
        if store is None or not self._words_only or not default_rules(config) or config.neighbour_radius:
            return None
        try:
            return self._tables_of[store]
        except KeyError:
            pass
        except TypeError:  # not weakly referenceable: asked each time
            return _tables_of(store)
        tables = self._tables_of[store] = _tables_of(store)
        return tables

    def catch_up(self, store: Store | None, session_id: str, *, batched: bool = False) -> bool:
        """Bring the session's rows up to its log when `store` keeps them (see
        `KeptHistories.catch_up`); False when it does not, and recall mirrors the log."""
        tables = self.tables(store)
        if tables is None or store is None:
            return False
        self.histories.catch_up(tables, store, session_id, batched=batched)
        return True

    def plan_catch_up(self, store: Store | None, session_id: str, *, batched: bool = False) -> Plan[bool]:
        """`catch_up` as a step of a recall plan (a blocking call only when `store` keeps rows)."""
        if self.tables(store) is None:
            return False
        done: bool = yield Blocking(functools.partial(self.catch_up, store, session_id, batched=batched))
        return done

    def plan_search(
        self, store: Store, session_id: str, query: str, **arguments: Any
    ) -> Plan[RecallResult | None]:
        """`search` as a step of a recall plan (a blocking call only when `store` keeps rows)."""
        if self.tables(store) is None:
            return None
        found: RecallResult | None = yield Blocking(
            functools.partial(self.search, store, session_id, query, **arguments)
        )
        return found

    def reset(self, store: Store, session_id: str) -> None:
        """Drop the session's rows, when `store` keeps them: indexed again from its log."""
        tables = self.tables(store)
        if tables is not None:
            tables.reset(session_id)

    def search(
        self,
        store: Store,
        session_id: str,
        query: str,
        *,
        other_sessions: Sequence[str | SessionStats],
        session_stats: SessionStats | None,
        excluded: Collection[int],
        max_tokens: int,
        counter: TokenCounter,
        filters: RecallFilters | None,
    ) -> RecallResult | None:
        """What the sessions recall from the index `store` keeps; None when it keeps none or
        cannot answer (the sessions are not one history, or it failed: logged), and the
        logs are read instead."""
        tables = self.tables(store)
        if tables is None:
            return None
        try:
            return self.histories.search(
                tables,
                store,
                self._store_key(store),
                _all_stats(session_id, store, other_sessions, session_stats),
                query,
                excluded=set(excluded),
                max_tokens=max_tokens,
                counter=counter,
                filters=filters,
            )
        except Exception as exc:
            logger.warning(
                "recall could not search the keyword index %r keeps (%s: %s); reading the logs instead",
                store,
                type(exc).__name__,
                exc,
            )
            return None


def _tables_of(store: Store) -> HistoryTables | None:
    return cast(HostsHistoryIndex, store).history_tables() if offers(store, HostsHistoryIndex) else None


def _all_stats(
    session_id: str,
    store: Store,
    other_sessions: Sequence[str | SessionStats],
    session_stats: SessionStats | None,
) -> list[SessionStats]:
    """The stats of the sessions a search reads, the asking one first, each once."""
    found = [session_stats or store.stats(session_id)]
    seen = {session_id}
    for other in other_sessions:
        other_id = other if isinstance(other, str) else other.session_id
        if other_id not in seen:
            seen.add(other_id)
            found.append(store.stats(other) if isinstance(other, str) else other)
    return found

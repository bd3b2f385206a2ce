"""Running an `AsyncStore` where the contract expects a `Store`: each call is run to its end on
an event loop of the adapter's own, so the same checks hold an async store to the same contract."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from .._errors import ConfigError
from .._models import Message, TurnStatus
from .._stores.base import AsyncStore, SessionSnapshot, SessionStats, StateRecord, Store, is_async_store
from .._stores.capabilities import AsyncReadsSession, ReadsSession

__all__ = ["BlockingStore", "blocking"]

_T = TypeVar("_T")


class BlockingStore(Store):
    """A `Store` over an `AsyncStore`, for tests: every method runs the coroutine of the same name."""

    def __init__(self, store: AsyncStore) -> None:
        if not is_async_store(store):
            raise ConfigError(f"BlockingStore wraps an AsyncStore, got {type(store).__name__}")
        self.store = store
        self._loop = asyncio.new_event_loop()

    def __repr__(self) -> str:
        return f"BlockingStore({self.store!r})"

    def _run(self, call: Awaitable[_T]) -> _T:
        return self._loop.run_until_complete(call)

    def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        return self._run(self.store.append(session_id, messages, user_id=user_id))

    def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        return self._run(self.store.messages(session_id, after_seq=after_seq, through_seq=through_seq))

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        return self._run(self.store.tail(session_id, limit, before_seq=before_seq))

    def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return self._run(self.store.get(session_id, seqs))

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        return self._run(self.store.set_status(session_id, seq, status))

    def stats(self, session_id: str) -> SessionStats:
        return self._run(self.store.stats(session_id))

    def delete_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return self._run(self.store.delete_messages(session_id, seqs))

    def replace_message(self, session_id: str, seq: int, message: Message) -> Message:
        return self._run(self.store.replace_message(session_id, seq, message))

    def get_state(self, session_id: str, key: str) -> StateRecord | None:
        return self._run(self.store.get_state(session_id, key))

    def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        *,
        expected_version: int | None = None,
        requires_seq: int | None = None,
    ) -> StateRecord | None:
        return self._run(
            self.store.put_state(
                session_id, key, value, expected_version=expected_version, requires_seq=requires_seq
            )
        )

    def delete_state(self, session_id: str, key: str) -> None:
        self._run(self.store.delete_state(session_id, key))

    def clear(self, session_id: str) -> None:
        self._run(self.store.clear(session_id))

    def sessions(self, *, user_id: str | None = None) -> list[str]:
        return self._run(self.store.sessions(user_id=user_id))

    def forget_user(self, user_id: str) -> list[str]:
        return self._run(self.store.forget_user(user_id))

    def expire_idle(self, older_than_seconds: float) -> list[str]:
        return self._run(self.store.expire_idle(older_than_seconds))

    def close(self) -> None:
        """Close the async store, then the adapter's event loop."""
        if self._loop.is_closed():
            return
        try:
            self._run(self.store.close())
        finally:
            self._loop.close()


class _BlockingReadsSession(BlockingStore, ReadsSession):
    def read_session(self, session_id: str, keys: Sequence[str]) -> SessionSnapshot:
        assert isinstance(self.store, AsyncReadsSession)
        return self._run(self.store.read_session(session_id, keys))


def blocking(open_async_store: Callable[[], AsyncStore]) -> Callable[[], Store]:
    """An `OpenStore` for the contract from a function that opens an async store: each store
    it opens is a `BlockingStore` that declares the sync twin of what the async one declares."""

    def open_store() -> Store:
        store = open_async_store()
        adapter = _BlockingReadsSession if isinstance(store, AsyncReadsSession) else BlockingStore
        return adapter(store)

    return open_store


def blocking_type(store_type: type) -> type:
    """The `BlockingStore` class `blocking` wraps a store of `store_type` in."""
    return _BlockingReadsSession if issubclass(store_type, AsyncReadsSession) else BlockingStore

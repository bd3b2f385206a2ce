"""`InMemoryStore`: a process-local store, the default for tests and throwaway sessions."""

from __future__ import annotations

import bisect
import dataclasses
import secrets
import threading
import time
from collections.abc import Sequence

from .._errors import InvalidMessageError
from .._models import Message, TurnStatus
from .base import (
    SessionStats,
    StateRecord,
    Store,
    check_owner,
    check_seq,
    idle_cutoff,
    missing_seqs_error,
    new_generation,
    readable_seqs,
    validate_messages,
    validate_seqs,
)
from .capabilities import ListsUserSessions, ReadsStates

__all__ = ["InMemoryStore"]


@dataclasses.dataclass
class _Session:
    messages: list[Message] = dataclasses.field(default_factory=list)
    seqs: list[int] = dataclasses.field(default_factory=list)
    state: dict[str, StateRecord] = dataclasses.field(default_factory=dict)
    user_id: str | None = None
    total_tokens: int = 0
    last_seq: int = 0
    generation: str = dataclasses.field(default_factory=new_generation)
    created_at: float = dataclasses.field(default_factory=time.time)
    updated_at: float = dataclasses.field(default_factory=time.time)


class InMemoryStore(Store, ReadsStates, ListsUserSessions):
    """Keeps every session in a dict; thread-safe; gone when the process exits."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.RLock()
        self._namespace = f"memory:{secrets.token_hex(8)}"

    @property
    def namespace(self) -> str:
        """This store's name in a shared vector store: its data lives in this object only."""
        return self._namespace

    def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        messages = validate_messages(messages)
        with self._lock:
            existing = self._sessions.get(session_id)
            if existing is not None:
                check_owner(session_id, existing.user_id, user_id)
            session = self._sessions.setdefault(session_id, _Session(user_id=user_id))
            if user_id is not None and session.user_id is None:
                session.user_id = user_id
            next_seq = session.last_seq + 1
            stored = [dataclasses.replace(m, seq=next_seq + i) for i, m in enumerate(messages)]
            session.last_seq += len(stored)
            session.messages.extend(stored)
            session.seqs.extend(m.seq or 0 for m in stored)
            session.total_tokens += sum(m.token_count or 0 for m in stored)
            session.updated_at = time.time()
            return stored

    def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return []
            start = bisect.bisect_right(session.seqs, after_seq)
            end = len(session.seqs) if through_seq is None else bisect.bisect_right(session.seqs, through_seq)
            return session.messages[start:end]

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or limit <= 0:
                return []
            end = len(session.seqs) if before_seq is None else bisect.bisect_left(session.seqs, before_seq)
            return session.messages[max(0, end - limit) : end]

    def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return []
            found = []
            for seq in readable_seqs(seqs):
                index = bisect.bisect_left(session.seqs, seq)
                if index < len(session.seqs) and session.seqs[index] == seq:
                    found.append(session.messages[index])
            return found

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        check_seq(seq)
        with self._lock:
            session = self._sessions.get(session_id)
            index = bisect.bisect_left(session.seqs, seq) if session else -1
            if session is None or index >= len(session.seqs) or session.seqs[index] != seq:
                raise InvalidMessageError(f"session {session_id!r} has no message with seq={seq}")
            updated = dataclasses.replace(session.messages[index], status=status)
            session.messages[index] = updated
            session.updated_at = time.time()
            return updated

    def stats(self, session_id: str) -> SessionStats:
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None:
                return SessionStats(session_id, 0, 0, 0)
            return SessionStats(
                session_id,
                message_count=len(session.messages),
                last_seq=session.last_seq,
                total_tokens=session.total_tokens,
                user_id=session.user_id,
                created_at=session.created_at,
                updated_at=session.updated_at,
                generation=session.generation,
            )

    def delete_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        wanted = validate_seqs(seqs)
        with self._lock:
            session = self._sessions.get(session_id)
            if not wanted:
                return []
            indexes = self._indexes(session_id, session, wanted)
            assert session is not None
            deleted = [session.messages[i] for i in indexes]
            for index in reversed(indexes):
                del session.messages[index]
                del session.seqs[index]
            session.total_tokens -= sum(m.token_count or 0 for m in deleted)
            session.generation = new_generation()
            session.updated_at = time.time()
            return deleted

    def replace_message(self, session_id: str, seq: int, message: Message) -> Message:
        check_seq(seq)
        (message,) = validate_messages([message])
        with self._lock:
            session = self._sessions.get(session_id)
            (index,) = self._indexes(session_id, session, [seq])
            assert session is not None
            stored = dataclasses.replace(message, seq=seq)
            old = session.messages[index]
            session.messages[index] = stored
            session.total_tokens += (stored.token_count or 0) - (old.token_count or 0)
            session.generation = new_generation()
            session.updated_at = time.time()
            return stored

    @staticmethod
    def _indexes(session_id: str, session: _Session | None, seqs: list[int]) -> list[int]:
        """Positions of `seqs` (sorted) in the session's log; every one must be there."""
        found, missing = [], []
        for seq in seqs:
            index = bisect.bisect_left(session.seqs, seq) if session else -1
            if session is None or index >= len(session.seqs) or session.seqs[index] != seq:
                missing.append(seq)
            else:
                found.append(index)
        if missing:
            raise missing_seqs_error(session_id, missing)
        return found

    def get_state(self, session_id: str, key: str) -> StateRecord | None:
        with self._lock:
            session = self._sessions.get(session_id)
            return session.state.get(key) if session else None

    def get_states(self, session_ids: Sequence[str], key: str) -> dict[str, StateRecord]:
        """The `key` record of each of `session_ids` that has one."""
        with self._lock:
            found = {}
            for session_id in session_ids:
                session = self._sessions.get(session_id)
                record = session.state.get(key) if session else None
                if record is not None:
                    found[session_id] = record
            return found

    def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        *,
        expected_version: int | None = None,
        requires_seq: int | None = None,
    ) -> StateRecord | None:
        with self._lock:
            if requires_seq is not None:
                existing = self._sessions.get(session_id)
                if existing is None or existing.last_seq < requires_seq:
                    return None
            session = self._sessions.setdefault(session_id, _Session())
            current = session.state.get(key)
            current_version = current.version if current else 0
            if expected_version is not None and expected_version != current_version:
                return None
            record = StateRecord(value, current_version + 1)
            session.state[key] = record
            session.updated_at = time.time()
            return record

    def delete_state(self, session_id: str, key: str) -> None:
        with self._lock:
            session = self._sessions.get(session_id)
            if session and session.state.pop(key, None) is not None:
                session.updated_at = time.time()

    def clear(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)

    def user_session_stats(self, user_id: str) -> list[SessionStats]:
        """`stats` of every session of `user_id`, sorted by id."""
        return [self.stats(session_id) for session_id in self.sessions(user_id=user_id)]

    def sessions(self, *, user_id: str | None = None) -> list[str]:
        with self._lock:
            return sorted(sid for sid, s in self._sessions.items() if user_id is None or s.user_id == user_id)

    def forget_user(self, user_id: str) -> list[str]:
        with self._lock:
            doomed = sorted(sid for sid, s in self._sessions.items() if s.user_id == user_id)
            for session_id in doomed:
                del self._sessions[session_id]
            return doomed

    def expire_idle(self, older_than_seconds: float) -> list[str]:
        cutoff = idle_cutoff(older_than_seconds, time.time())
        with self._lock:
            doomed = sorted(sid for sid, s in self._sessions.items() if s.updated_at < cutoff)
            for session_id in doomed:
                del self._sessions[session_id]
            return doomed

    def __enter__(self) -> InMemoryStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release; kept for the `Store` protocol."""

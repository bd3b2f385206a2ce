"""The state records derived from a session's log, as stores keep them: the rolling
summary and the fact book, each with the seq it covers through (its watermark)."""

from __future__ import annotations

import dataclasses
import json

from .._errors import StoreError
from .._stores.base import StateRecord, Store
from .facts import FactBook

__all__ = [
    "FACTS_KEY",
    "INDEX_KEY",
    "SUMMARY_KEY",
    "FactsRecord",
    "Summary",
    "forget_fact_of",
    "malformed_facts",
    "parse_facts",
]

SUMMARY_KEY = "summary"
FACTS_KEY = "facts"
INDEX_KEY = "index"


@dataclasses.dataclass(frozen=True)
class Summary:
    """The rolling summary of a session and the last seq it covers."""

    text: str = ""
    covers_through_seq: int = 0
    updated_at: float | None = None

    def to_json(self) -> str:
        """The summary as the JSON text a store keeps in its state record."""
        return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

    @classmethod
    def from_record(cls, record: StateRecord | None, session_id: str) -> Summary:
        """The summary a stored state record holds (an empty one for ``None``);
        `StoreError` naming `session_id` when the record is malformed."""
        if record is None:
            return cls()
        try:
            data = json.loads(record.value)
            return cls(str(data["text"]), int(data["covers_through_seq"]), data.get("updated_at"))
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"stored summary of session {session_id!r} is malformed: {exc}") from None


@dataclasses.dataclass(frozen=True)
class FactsRecord:
    """A session's fact book and the seq its extraction covers through."""

    book: FactBook
    covers_through_seq: int

    def to_json(self) -> str:
        return json.dumps({"covers_through_seq": self.covers_through_seq, "book": self.book.to_json()})

    @classmethod
    def from_record(cls, record: StateRecord | None, session_id: str) -> FactsRecord:
        if record is None:
            return cls(FactBook(), 0)
        book_json, covers_through_seq = cls.fields(record, session_id)
        return cls(cls.parse_book(book_json, session_id), covers_through_seq)

    @staticmethod
    def fields(record: StateRecord, session_id: str) -> tuple[str, int]:
        """The JSON of the book a stored facts record holds, and the seq it covers through."""
        try:
            data = json.loads(record.value)
            covers_through_seq = int(data["covers_through_seq"])
            book = data["book"]
        except (ValueError, KeyError, TypeError) as exc:
            raise malformed_facts(session_id, exc) from None
        if not isinstance(book, str):
            raise malformed_facts(
                session_id, TypeError(f"the book is a {type(book).__name__}, not JSON text")
            )
        return book, covers_through_seq

    @staticmethod
    def parse_book(book_json: str, session_id: str) -> FactBook:
        try:
            return FactBook.from_json(book_json)
        except (ValueError, KeyError, TypeError) as exc:
            raise malformed_facts(session_id, exc) from None


def malformed_facts(session_id: str, exc: Exception) -> StoreError:
    return StoreError(f"stored facts of session {session_id!r} are malformed: {exc}")


def parse_facts(record: StateRecord | None, session_id: str) -> FactBook:
    """The fact book a session's stored facts record holds (empty for no record)."""
    return FactsRecord.from_record(record, session_id).book


def forget_fact_of(store: Store, session_id: str, key: str, speaker: str | None = None) -> bool:
    """Remove the fact `key` of `speaker` (None: the user of a one-person chat) and its
    history from the stored facts of `session_id`, with compare-and-set; False if that
    session had no such fact."""
    for _ in range(5):
        record = store.get_state(session_id, FACTS_KEY)
        state = FactsRecord.from_record(record, session_id)
        book = FactBook.from_json(state.book.to_json())
        if not book.forget(key, speaker):
            return False
        written = store.put_state(
            session_id,
            FACTS_KEY,
            FactsRecord(book, state.covers_through_seq).to_json(),
            expected_version=record.version if record else 0,
            requires_seq=state.covers_through_seq,
        )
        if written is not None:
            return True
    raise StoreError(f"could not update the facts of session {session_id!r}: too many concurrent writers")

"""The facts of one session, kept in step with its log (a part of `DerivedState`).

Plan, compute, commit, as for every kind of derived state (see `convmem._derived.state`):
the stored record holds the fact book and the seq extraction covers through, and each
write is a compare-and-set on the version that was read. What this process appended is
not read back: the record as this process last read or wrote it is continued, and a
lost compare-and-set sends the next try to the store.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from .._errors import StoreError
from .._models import Message
from .._stores.base import StateRecord, Store
from .facts import Fact, FactBook, FactExtractor
from .records import FACTS_KEY, FactsRecord, forget_fact_of

__all__ = ["FactEdit", "KnownFacts", "SessionFacts"]

logger = logging.getLogger("convmem")

_T = TypeVar("_T")


def edit_tries(bump: bool) -> int:
    """Compare-and-set attempts at a summary or facts record around an edit. After the
    log changed (`bump`), giving up would report a failed edit that went through, and its
    retry would find the seqs gone: so many more, as each only reads and writes a record."""
    return 50 if bump else 5


@dataclasses.dataclass(frozen=True)
class FactEdit:
    """Facts with those of deleted or replaced messages dropped, and replacements to read."""

    book: FactBook
    covers_through_seq: int
    version: int
    replaced: tuple[Message, ...]


@dataclasses.dataclass(frozen=True)
class KnownFacts:
    """The facts record as this process last read or wrote it, and how far it extracted.

    `extracted_through` may pass the record's own watermark: messages that stated no
    fact move it in the process only (see `DerivedState.update_facts`)."""

    version: int
    record: FactsRecord
    extracted_through: int


def _continues(messages: Sequence[Message], through_seq: int) -> bool:
    """Whether `messages` are the log's next messages after `through_seq`, with no gap."""
    return bool(messages) and all(m.seq == through_seq + 1 + i for i, m in enumerate(messages))


class SessionFacts:
    """The facts methods of `DerivedState`, which provides the store, the extractor and
    the model calls."""

    store: Store
    session_id: str
    fact_extractor: FactExtractor | None
    _facts_cache: tuple[str, str, FactBook] | None
    _known_facts: KnownFacts | None

    def _take_fresh(self, key: str) -> list[Message]:
        raise NotImplementedError

    def _offline(self, kind: str) -> bool:
        raise NotImplementedError

    def _model(self, kind: str, run: Callable[[], _T]) -> _T:
        raise NotImplementedError

    async def _amodel(self, kind: str, run: Callable[[], Awaitable[_T]]) -> _T:
        raise NotImplementedError

    def facts_book(self) -> FactBook:
        """The stored facts; parsed once per stored version (treat the result as read-only)."""
        return self.facts_book_of(self.store.get_state(self.session_id, FACTS_KEY))

    def facts_book_of(self, record: StateRecord | None) -> FactBook:
        """The fact book in this session's facts `record`, just read (see `facts_book`)."""
        if record is None:
            return FactBook()
        cached = self._facts_cache
        if cached is not None and cached[0] == record.value:
            return cached[2]
        # Every write moves the record's covers_through_seq, but the facts themselves
        # seldom change: parse the book again only when its own JSON did.
        book_json, _ = FactsRecord.fields(record, self.session_id)
        if cached is not None and cached[1] == book_json:
            book = cached[2]
        else:
            book = FactsRecord.parse_book(book_json, self.session_id)
        self._facts_cache = (record.value, book_json, book)
        return book

    def _plan_facts(self, fresh: Sequence[Message]) -> tuple[FactsRecord, int, list[Message]] | None:
        known = self._known_facts
        if known is not None and _continues(fresh, known.extracted_through):
            return known.record, known.version, list(fresh)
        record = self.store.get_state(self.session_id, FACTS_KEY)
        state = FactsRecord.from_record(record, self.session_id)
        new = self.store.messages(self.session_id, after_seq=state.covers_through_seq)
        if not new:
            self._known_facts = KnownFacts(record.version if record else 0, state, state.covers_through_seq)
            return None
        return state, record.version if record else 0, new

    def _commit_facts(self, state: FactsRecord, version: int, new: list[Message], facts: list[Fact]) -> bool:
        through = new[-1].seq or state.covers_through_seq
        if not facts and self._offline(FACTS_KEY):
            # Nothing to add: the watermark moves in this process alone and is written
            # with the next fact, or by flush and close. Were the process to stop first,
            # the next one extracts the same messages again and finds nothing again:
            # the rule extractor reads each message on its own.
            self._known_facts = KnownFacts(version, state, through)
            return True
        book = FactBook.from_json(state.book.to_json())
        book.apply(facts)
        updated = FactsRecord(book, through)
        written = self.store.put_state(
            self.session_id,
            FACTS_KEY,
            updated.to_json(),
            expected_version=version,
            requires_seq=updated.covers_through_seq,
        )
        self._known_facts = None if written is None else KnownFacts(written.version, updated, through)
        return written is not None

    def save_facts_watermark(self) -> None:
        """Write how far facts were extracted, when messages that stated none moved it
        in this process only (see `update_facts`); a failure is logged, and only costs
        the next process extracting those messages again."""
        known = self._known_facts
        if known is None or known.extracted_through <= known.record.covers_through_seq:
            return
        updated = FactsRecord(known.record.book, known.extracted_through)
        try:
            written = self.store.put_state(
                self.session_id,
                FACTS_KEY,
                updated.to_json(),
                expected_version=known.version,
                requires_seq=known.extracted_through,
            )
        except Exception as exc:
            logger.warning(
                "saving how far the facts of session %r were read failed: %r", self.session_id, exc
            )
            written = None
        self._known_facts = (
            None if written is None else KnownFacts(written.version, updated, known.extracted_through)
        )

    def update_facts(self) -> bool:
        """Extract facts from messages not seen yet; a lost race is retried with fresh state.

        The messages this process just appended are not read back: the facts record as
        this process last wrote it is continued, and its compare-and-set catches another
        writer. With the rule extractor, messages that state no fact write nothing."""
        if self.fact_extractor is None:
            return False
        fresh = self._take_fresh(FACTS_KEY)
        try:
            for _ in range(3):
                plan = self._plan_facts(fresh)
                fresh = []
                if plan is None:
                    return False
                state, version, new = plan
                facts = self._model(FACTS_KEY, functools.partial(self.fact_extractor.extract, new))
                if self._commit_facts(state, version, new, facts):
                    return True
            return False
        except BaseException:
            self._known_facts = None
            raise

    async def aupdate_facts(self) -> bool:
        if self.fact_extractor is None:
            return False
        fresh = self._take_fresh(FACTS_KEY)
        try:
            for _ in range(3):
                plan = await asyncio.to_thread(self._plan_facts, fresh)
                fresh = []
                if plan is None:
                    return False
                state, version, new = plan
                facts = await self._amodel(FACTS_KEY, functools.partial(self.fact_extractor.aextract, new))
                if await asyncio.to_thread(self._commit_facts, state, version, new, facts):
                    return True
            return False
        except BaseException:
            self._known_facts = None
            raise

    def forget_fact(self, key: str) -> bool:
        """Remove the fact `key` (and its history); False if there was no such fact."""
        return forget_fact_of(self.store, self.session_id, key)

    def _edit_facts(self, seqs: Sequence[int], replaced: Sequence[Message], *, bump: bool = False) -> None:
        """Drop the facts `seqs` stated, and read those of `replaced` the watermark passed;
        with `bump` the record is written even when unchanged (made when there is none), so
        that an extraction that read the log before the edit loses its compare-and-set."""
        if self.fact_extractor is None:
            return
        extractor = self.fact_extractor
        for attempt in range(edit_tries(bump)):
            plan = self._plan_fact_edit(seqs, replaced, bump=bump, first=attempt == 0)
            if plan is None:
                return
            try:
                facts = (
                    self._model(FACTS_KEY, functools.partial(extractor.extract, plan.replaced))
                    if plan.replaced
                    else []
                )
            except Exception as exc:  # a model that hangs or fails: the old facts still go
                plan, facts = self._reread_later(plan, exc), []
            if self._commit_fact_edit(plan, facts):
                return
        raise self._too_many_writers("facts")

    async def _aedit_facts(
        self, seqs: Sequence[int], replaced: Sequence[Message], *, bump: bool = False
    ) -> None:
        """Async `_edit_facts`: the extractor is awaited."""
        if self.fact_extractor is None:
            return
        for attempt in range(edit_tries(bump)):
            plan_edit = functools.partial(self._plan_fact_edit, seqs, replaced, bump=bump, first=attempt == 0)
            plan = await asyncio.to_thread(plan_edit)
            if plan is None:
                return
            extract = functools.partial(self.fact_extractor.aextract, plan.replaced)
            try:
                facts = await self._amodel(FACTS_KEY, extract) if plan.replaced else []
            except Exception as exc:  # a model that hangs or fails: the old facts still go
                plan, facts = self._reread_later(plan, exc), []
            if await asyncio.to_thread(self._commit_fact_edit, plan, facts):
                return
        raise self._too_many_writers("facts")

    def _too_many_writers(self, what: str) -> StoreError:
        return StoreError(
            f"could not update the {what} of session {self.session_id!r} after an edit: too many "
            "concurrent writers; retry the edit"
        )

    def _reread_later(self, plan: FactEdit, exc: Exception) -> FactEdit:
        """The edit's commit when the replacements' facts could not be read now (the model
        hung or failed): the facts of the edited messages still go, and the watermark moves
        back before the first replacement, so the next fact update reads it (and what
        follows) again."""
        logger.warning(
            "reading the facts of the messages edited in session %r failed (%r); the facts they "
            "stated are dropped, and the log is read again from the edit on",
            self.session_id,
            exc,
        )
        first = min(m.seq or 0 for m in plan.replaced)
        covers = min(plan.covers_through_seq, max(0, first - 1))
        return dataclasses.replace(plan, covers_through_seq=covers, replaced=())

    def _plan_fact_edit(
        self, seqs: Sequence[int], replaced: Sequence[Message], *, bump: bool = False, first: bool = True
    ) -> FactEdit | None:
        record = self.store.get_state(self.session_id, FACTS_KEY)
        if record is None:
            # Bumped as an empty record once: a second miss is a session deleted meanwhile.
            return FactEdit(FactBook(), 0, 0, ()) if bump and first else None
        state = FactsRecord.from_record(record, self.session_id)
        book = FactBook.from_json(state.book.to_json())
        dropped = book.drop_seqs(seqs)
        # A replacement the watermark passed is never read again by update_facts: read it here.
        again = tuple(m for m in replaced if (m.seq or 0) <= state.covers_through_seq)
        if not dropped and not again and not bump:
            return None
        return FactEdit(book, state.covers_through_seq, record.version, again)

    def _commit_fact_edit(self, plan: FactEdit, facts: list[Fact]) -> bool:
        plan.book.apply(facts)
        written = self.store.put_state(
            self.session_id,
            FACTS_KEY,
            FactsRecord(plan.book, plan.covers_through_seq).to_json(),
            expected_version=plan.version,
            requires_seq=0,
        )
        return written is not None

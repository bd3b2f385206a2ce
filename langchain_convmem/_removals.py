"""Deleting from the log what a ``RemoveMessage`` took out of a graph's state.

LangGraph's ``add_messages`` reducer drops a message from the ``messages`` state
when a node, a tool or ``update_state`` sends ``RemoveMessage(id=...)``. The
context is built from the log, so a message removed on purpose must leave the
log too, or the next context would bring it back. Which removals are on
purpose is decided in `_state_sync`; this module deletes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from contextlib import suppress

from convmem import ConversationMemory, InvalidMessageError

from ._convert import stored_message_id

__all__ = ["delete_by_ids", "delete_seqs"]

_SEQ_ID = re.compile(r"convmem-seq-([1-9][0-9]{0,18})")


def delete_by_ids(
    memory: ConversationMemory, ids: Iterable[str], *, known: Mapping[str, int | None], search_newest: int
) -> list[int]:
    """Delete the logged messages that had these state ids; return their seqs.

    An id of `known` names the seq it maps to; ``convmem-seq-N`` names seq N; any
    other id is looked up among the newest `search_newest` logged messages by the
    LangChain id it was stored with. An id that names nothing logged is skipped.
    """
    seqs: set[int] = set()
    unknown: set[str] = set()
    for message_id in ids:
        match = _SEQ_ID.fullmatch(message_id)
        seq = known.get(message_id)
        if seq is not None:
            seqs.add(seq)
        elif match:
            seqs.add(int(match.group(1)))
        elif message_id not in known:
            unknown.add(message_id)
    if unknown and search_newest > 0:
        seqs.update(
            m.seq for m in memory.tail(search_newest) if m.seq is not None and stored_message_id(m) in unknown
        )
    return delete_seqs(memory, sorted(seqs))


def delete_seqs(memory: ConversationMemory, seqs: list[int]) -> list[int]:
    """Delete `seqs`; one that is gone already (another writer deleted it) is skipped."""
    if not seqs:
        return []
    try:
        memory.delete_messages(seqs)
        return seqs
    except InvalidMessageError:
        deleted = []
        for seq in seqs:
            with suppress(InvalidMessageError):
                memory.delete_messages([seq])
                deleted.append(seq)
        return deleted

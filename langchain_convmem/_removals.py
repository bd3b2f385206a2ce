"""Messages removed from a graph's state (``RemoveMessage``) are deleted from the log too.

LangGraph's ``add_messages`` reducer drops a message from the ``messages`` state
when a node or ``update_state`` sends ``RemoveMessage(id=...)``, and everything
with ``RemoveMessage(id=REMOVE_ALL_MESSAGES)``. The middleware and the graph node
only ever see the resulting state, so they find what went by comparing it with
what they know was there, and delete it from the memory: otherwise the next
context, built from the log, would bring the removed message back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from contextlib import suppress

from langchain_core.messages import BaseMessage

from convmem import ConversationMemory, InvalidMessageError

from ._convert import CONTEXT_MESSAGE_ID, stored_message_id

__all__ = ["delete_by_ids", "forget_removed_from_graph"]

_SEQ_ID = re.compile(r"convmem-seq-([1-9][0-9]{0,18})")


def delete_by_ids(memory: ConversationMemory, ids: Iterable[str], *, search_newest: int) -> list[int]:
    """Delete the logged messages that had these state ids; return their seqs.

    ``convmem-seq-N`` names seq N; any other id is looked up among the newest
    `search_newest` logged messages by the LangChain id they were stored with.
    The context message (`CONTEXT_MESSAGE_ID`) is derived, not logged: nothing to delete.
    """
    wanted = [i for i in ids if i != CONTEXT_MESSAGE_ID]
    seqs: set[int] = set()
    by_langchain_id: set[str] = set()
    for message_id in wanted:
        match = _SEQ_ID.fullmatch(message_id)
        if match:
            seqs.add(int(match.group(1)))
        else:
            by_langchain_id.add(message_id)
    if by_langchain_id and search_newest > 0:
        seqs.update(
            m.seq
            for m in memory.tail(search_newest)
            if m.seq is not None and stored_message_id(m) in by_langchain_id
        )
    return _delete(memory, sorted(seqs))


def _delete(memory: ConversationMemory, seqs: list[int]) -> list[int]:
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


def forget_removed_from_graph(
    memory: ConversationMemory, messages: Sequence[BaseMessage], new: Sequence[BaseMessage]
) -> list[BaseMessage]:
    """For a graph whose state holds the whole conversation: delete what left the state.

    `messages` is the state, `new` its tail not stored yet by position. When the
    state holds fewer earlier messages than the log (O(1) to tell), the log is read
    once: every logged message stored with a LangChain id that the state no longer
    holds was removed (``RemoveMessage``, ``REMOVE_ALL_MESSAGES``) and is deleted;
    messages written without a LangChain id (not through LangChain) are left alone.
    Returns the messages of `new` the log does not hold yet.
    """
    earlier = len(messages) - len(new)
    if earlier >= memory.stats().message_count:
        return list(new)
    log = memory.messages()
    in_state = {m.id for m in messages if m.id is not None}
    logged: dict[int, str] = {}
    for message in log:
        message_id = stored_message_id(message)
        if message.seq is not None and message_id is not None:
            logged[message.seq] = message_id
    _delete(memory, sorted(seq for seq, message_id in logged.items() if message_id not in in_state))
    known = set(logged.values())
    return [m for m in new if m.id is None or m.id not in known]

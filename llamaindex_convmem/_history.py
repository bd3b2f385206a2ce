"""Writing converted LlamaIndex messages into a convmem log: appending, and replacing it whole.

Both finish what converting one message at a time cannot: the result of a
legacy function call takes the id of the call right before it, which may be
the log's newest message (see `answer_function_calls`). Replacing checks the
whole new history before anything is deleted.
"""

from __future__ import annotations

from collections.abc import Sequence

from convmem import ConversationMemory, InMemoryStore, Message

from ._messages import answer_function_calls, answers_function_call

__all__ = ["aappend_history", "append_history", "areplace_history", "replace_history"]


def append_history(memory: ConversationMemory, messages: Sequence[Message]) -> list[Message]:
    """Append `messages` to the session's log, atomically; they are returned as stored."""
    # Only a legacy function result first in line needs the log's newest message.
    before = memory.tail(1) if messages and answers_function_call(messages[0]) else []
    return memory.add_messages(answer_function_calls(messages, before[-1] if before else None))


async def aappend_history(memory: ConversationMemory, messages: Sequence[Message]) -> list[Message]:
    """Async `append_history`."""
    before = await memory.atail(1) if messages and answers_function_call(messages[0]) else []
    return await memory.aadd_messages(answer_function_calls(messages, before[-1] if before else None))


def replace_history(memory: ConversationMemory, messages: Sequence[Message]) -> None:
    """Replace the session's log (and what was derived from it) with `messages`.

    convmem's log is append-only apart from clearing a session, so the history
    is replaced whole; `messages` is first added to an empty trial session, so
    whatever `add_messages` would refuse (a tool result answering no call, a
    call without an id, an oversized message) is refused with the old history
    still in place.
    """
    history = answer_function_calls(messages)
    _trial_session(memory).add_messages(history)
    memory.clear()
    if history:
        memory.add_messages(history)


async def areplace_history(memory: ConversationMemory, messages: Sequence[Message]) -> None:
    """Async `replace_history`."""
    history = answer_function_calls(messages)
    await _trial_session(memory).aadd_messages(history)
    await memory.aclear()
    if history:
        await memory.aadd_messages(history)


def _trial_session(memory: ConversationMemory) -> ConversationMemory:
    """An empty session in a store of its own, counting and checking as `memory` does and
    deriving nothing: adding to it makes every check of adding to a cleared `memory`."""
    config = memory.config.replace(
        extract_facts=False, summary_trigger="never", recall_earlier_turns=False, background=False
    )
    return ConversationMemory(memory.session_id, InMemoryStore(), config, counter=memory.counter)

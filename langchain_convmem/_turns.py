"""Recording an agent's steps as one turn: RUNNING until the answer, then COMPLETED.

Shared by the agent middleware and the LangGraph node, which see the same
shape of conversation: a user message, model steps with tool calls and their
results, and a final answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.messages import BaseMessage, HumanMessage

from convmem import ConversationMemory, Message, TurnStatus

from ._convert import to_convmem_message

__all__ = ["record_new_messages", "settle_last_turn", "turn_messages"]


def turn_messages(new: Sequence[BaseMessage], *, final: bool) -> list[Message]:
    """Messages of the unfinished turn are RUNNING; earlier ones and a final answer COMPLETED."""
    # Without a human message in the batch, everything continues the current turn.
    turn_start = max((i for i, m in enumerate(new) if isinstance(m, HumanMessage)), default=0)
    converted = []
    for index, message in enumerate(new):
        answer = final and index == len(new) - 1
        running = index >= turn_start and not answer
        converted.append(
            to_convmem_message(message, status=TurnStatus.RUNNING if running else TurnStatus.COMPLETED)
        )
    return converted


def settle_last_turn(memory: ConversationMemory, status: TurnStatus) -> None:
    """Give every RUNNING message of the newest turn its final status."""
    turns = memory.recent_turns(1)
    if not turns:
        return
    for message in turns[-1].messages:
        if message.status is TurnStatus.RUNNING and message.seq is not None:
            memory.set_status(message.seq, status)


def record_new_messages(memory: ConversationMemory, new: Sequence[BaseMessage], *, final: bool) -> None:
    """Store `new`; a new user message cancels the turn left unfinished; `final` completes this one."""
    if new:
        if any(isinstance(m, HumanMessage) for m in new):
            settle_last_turn(memory, TurnStatus.CANCELLED)
        memory.add_messages(turn_messages(new, final=final))
    if final:
        settle_last_turn(memory, TurnStatus.COMPLETED)

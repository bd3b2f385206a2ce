"""Recording an agent's steps as one turn: RUNNING until the answer, then COMPLETED.

Shared by the agent middleware and the LangGraph node, which see the same
shape of conversation: a user message, model steps with tool calls and their
results, and a final answer. Every step is filed under its own question
(``reply_to_seq``), so two requests answered at once on one session never
swap answers, and a turn is settled by seq, never by being the newest.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage

from convmem import ConversationMemory, InvalidMessageError, Message, Role, TurnStatus
from convmem.integration import group_turns

from ._convert import to_convmem_message, to_convmem_role

__all__ = ["FailedTurns", "append_steps", "is_final_answer", "is_question", "session_key", "settle_turn"]


def session_key(memory: ConversationMemory) -> tuple[int, str]:
    """What tells `memory`'s session apart in this process: memories of one session share
    its store object (a SQLite file is opened once per process) and its id."""
    return (id(memory.store), memory.session_id)


def is_question(message: BaseMessage) -> bool:
    """Whether `message` is the user speaking (a human message, or a chat message in a user role)."""
    if isinstance(message, HumanMessage):
        return True
    return isinstance(message, ChatMessage) and to_convmem_role(message.role) is Role.USER


def is_final_answer(message: BaseMessage) -> bool:
    """An AI message that asks for no tool: the model has answered."""
    return isinstance(message, AIMessage) and not message.tool_calls


def _converted(new: Sequence[BaseMessage], *, final: bool, turn: int | None) -> list[Message]:
    # Without a question in the batch, everything continues the turn `turn`.
    question = max((i for i, m in enumerate(new) if is_question(m)), default=-1)
    converted = []
    for index, message in enumerate(new):
        answer = final and index == len(new) - 1
        running = index >= question and not answer
        converted.append(
            to_convmem_message(
                message,
                status=TurnStatus.RUNNING if running else TurnStatus.COMPLETED,
                reply_to_seq=turn if question < 0 and not is_question(message) else None,
            )
        )
    return converted


def append_steps(
    memory: ConversationMemory, new: Sequence[BaseMessage], *, turn: int | None, final: bool
) -> list[Message]:
    """Store `new` as steps of a turn; return them as stored.

    From the last question of `new` on, messages are RUNNING (earlier ones, a
    history the client sent along, COMPLETED); with ``final`` the last message
    is the answer and COMPLETED. A batch without a question continues the turn
    whose question is stored under seq `turn`, and is filed under it.
    """
    if not new:
        return []
    converted = _converted(new, final=final, turn=turn)
    try:
        return memory.add_messages(converted)
    except InvalidMessageError:
        if turn is None or all(m.reply_to_seq is None for m in converted):
            raise
    # Another writer deleted the question meanwhile: the steps are kept, filed under no question.
    return memory.add_messages(_converted(new, final=final, turn=None))


def settle_turn(memory: ConversationMemory, turn: int | None, status: TurnStatus) -> None:
    """Give every RUNNING message of the turn whose question is seq `turn` its final `status`.

    A turn that completes takes back what was CANCELLED of it too: a second request on
    the same thread, started while this one ran, took it for abandoned, and CANCELLED
    messages are never recalled. The turn is read from the messages stored since its
    question (other writers' turns among them are left alone), so this costs the
    length of the turn plus whatever was written beside it, not the log.
    """
    old = (
        (TurnStatus.RUNNING, TurnStatus.CANCELLED)
        if status is TurnStatus.COMPLETED
        else (TurnStatus.RUNNING,)
    )
    _change_status(memory, turn, old, status)


class FailedTurns:
    """The turns a model call marked FAILED, remembered so that a later call of the turn
    that answers (a retry by ``ModelRetryMiddleware`` placed before the memory's
    middleware, a resumed run) makes them RUNNING again: the turn goes on and settles as
    any other. A turn whose retries run out keeps FAILED, even when the retrying
    middleware answers in the model's place.

    Kept in this process and bounded: beyond `limit` turns the oldest are forgotten, and
    a retry of one of those leaves its turn FAILED.
    """

    def __init__(self, limit: int = 1024) -> None:
        self._limit = limit
        self._turns: OrderedDict[tuple[int, str, int], None] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(memory: ConversationMemory, turn: int) -> tuple[int, str, int]:
        return (*session_key(memory), turn)

    def fail(self, memory: ConversationMemory, turn: int | None) -> None:
        """A model call of the turn whose question is seq `turn` raised: the turn is FAILED."""
        settle_turn(memory, turn, TurnStatus.FAILED)
        if turn is None:
            return
        key = self._key(memory, turn)
        with self._lock:
            self._turns[key] = None
            self._turns.move_to_end(key)
            while len(self._turns) > self._limit:
                self._turns.popitem(last=False)

    def failed(self, memory: ConversationMemory, turn: int | None) -> bool:
        """Whether a model call of the turn failed and no call of it has answered since."""
        with self._lock:
            return turn is not None and self._key(memory, turn) in self._turns

    def answered(self, memory: ConversationMemory, turn: int | None) -> None:
        """A model call of the turn answered: what an earlier call of it marked FAILED runs again."""
        if turn is None:
            return
        key = self._key(memory, turn)
        with self._lock:  # taken once: of two calls answering at once, one changes the status
            if key not in self._turns:
                return
            del self._turns[key]
        _change_status(memory, turn, (TurnStatus.FAILED,), TurnStatus.RUNNING)


def _change_status(
    memory: ConversationMemory, turn: int | None, old: Sequence[TurnStatus], new: TurnStatus
) -> None:
    if turn is None:
        return
    last_seq = memory.stats().last_seq
    if last_seq < turn:
        return
    since_question = memory.tail(last_seq - turn + 1)
    for stored_turn in group_turns(since_question):
        question = stored_turn.messages[0]
        if question.seq == turn and question.role is Role.USER:
            for message in stored_turn.messages:
                if message.status in old and message.seq is not None:
                    memory.set_status(message.seq, new)
            return

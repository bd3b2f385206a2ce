"""Keeping a graph's ``messages`` state and the log in step.

The agent middleware and the LangGraph node read a state that many hands edit:
the client's input, the model's replies and tool results, other middleware
(``SummarizationMiddleware`` swaps old messages for a summary) and the
application (``update_state``). The log is the durable record, which other
writers share (a second server with its own checkpointer, a chat history, the
core API), so it follows the state only by rules a person can predict:

- **A message reaches the log once.** What the state held is remembered by id
  (`Held`: its seq and a fingerprint of what it says). A message the state did
  not hold is looked up in the newest part of the log, by id, and, for a
  client that resends its history without ids, by content in the order it was
  said; it is appended only when it is not there.
- **A message leaves the log when it alone leaves the state**
  (``RemoveMessage(id=...)``) while the rest of what the state held stays. A
  state left with nothing it held (``REMOVE_ALL_MESSAGES``, a new checkpointer,
  another server's state) or rewritten (a summary put in front of the messages
  it kept) says nothing about the log: it keeps everything.
- **A held message whose content changed** (``update_state`` with its id) is
  replaced in the log, keeping its seq.

The middleware applies the last two only between runs (`sync_input`); inside a
run, what other middleware do to the state changes only the state (`sync_steps`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from convmem import ConversationMemory, InvalidMessageError, Message, TurnStatus

from ._convert import CONTEXT_MESSAGE_ID, MEMORY_MESSAGE_ID, stored_message_id, to_convmem_message
from ._removals import delete_seqs
from ._turns import append_steps, is_final_answer, is_question, settle_turn

__all__ = [
    "Held",
    "HeldEntry",
    "Synced",
    "find_logged",
    "fingerprint",
    "held_entry",
    "is_derived",
    "load_held",
    "question_text",
    "sync_input",
    "sync_steps",
]

_SEQ_ID = re.compile(r"convmem-seq-([1-9][0-9]{0,18})")
# Ids an earlier release of the middleware gave the context messages it put in state: never logged.
_DERIVED_IDS = frozenset({CONTEXT_MESSAGE_ID, MEMORY_MESSAGE_ID, f"{CONTEXT_MESSAGE_ID}-memory"})
# A resent history is matched against this many more of the newest logged messages than it
# holds, so other writers' messages between its own do not push it out of reach.
_MATCH_SLACK = 32


HeldEntry = list[Any]
"""What a state held under one message id, as kept in the state: ``[seq, fingerprint,
reply_to_seq]`` (read it through `Held`). A list, not an object, because the whole map
is read and written at every step of a run."""


class Held(NamedTuple):
    """A `HeldEntry` read: the message's seq in the log (None for a message that is not
    logged, such as another middleware's summary), a fingerprint of its content, and the
    question it answers."""

    seq: int | None
    fingerprint: str
    reply_to_seq: int | None = None

    @classmethod
    def of(cls, entry: HeldEntry) -> Held:
        return cls._make(entry)


def held_entry(seq: int | None, fingerprint: str, reply_to_seq: int | None = None) -> HeldEntry:
    return [seq, fingerprint, reply_to_seq]


def load_held(raw: object) -> dict[str, HeldEntry]:
    """The held entries as a graph's state keeps them (what this module wrote there; anything
    else reads as nothing held)."""
    if not isinstance(raw, Mapping) or not all(
        isinstance(entry, list) and len(entry) == 3 for entry in raw.values()
    ):
        return {}
    return dict(raw)


@dataclasses.dataclass(frozen=True)
class Synced:
    """The state's messages as the log now holds them, and the question of the unfinished turn."""

    held: dict[str, HeldEntry]
    turn: int | None


def fingerprint(message: BaseMessage) -> str:
    """A short digest of what `message` says (type, content, name, tool calls and call id)."""
    content = message.content
    parts = [message.type, content if isinstance(content, str) else _json(content), message.name or ""]
    if isinstance(message, AIMessage) and message.tool_calls:
        parts.append(_json([[c.get("id"), c["name"], c["args"]] for c in message.tool_calls]))
    elif isinstance(message, ToolMessage):
        parts.append(message.tool_call_id)
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).hexdigest()


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _is_summary(message: BaseMessage) -> bool:
    # LangChain's SummarizationMiddleware marks the message that stands in for what it summarized.
    return message.additional_kwargs.get("lc_source") == "summarization"


def is_derived(message: BaseMessage) -> bool:
    """Whether `message` is a context message an earlier release put in agent state (never logged)."""
    return message.id in _DERIVED_IDS


def _loggable(message: BaseMessage) -> bool:
    return not is_derived(message) and not _is_summary(message)


def question_text(messages: Sequence[BaseMessage]) -> str | None:
    """The text of the newest question in `messages` (not a summary standing in for some)."""
    for message in reversed(messages):
        if is_question(message) and not _is_summary(message):
            return str(message.text) or None
    return None


def _same(logged: Message, message: Message) -> bool:
    return (
        logged.role is message.role
        and logged.content == message.content
        and logged.name == message.name
        and logged.tool_call_id == message.tool_call_id
        and logged.tool_calls == message.tool_calls
    )


def find_logged(memory: ConversationMemory, candidates: Sequence[BaseMessage]) -> list[int | None]:
    """For each candidate, the seq of the logged message it is, or None.

    A ``convmem-seq-N`` id (an earlier release of the middleware gave those) names seq N. Other
    candidates are looked for among the newest logged messages: by id with the
    same content anywhere there, else (a history resent without its ids) by
    content, in order. The newest question and what follows it are matched by id
    only: a user may well say "yes" twice, and the new "yes" is new.
    """
    found: list[int | None] = [None] * len(candidates)
    unnamed = []
    for index, message in enumerate(candidates):
        match = _SEQ_ID.fullmatch(message.id or "")
        if match:
            found[index] = int(match.group(1))
        else:
            unnamed.append(index)
    if not unnamed or memory.stats().message_count == 0:
        return found
    newest = memory.tail(2 * len(unnamed) + _MATCH_SLACK)
    by_id = {stored_message_id(m): position for position, m in enumerate(newest)}
    question = max((i for i in unnamed if is_question(candidates[i])), default=-1)
    cursor = 0
    for index in unnamed:
        message = candidates[index]
        converted = to_convmem_message(message)
        position = by_id.get(message.id) if message.id is not None else None
        if position is None or not _same(newest[position], converted):
            position = None
            if index < question:
                position = next((p for p in range(cursor, len(newest)) if _same(newest[p], converted)), None)
        if position is not None:
            found[index] = newest[position].seq
            cursor = max(cursor, position + 1)
    return found


def _rewritten(messages: Sequence[BaseMessage], held: Mapping[str, HeldEntry]) -> bool:
    """Whether the state was rewritten (``REMOVE_ALL_MESSAGES`` and a new list) rather than
    trimmed: a message it did not hold stands before one it held, or a summary stands in it."""
    last_held = max((i for i, m in enumerate(messages) if m.id in held), default=-1)
    return any(_is_summary(m) or (m.id not in held and i < last_held) for i, m in enumerate(messages))


def _forget_removed(
    memory: ConversationMemory, messages: Sequence[BaseMessage], held: Mapping[str, HeldEntry]
) -> None:
    present = {m.id for m in messages}
    gone = [
        seq
        for message_id, entry in held.items()
        if message_id not in present and (seq := Held.of(entry).seq) is not None
    ]
    if not gone or len(present & held.keys()) == 0 or _rewritten(messages, held):
        return
    delete_seqs(memory, sorted(gone))


def _replace_edited(
    memory: ConversationMemory, messages: Sequence[BaseMessage], held: dict[str, HeldEntry]
) -> None:
    for message in messages:
        raw = held.get(message.id or "")
        entry = Held.of(raw) if raw is not None else None
        if entry is None or entry.seq is None or not _loggable(message):
            continue
        now = fingerprint(message)
        if now == entry.fingerprint:
            continue
        edited = to_convmem_message(message, reply_to_seq=entry.reply_to_seq)
        try:
            memory.replace_message(entry.seq, edited)
        except InvalidMessageError:
            continue  # gone from the log already (another writer deleted it): nothing to edit
        held[str(message.id)] = held_entry(entry.seq, now, entry.reply_to_seq)


def _held_now(
    messages: Sequence[BaseMessage],
    held: Mapping[str, HeldEntry],
    logged: Mapping[str, Message | int],
    *,
    refresh: bool,
) -> dict[str, HeldEntry]:
    """What the state holds now: earlier entries kept (with ``refresh``, their fingerprints
    taken again, so edits made meanwhile are not taken for edits to come), new messages with
    their seqs."""
    now: dict[str, HeldEntry] = {}
    for message in messages:
        if message.id is None or is_derived(message):
            continue
        entry = held.get(message.id)
        if entry is None:
            stored = logged.get(message.id)
            if isinstance(stored, Message):
                entry = held_entry(stored.seq, fingerprint(message), stored.reply_to_seq)
            else:
                entry = held_entry(stored, fingerprint(message))
        elif refresh:
            seq, _, reply_to_seq = entry
            entry = held_entry(seq, fingerprint(message), reply_to_seq)
        now[message.id] = entry
    return now


def sync_input(
    memory: ConversationMemory,
    messages: Sequence[BaseMessage],
    held: Mapping[str, HeldEntry],
    turn: int | None,
) -> Synced:
    """Bring the log in step with a state that changed since it was last seen (a run's
    input, ``update_state`` between runs, another server's history).

    Removals and edits of held messages reach the log (see the module's rules);
    messages the state did not hold are stored unless the log has them. A new
    question cancels the unfinished turn `turn` of this same state (a run that
    was interrupted or abandoned), never another writer's.
    """
    current = dict(held)
    if current:
        _forget_removed(memory, messages, current)
        _replace_edited(memory, messages, current)
    candidates = [m for m in messages if m.id not in current and _loggable(m)]
    found = find_logged(memory, candidates)
    last_found = max((i for i, seq in enumerate(found) if seq is not None), default=-1)
    # Unknown messages before the last one the log has are stale history the client
    # still holds (deleted since, or another app's summary): never stored again.
    new = [m for i, m in enumerate(candidates) if found[i] is None and i > last_found]
    if turn is not None and any(is_question(m) for m in new):
        settle_turn(memory, turn, TurnStatus.CANCELLED)
        turn = None
    stored = append_steps(memory, new, turn=turn, final=False)
    logged: dict[str, Message | int] = {
        str(m.id): seq for m, seq in zip(candidates, found, strict=True) if seq is not None
    }
    logged.update({str(m.id): s for m, s in zip(new, stored, strict=True)})
    questions = [s.seq for m, s in zip(new, stored, strict=True) if is_question(m)]
    if questions:
        turn = questions[-1]
    return Synced(_held_now(messages, current, logged, refresh=False), turn)


def sync_steps(
    memory: ConversationMemory,
    messages: Sequence[BaseMessage],
    held: Mapping[str, HeldEntry],
    turn: int | None,
    *,
    final: bool,
    run_ended: bool = False,
    model_next: bool = False,
) -> Synced:
    """Store what the model and the tools added during a run; with ``final`` the turn is
    done, and ``run_ended`` says the run is over. With ``model_next`` the model is about
    to be called, so no message stored now is its answer (an AI message a tool's
    ``Command`` added, a handoff note, continues the turn).

    Only AI and tool messages after the last message the state held are steps
    of the turn; anything else another middleware put in the state meanwhile (a
    summary, a trimmed list, a reminder for the model) is taken as it is and
    never stored, and nothing is deleted.
    """
    ids = [m.id for m in messages]
    appended = len(ids) >= len(held) and ids[: len(held)] == list(held)
    if appended:  # the common case, checked in C: nothing but new messages at the end
        last_held = len(held) - 1
    else:
        last_held = max((i for i, message_id in enumerate(ids) if message_id in held), default=-1)
    new = [
        m
        for m in messages[last_held + 1 :]
        if m.id not in held and isinstance(m, (AIMessage, ToolMessage)) and _loggable(m)
    ]
    answer = not model_next and bool(new) and is_final_answer(new[-1])
    stored = append_steps(memory, new, turn=turn, final=answer)
    if final or answer:
        settle_turn(memory, turn, TurnStatus.COMPLETED)
        turn = None
    logged: dict[str, Message | int] = {str(m.id): s for m, s in zip(new, stored, strict=True)}
    if appended and not run_ended:
        return Synced({**held, **_held_now(messages[len(held) :], {}, logged, refresh=False)}, turn)
    # Fingerprints are taken again once, when the run ends: an edit another middleware made
    # during the run is then the state's, not an edit for the log at the next run.
    return Synced(_held_now(messages, held, logged, refresh=run_ended), turn)

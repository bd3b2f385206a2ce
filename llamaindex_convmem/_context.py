"""What `ConvMemChatMemoryBuffer.get` returns, from a convmem `BuiltContext`.

`ChatMemoryBuffer.get` takes an ``input`` it never reads and returns the newest
messages that fit; the buffer takes the same input (text in it steers recall)
and returns the managed context as `ChatMessage`s, or the newest question alone
when not even that fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.schema import QueryBundle

from convmem import BuiltContext, ConversationMemory, Turn
from convmem.integration import chat_api_message

from ._messages import to_chat_message, to_chat_messages

__all__ = ["context_messages", "newest_question_alone", "newest_turn", "query_text"]


def query_text(input: object) -> str | None:
    """The text that steers recall, from what LlamaIndex passes as `input`.

    Chat engines pass a str, a `ChatMessage` or a `QueryBundle`; the
    ``memory.get(initial_tokens)`` idiom passes an int, which `ChatMemoryBuffer`
    ignores (it never reads `input`). Anything that is not text is ignored the
    same way: it only steers recall, so ignoring it costs recall, never a reply.
    """
    if isinstance(input, str):
        return input or None
    if isinstance(input, ChatMessage):
        return input.content or None
    if isinstance(input, QueryBundle):
        return input.query_str or None
    return None


def _only_the_omitted_note(context: BuiltContext) -> bool:
    """Whether the memory message says nothing but that earlier history is left out."""
    return bool(context.memory_text) and not any(
        context.section(name).items for name in ("facts", "summary", "recall")
    )


def context_messages(context: BuiltContext, *, note_omitted_history: bool = True) -> list[ChatMessage]:
    """The context as `ChatMessage`s: the system prompt, the memory message, the window.

    Without ``note_omitted_history``, a memory message that only says earlier
    history is left out is not returned.
    """
    messages = (
        [ChatMessage(role=MessageRole.SYSTEM, content=context.system_text)] if context.system_text else []
    )
    memory = context.memory_message
    if memory is not None and (note_omitted_history or not _only_the_omitted_note(context)):
        # Facts, summary and recalled turns: delimited reference data, never system authority.
        messages.append(ChatMessage(role=MessageRole(memory["role"]), content=memory["content"]))
    messages.extend(to_chat_messages([chat_api_message(m) for m in context.window]))
    return messages


def newest_turn(memory: ConversationMemory) -> list[Turn]:
    return memory.recent_turns(1) if memory.stats().message_count else []


def newest_question_alone(
    context: BuiltContext | None, newest: Sequence[Any], *, note_omitted_history: bool = True
) -> list[ChatMessage]:
    """What `get` returns when not even the newest turn's question fits the budget.

    Like `ChatMemoryBuffer`, the newest message comes back alone, so the model
    raises a clear "too long" error instead of answering without the question;
    it is the newest *question*, so the list still starts on a user message.
    """
    if not newest:  # an empty session
        if context is None:
            return []
        return context_messages(context, note_omitted_history=note_omitted_history)
    turn = newest[-1]
    message = turn.question or turn.messages[-1]
    return [to_chat_message(message)]

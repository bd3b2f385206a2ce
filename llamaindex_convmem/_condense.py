"""`CondensePlusContextChatEngine` that rewrites questions from convmem's orchestration view."""

from __future__ import annotations

import logging

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import CondensePlusContextChatEngine

from convmem import BudgetError, BuiltContext

from ._buffer import ConvMemChatMemoryBuffer

__all__ = ["ConvMemCondensePlusContextChatEngine"]

logger = logging.getLogger("llamaindex_convmem")


class ConvMemCondensePlusContextChatEngine(CondensePlusContextChatEngine):
    """`CondensePlusContextChatEngine` whose question rewriting reads convmem's
    orchestration view instead of the raw message dump.

    The stock engine renders every history message, tool-call payloads and
    failed answers included, into the condense prompt. With a
    `ConvMemChatMemoryBuffer` this engine gives it the system prompt and the
    memory block (facts, summary, recalled turns, as ``memory.get`` places
    them) plus the recent questions
    and the answers that COMPLETED, each clipped
    (``MemoryConfig.transcript_message_chars``). With any other memory it
    behaves exactly like the stock engine. Created the same way::

        engine = ConvMemCondensePlusContextChatEngine.from_defaults(retriever, llm=llm, memory=buffer)
    """

    @staticmethod
    def _condense_history(context: BuiltContext | None, transcript: str) -> str:
        # No context when token_limit cannot hold the system prompt: as memory.get() goes
        # on with the newest question, the question is still rewritten, from the transcript.
        if context is None:
            return transcript
        # With placement "system" the memory block is already part of system_text.
        memory = "" if context.memory_placement == "system" else context.memory_text
        return "\n\n".join(text for text in (context.system_text, memory, transcript) if text)

    def _condense_question(self, chat_history: list[ChatMessage], latest_message: str) -> str:
        if not isinstance(self._memory, ConvMemChatMemoryBuffer):
            return super()._condense_question(chat_history, latest_message)
        try:
            context: BuiltContext | None = self._memory.context(latest_message)
        except BudgetError as exc:
            logger.debug("the memory context does not fit; condensing from the transcript: %s", exc)
            context = None
        history = self._condense_history(context, self._memory.transcript("orchestration"))
        if self._skip_condense or not history:
            return latest_message
        prompt = self._condense_prompt_template.format(chat_history=history, question=latest_message)
        return str(self._llm.complete(prompt))

    async def _acondense_question(self, chat_history: list[ChatMessage], latest_message: str) -> str:
        if not isinstance(self._memory, ConvMemChatMemoryBuffer):
            return await super()._acondense_question(chat_history, latest_message)
        try:
            context: BuiltContext | None = await self._memory.acontext(latest_message)
        except BudgetError as exc:
            logger.debug("the memory context does not fit; condensing from the transcript: %s", exc)
            context = None
        history = self._condense_history(context, await self._memory.atranscript("orchestration"))
        if self._skip_condense or not history:
            return latest_message
        prompt = self._condense_prompt_template.format(chat_history=history, question=latest_message)
        return str(await self._llm.acomplete(prompt))

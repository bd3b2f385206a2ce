"""`CondensePlusContextChatEngine` that rewrites questions from convmem's orchestration view."""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import CondensePlusContextChatEngine

from convmem import BuiltContext

from ._buffer import ConvMemChatMemoryBuffer

__all__ = ["ConvMemCondensePlusContextChatEngine"]


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
    def _condense_history(context: BuiltContext, transcript: str) -> str:
        # With placement "system" the memory block is already part of system_text.
        memory = "" if context.memory_placement == "system" else context.memory_text
        return "\n\n".join(text for text in (context.system_text, memory, transcript) if text)

    def _condense_question(self, chat_history: list[ChatMessage], latest_message: str) -> str:
        if not isinstance(self._memory, ConvMemChatMemoryBuffer):
            return super()._condense_question(chat_history, latest_message)
        history = self._condense_history(
            self._memory.context(latest_message), self._memory.transcript("orchestration")
        )
        if self._skip_condense or not history:
            return latest_message
        prompt = self._condense_prompt_template.format(chat_history=history, question=latest_message)
        return str(self._llm.complete(prompt))

    async def _acondense_question(self, chat_history: list[ChatMessage], latest_message: str) -> str:
        if not isinstance(self._memory, ConvMemChatMemoryBuffer):
            return await super()._acondense_question(chat_history, latest_message)
        history = self._condense_history(
            await self._memory.acontext(latest_message), await self._memory.atranscript("orchestration")
        )
        if self._skip_condense or not history:
            return latest_message
        prompt = self._condense_prompt_template.format(chat_history=history, question=latest_message)
        return str(await self._llm.acomplete(prompt))

"""LangChain integration for convmem: a chat history, a retrieval-aware runnable,
agent middleware, and model adapters.

- `ConvMemChatMessageHistory`: a ``BaseChatMessageHistory`` whose ``messages``
  is the managed context (facts, summary, recall and the recent window within a
  token budget); works with ``RunnableWithMessageHistory``.
- `with_convmem` / `ConvMemRunnable`: builds the context for the incoming
  message (so recall can use it) and records each turn with its status.
- `ConvMemMiddleware`: the same for ``langchain.agents.create_agent``
  (needs the ``langchain`` package).
- `complete_fn_from_langchain`, `ChatModelTokenCounter`, `LangChainEmbedder`:
  LangChain models as the summarizer/fact-extractor model, token counter and
  embedder of a memory.
"""

from ._adapters import ChatModelTokenCounter, LangChainComplete, LangChainEmbedder, complete_fn_from_langchain
from ._convert import from_convmem_message, to_convmem_message, to_convmem_messages
from ._history import ConvMemChatMessageHistory, ConvMemSessions
from ._middleware import ConvMemMiddleware
from ._runnable import ConvMemRunnable, with_convmem

__all__ = [
    "ChatModelTokenCounter",
    "ConvMemChatMessageHistory",
    "ConvMemMiddleware",
    "ConvMemRunnable",
    "ConvMemSessions",
    "LangChainComplete",
    "LangChainEmbedder",
    "complete_fn_from_langchain",
    "from_convmem_message",
    "to_convmem_message",
    "to_convmem_messages",
    "with_convmem",
]

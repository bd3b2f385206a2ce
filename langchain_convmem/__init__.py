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
- `LangChainVectorIndex` (with `PrecomputedEmbeddings`): a session's recall
  vectors in a LangChain vector store that several servers share.

Needs langchain-core: ``pip install "convmem[langchain]"``.
"""

try:
    import langchain_core  # noqa: F401  # every module here needs it: say how to get it, once
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f'langchain_convmem needs {exc.name}, which is not installed: pip install "convmem[langchain]"',
        name=exc.name,
    ) from exc

from ._adapters import ChatModelTokenCounter, LangChainComplete, complete_fn_from_langchain
from ._convert import from_convmem_message, to_convmem_message, to_convmem_messages
from ._embeddings import LangChainEmbedder
from ._history import ConvMemChatMessageHistory, ConvMemSessions
from ._middleware import ConvMemMiddleware
from ._runnable import ConvMemRunnable, with_convmem
from ._vector_store import LangChainVectorIndex, PrecomputedEmbeddings

__all__ = [
    "ChatModelTokenCounter",
    "ConvMemChatMessageHistory",
    "ConvMemMiddleware",
    "ConvMemRunnable",
    "ConvMemSessions",
    "LangChainComplete",
    "LangChainEmbedder",
    "LangChainVectorIndex",
    "PrecomputedEmbeddings",
    "complete_fn_from_langchain",
    "from_convmem_message",
    "to_convmem_message",
    "to_convmem_messages",
    "with_convmem",
]

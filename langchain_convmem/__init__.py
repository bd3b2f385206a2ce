"""LangChain integration for convmem: a chat history, a retrieval-aware runnable,
agent middleware, and model adapters.

- `ConvMemChatMessageHistory`: a ``BaseChatMessageHistory`` whose ``messages``
  is the managed context (facts, summary, recall and the recent window within a
  token budget); works with ``RunnableWithMessageHistory``.
- `with_convmem` / `ConvMemRunnable`: builds the context for the incoming
  message (so recall can use it) and records each turn with its status.
- `ConvMemMiddleware`: the same for ``langchain.agents.create_agent``
  (needs the ``langchain`` package).
- `ConvMemStore`: a LangGraph ``BaseStore`` showing a user's facts and past
  conversations to agents and graphs (needs the ``langgraph`` package).
- `complete_fn_from_langchain`, `ChatModelTokenCounter`, `LangChainEmbedder`:
  LangChain models as the summarizer/fact-extractor model, token counter and
  embedder of a memory.
- `LangChainVectorIndex` (with `PrecomputedEmbeddings`): a session's recall
  vectors in a LangChain vector store that several servers share.

Needs langchain-core: ``pip install "convmem[langchain]"``.
"""

import importlib
from typing import TYPE_CHECKING, Any

try:
    import langchain_core  # noqa: F401  # every module here needs it: say how to get it, once
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f'langchain_convmem needs {exc.name}, which is not installed: pip install "convmem[langchain]"',
        name=exc.name,
    ) from exc

from ._convert import from_convmem_message, to_convmem_message, to_convmem_messages
from ._history import ConvMemChatMessageHistory, ConvMemSessions

if TYPE_CHECKING:
    from ._adapters import ChatModelTokenCounter, LangChainComplete, complete_fn_from_langchain
    from ._embeddings import LangChainEmbedder
    from ._graph import ConvMemNode
    from ._middleware import ConvMemMiddleware
    from ._runnable import ConvMemRunnable, with_convmem
    from ._store import ConvMemStore
    from ._vector_store import LangChainVectorIndex, PrecomputedEmbeddings

# Everything beyond the chat history loads on first use: the middleware and the
# LangGraph helper import `langchain.agents` and `langgraph`, the runnable and
# the adapters langchain-core's runnables and tracers (each most of a second),
# and a user who only wants the history should pay for langchain-core's messages alone.
_LAZY = {
    "ChatModelTokenCounter": "._adapters",
    "LangChainComplete": "._adapters",
    "complete_fn_from_langchain": "._adapters",
    "LangChainEmbedder": "._embeddings",
    "ConvMemNode": "._graph",
    "ConvMemMiddleware": "._middleware",
    "ConvMemRunnable": "._runnable",
    "with_convmem": "._runnable",
    "ConvMemStore": "._store",
    "LangChainVectorIndex": "._vector_store",
    "PrecomputedEmbeddings": "._vector_store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ChatModelTokenCounter",
    "ConvMemChatMessageHistory",
    "ConvMemMiddleware",
    "ConvMemNode",
    "ConvMemRunnable",
    "ConvMemSessions",
    "ConvMemStore",
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

"""LlamaIndex integration for convmem.

- `ConvMemChatMemoryBuffer`: a `ChatMemoryBuffer` for chat engines and agents.
- `ConvMemChatStore`: the buffer's ``chat_store``, a `BaseChatStore` view over convmem's logs.
- `ConvMemMemoryBlock`: facts, summary and recall as a block of `llama_index.core.memory.Memory`.
- `ConvMemCondensePlusContextChatEngine`: rewrites questions from convmem's orchestration view.
- Adapters: `complete_fn_from_llamaindex` (LLM -> summarizer/fact-extractor callable),
  `LlamaIndexEmbedder` (BaseEmbedding -> embedder), `TokenizerFnCounter` (tokenizer_fn -> counter),
  and the `ChatMessage` conversions.
- `LlamaIndexVectorIndex`: a session's recall vectors in a LlamaIndex vector store
  that several servers share.

Needs llama-index-core: ``pip install "convmem[llamaindex]"``.
"""

try:
    import llama_index.core  # noqa: F401  # every module here needs it: say how to get it, once
except ModuleNotFoundError as exc:
    raise ModuleNotFoundError(
        f'llamaindex_convmem needs {exc.name}, which is not installed: pip install "convmem[llamaindex]"',
        name=exc.name,
    ) from exc

from ._block import ConvMemMemoryBlock
from ._buffer import ConvMemChatMemoryBuffer
from ._chat_store import ConvMemChatStore
from ._condense import ConvMemCondensePlusContextChatEngine
from ._embeddings import LlamaIndexEmbedder
from ._llm import acomplete_fn_from_llamaindex, complete_fn_from_llamaindex
from ._messages import from_chat_message, from_chat_messages, to_chat_message, to_chat_messages
from ._tokenizer import TokenizerFnCounter
from ._vector_store import LlamaIndexVectorIndex

__all__ = [
    "ConvMemChatMemoryBuffer",
    "ConvMemChatStore",
    "ConvMemCondensePlusContextChatEngine",
    "ConvMemMemoryBlock",
    "LlamaIndexEmbedder",
    "LlamaIndexVectorIndex",
    "TokenizerFnCounter",
    "acomplete_fn_from_llamaindex",
    "complete_fn_from_llamaindex",
    "from_chat_message",
    "from_chat_messages",
    "to_chat_message",
    "to_chat_messages",
]

"""convmem: conversation memory that fits a token budget.

The public API is what `__all__` lists: the memory and its configuration, the
stores, the pluggable parts (counters, summarizers, fact extractors,
embedders), retention, and the errors. Everything else is private.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._background import set_background_workers
from ._builder import BuiltContext
from ._config import MemoryConfig
from ._derived import Summary
from ._errors import (
    BudgetError,
    ConfigError,
    ConvMemError,
    InvalidMessageError,
    InvalidSessionIdError,
    StoreError,
)
from ._facts import Fact, FactExtractor, RuleFactExtractor
from ._inmemory_store import InMemoryStore
from ._llm import LLMFactExtractor, LLMSummarizer
from ._memory import ConversationMemory
from ._models import Message, Turn, TurnStatus
from ._postgres_store import AsyncPostgresStore, PostgresStore
from ._recall_config import RecallConfig
from ._redis_store import AsyncRedisStore, RedisStore
from ._retention import (
    aexpire_idle,
    aforget_session,
    aforget_user,
    expire_idle,
    forget_session,
    forget_user,
)
from ._sessions import SessionRegistry
from ._sqlite_store import SQLiteStore
from ._store import Store
from ._summarizer import ExtractiveSummarizer, Summarizer
from ._tokens import ApproximateCounter, TiktokenCounter, TokenCounter, count_messages

if TYPE_CHECKING:
    from ._embedder import Embedder, HashingEmbedder, SentenceTransformerEmbedder
    from ._recall import Recall
    from ._vector_index import VectorIndex

# Recall and the embedders need numpy, which takes longer to import than the rest
# of convmem together: they load when first named (or when a memory is made).
_LAZY = {
    "Embedder": "._embedder",
    "HashingEmbedder": "._embedder",
    "SentenceTransformerEmbedder": "._embedder",
    "Recall": "._recall",
    "VectorIndex": "._vector_index",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'convmem' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__version__ = "0.1.0"

__all__ = [
    "ApproximateCounter",
    "AsyncPostgresStore",
    "AsyncRedisStore",
    "BudgetError",
    "BuiltContext",
    "ConfigError",
    "ConvMemError",
    "ConversationMemory",
    "Embedder",
    "ExtractiveSummarizer",
    "Fact",
    "FactExtractor",
    "HashingEmbedder",
    "InMemoryStore",
    "InvalidMessageError",
    "InvalidSessionIdError",
    "LLMFactExtractor",
    "LLMSummarizer",
    "MemoryConfig",
    "Message",
    "PostgresStore",
    "Recall",
    "RecallConfig",
    "RedisStore",
    "RuleFactExtractor",
    "SQLiteStore",
    "SentenceTransformerEmbedder",
    "SessionRegistry",
    "Store",
    "StoreError",
    "Summarizer",
    "Summary",
    "TiktokenCounter",
    "TokenCounter",
    "Turn",
    "TurnStatus",
    "VectorIndex",
    "aexpire_idle",
    "aforget_session",
    "aforget_user",
    "count_messages",
    "expire_idle",
    "forget_session",
    "forget_user",
    "set_background_workers",
]

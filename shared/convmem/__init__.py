"""convmem: conversation memory that fits a token budget.

The public API is what `__all__` lists: the memory and its configuration, the
stores, the pluggable parts (counters, summarizers, fact extractors,
embedders), retention, and the errors. Everything else is private.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._config import MemoryConfig
from ._context.builder import BuiltContext
from ._derived.background import set_background_workers
from ._derived.facts import Fact, FactExtractor, RuleFactExtractor
from ._derived.llm import LLMFactExtractor, LLMSummarizer
from ._derived.state import Summary
from ._derived.summarizer import ExtractiveSummarizer, Summarizer
from ._errors import (
    BudgetError,
    ConfigError,
    ConvMemError,
    InvalidMessageError,
    InvalidSessionIdError,
    StoreError,
)
from ._memory import ConversationMemory
from ._models import Message, Turn, TurnStatus
from ._recall.config import RecallConfig
from ._sessions import SessionRegistry
from ._stores.base import Store
from ._stores.memory import InMemoryStore
from ._stores.postgres.store import AsyncPostgresStore, PostgresStore
from ._stores.redis.store import AsyncRedisStore, RedisStore
from ._stores.retention import (
    aexpire_idle,
    aforget_session,
    aforget_user,
    expire_idle,
    forget_session,
    forget_user,
)
from ._stores.sqlite.store import SQLiteStore
from ._tokens import ApproximateCounter, TiktokenCounter, TokenCounter, count_messages

if TYPE_CHECKING:
    from ._recall.embedder import Embedder, HashingEmbedder, SentenceTransformerEmbedder
    from ._recall.engine import Recall
    from ._recall.vector_index import VectorIndex

# Recall and the embedders need numpy, which takes longer to import than the rest
# of convmem together: they load when first named (or when a memory is made).
_LAZY = {
    "Embedder": "._recall.embedder",
    "HashingEmbedder": "._recall.embedder",
    "SentenceTransformerEmbedder": "._recall.embedder",
    "Recall": "._recall.engine",
    "VectorIndex": "._recall.vector_index",
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

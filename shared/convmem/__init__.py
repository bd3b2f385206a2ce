"""convmem: conversation memory that fits a token budget.

The public API comes in three tiers:

- `convmem` (this module, what `__all__` lists): what an application holds: the
  memory and its configuration, messages and the results it gets back, the
  stores, the pluggable parts (counters, summarizers, fact extractors,
  embedders), retention, and the errors;
- `convmem.testing`: the store contract suite, for authors of a new store;
- `convmem.integration`: the pieces a framework wrapper is built from.

Everything else (every ``_module``) is private and may change in any release.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._config import MemoryConfig, TranscriptTemplate
from ._context.report import BuiltContext, SectionReport
from ._derived.background import set_background_workers
from ._derived.facts import Fact, FactExtractor
from ._derived.llm import LLMFactExtractor, LLMSummarizer
from ._derived.progress import ImportProgress
from ._derived.records import Summary
from ._derived.rule_extractor import RuleFactExtractor
from ._derived.summarizer import ExtractiveSummarizer, Summarizer
from ._errors import (
    BudgetError,
    ConfigError,
    ConvMemError,
    InvalidMessageError,
    InvalidSessionIdError,
    ModelTimeoutError,
    SessionOwnerError,
    StoreError,
)
from ._memory import ConversationMemory, OverflowStatus
from ._models import Message, Role, Turn, TurnStatus
from ._recall.config import RecallConfig
from ._sessions import SessionRegistry
from ._stores.base import AsyncStore, SessionStats, Store
from ._stores.memory import InMemoryStore
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
    from ._recall.index_scope import IndexScope
    from ._recall.render import RecalledItem, RecallResult
    from ._recall.vector_index import VectorIndex
    from ._stores.postgres.async_store import AsyncPostgresStore
    from ._stores.postgres.store import PostgresStore
    from ._stores.redis.store import AsyncRedisStore, RedisStore

# Recall and the embedders need numpy, which takes longer to import than the rest
# of convmem together: they load when first named (or when a memory is made). The
# PostgreSQL and Redis stores load when first named, so a SQLite user never pays for them.
_LAZY = {
    "AsyncPostgresStore": "._stores.postgres.async_store",
    "AsyncRedisStore": "._stores.redis.store",
    "PostgresStore": "._stores.postgres.store",
    "RedisStore": "._stores.redis.store",
    "Embedder": "._recall.embedder",
    "HashingEmbedder": "._recall.embedder",
    "IndexScope": "._recall.index_scope",
    "SentenceTransformerEmbedder": "._recall.embedder",
    "Recall": "._recall.engine",
    "RecallResult": "._recall.render",
    "RecalledItem": "._recall.render",
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
    "AsyncStore",
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
    "ImportProgress",
    "InMemoryStore",
    "IndexScope",
    "InvalidMessageError",
    "InvalidSessionIdError",
    "LLMFactExtractor",
    "LLMSummarizer",
    "MemoryConfig",
    "Message",
    "ModelTimeoutError",
    "OverflowStatus",
    "PostgresStore",
    "Recall",
    "RecallConfig",
    "RecallResult",
    "RecalledItem",
    "RedisStore",
    "Role",
    "RuleFactExtractor",
    "SQLiteStore",
    "SectionReport",
    "SentenceTransformerEmbedder",
    "SessionOwnerError",
    "SessionRegistry",
    "SessionStats",
    "Store",
    "StoreError",
    "Summarizer",
    "Summary",
    "TiktokenCounter",
    "TokenCounter",
    "TranscriptTemplate",
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

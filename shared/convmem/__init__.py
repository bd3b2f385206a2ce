"""convmem: conversation memory that fits a token budget."""

from ._builder import BuiltContext, RecallItem, SectionReport
from ._config import MemoryConfig, TranscriptTemplate
from ._derived import Summary
from ._embedder import (
    BaseEmbedder,
    Embedder,
    HashingEmbedder,
    LangChainEmbedder,
    LlamaIndexEmbedder,
    SentenceTransformerEmbedder,
)
from ._errors import (
    BudgetError,
    ConfigError,
    ConvMemError,
    InvalidMessageError,
    InvalidSessionIdError,
    StoreError,
)
from ._facts import FACT_SECTION_HEADERS, Fact, FactBook, FactExtractor, LLMFactExtractor, RuleFactExtractor
from ._inmemory_store import InMemoryStore
from ._language import detect_language, split_sentences
from ._memory import ConversationMemory, OverflowStatus, open_store
from ._models import Message, Role, Turn, TurnStatus, group_turns
from ._postgres_store import AsyncPostgresStore, PostgresStore
from ._recall import Recall, RecallConfig, RecalledItem, RecallFilters, RecallResult, choose_recall_share
from ._redis_store import AsyncRedisStore, RedisStore
from ._retention import (
    Forgettable,
    aexpire_idle,
    aforget_session,
    aforget_user,
    expire_idle,
    forget_session,
    forget_user,
)
from ._sqlite_store import SQLiteStore
from ._store import SessionStats, StateRecord, Store, validate_id
from ._summarizer import CompleteFn, ExtractiveSummarizer, LLMSummarizer, Summarizer
from ._tokens import (
    REPLY_PRIMING_TOKENS,
    ApproximateCounter,
    TextTokenCounter,
    TiktokenCounter,
    TokenCounter,
    count_messages,
    default_counter,
)
from ._transcript import render_transcript
from ._vector_index import FaissIndex, IndexFileError, VectorIndex
from ._vector_store_index import LangChainVectorIndex, LlamaIndexVectorIndex, PrecomputedEmbeddings
from ._window import Dropped

__version__ = "0.1.0"

__all__ = [
    "FACT_SECTION_HEADERS",
    "REPLY_PRIMING_TOKENS",
    "ApproximateCounter",
    "AsyncPostgresStore",
    "AsyncRedisStore",
    "BaseEmbedder",
    "BudgetError",
    "BuiltContext",
    "CompleteFn",
    "ConfigError",
    "ConvMemError",
    "ConversationMemory",
    "Dropped",
    "Embedder",
    "ExtractiveSummarizer",
    "Fact",
    "FactBook",
    "FactExtractor",
    "FaissIndex",
    "Forgettable",
    "HashingEmbedder",
    "InMemoryStore",
    "IndexFileError",
    "InvalidMessageError",
    "InvalidSessionIdError",
    "LLMFactExtractor",
    "LLMSummarizer",
    "LangChainEmbedder",
    "LangChainVectorIndex",
    "LlamaIndexEmbedder",
    "LlamaIndexVectorIndex",
    "MemoryConfig",
    "Message",
    "OverflowStatus",
    "PostgresStore",
    "PrecomputedEmbeddings",
    "Recall",
    "RecallConfig",
    "RecallFilters",
    "RecallItem",
    "RecallResult",
    "RecalledItem",
    "RedisStore",
    "Role",
    "RuleFactExtractor",
    "SQLiteStore",
    "SectionReport",
    "SentenceTransformerEmbedder",
    "SessionStats",
    "StateRecord",
    "Store",
    "StoreError",
    "Summarizer",
    "Summary",
    "TextTokenCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TranscriptTemplate",
    "Turn",
    "TurnStatus",
    "VectorIndex",
    "__version__",
    "aexpire_idle",
    "aforget_session",
    "aforget_user",
    "choose_recall_share",
    "count_messages",
    "default_counter",
    "detect_language",
    "expire_idle",
    "forget_session",
    "forget_user",
    "group_turns",
    "open_store",
    "render_transcript",
    "split_sentences",
    "validate_id",
]

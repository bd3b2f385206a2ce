"""convmem: conversation memory that fits a token budget."""

from ._background import set_background_workers
from ._builder import BuiltContext, SectionReport
from ._config import MemoryConfig, MemoryPlacement, TranscriptTemplate
from ._derived import Summary
from ._embedder import BaseEmbedder, Embedder, HashingEmbedder, SentenceTransformerEmbedder
from ._errors import (
    BudgetError,
    ConfigError,
    ConvMemError,
    InvalidMessageError,
    InvalidSessionIdError,
    StoreError,
)
from ._facts import Fact, FactBook, FactExtractor, RuleFactExtractor
from ._inmemory_store import InMemoryStore
from ._language import FACT_SECTION_HEADERS, detect_language, neutralise_stored_text, split_sentences
from ._llm import CompleteFn, LLMFactExtractor, LLMSummarizer
from ._memory import ConversationMemory, OverflowStatus, open_store
from ._models import Message, Role, Turn, TurnStatus, group_turns, validate_message
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
from ._sessions import DEFAULT_MAX_CACHED_SESSIONS, SessionRegistry, memory_from_options
from ._sqlite_store import SQLiteStore
from ._store import SessionStats, StateRecord, Store, validate_id, validate_messages
from ._summarizer import ExtractiveSummarizer, Summarizer
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
from ._window import Dropped

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_CACHED_SESSIONS",
    "FACT_SECTION_HEADERS",
    "REPLY_PRIMING_TOKENS",
    "ApproximateCounter",
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
    "MemoryConfig",
    "MemoryPlacement",
    "Message",
    "OverflowStatus",
    "Recall",
    "RecallConfig",
    "RecallFilters",
    "RecallResult",
    "RecalledItem",
    "RedisStore",
    "Role",
    "RuleFactExtractor",
    "SQLiteStore",
    "SectionReport",
    "SentenceTransformerEmbedder",
    "SessionRegistry",
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
    "memory_from_options",
    "neutralise_stored_text",
    "open_store",
    "render_transcript",
    "set_background_workers",
    "split_sentences",
    "validate_id",
    "validate_message",
    "validate_messages",
]

"""convmem: conversation memory that fits a token budget."""

from ._builder import BuiltContext, RecallItem, SectionReport
from ._config import MemoryConfig, TranscriptTemplate
from ._derived import Summary
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
from ._redis_store import AsyncRedisStore, RedisStore
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
from ._window import Dropped

__version__ = "0.1.0"

__all__ = [
    "FACT_SECTION_HEADERS",
    "REPLY_PRIMING_TOKENS",
    "ApproximateCounter",
    "AsyncRedisStore",
    "BudgetError",
    "BuiltContext",
    "CompleteFn",
    "ConfigError",
    "ConvMemError",
    "ConversationMemory",
    "Dropped",
    "ExtractiveSummarizer",
    "Fact",
    "FactBook",
    "FactExtractor",
    "InMemoryStore",
    "InvalidMessageError",
    "InvalidSessionIdError",
    "LLMFactExtractor",
    "LLMSummarizer",
    "MemoryConfig",
    "Message",
    "OverflowStatus",
    "RecallItem",
    "RedisStore",
    "Role",
    "RuleFactExtractor",
    "SQLiteStore",
    "SectionReport",
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
    "__version__",
    "count_messages",
    "default_counter",
    "detect_language",
    "group_turns",
    "open_store",
    "render_transcript",
    "split_sentences",
    "validate_id",
]

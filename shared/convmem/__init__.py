"""convmem: conversation memory that fits a token budget."""

from ._builder import BuiltContext, RecallItem, SectionReport
from ._config import MemoryConfig, TranscriptTemplate
from ._errors import (
    BudgetError,
    ConfigError,
    ConvMemError,
    InvalidMessageError,
    InvalidSessionIdError,
    StoreError,
)
from ._inmemory_store import InMemoryStore
from ._memory import ConversationMemory, OverflowStatus, open_store
from ._models import Message, Role, Turn, TurnStatus, group_turns
from ._sqlite_store import SQLiteStore
from ._store import SessionStats, StateRecord, Store, validate_id
from ._tokens import (
    REPLY_PRIMING_TOKENS,
    ApproximateCounter,
    TiktokenCounter,
    TokenCounter,
    count_messages,
    default_counter,
)
from ._transcript import render_transcript
from ._window import Dropped

__version__ = "0.1.0"

__all__ = [
    "REPLY_PRIMING_TOKENS",
    "ApproximateCounter",
    "BudgetError",
    "BuiltContext",
    "ConfigError",
    "ConvMemError",
    "ConversationMemory",
    "Dropped",
    "InMemoryStore",
    "InvalidMessageError",
    "InvalidSessionIdError",
    "MemoryConfig",
    "Message",
    "OverflowStatus",
    "RecallItem",
    "Role",
    "SQLiteStore",
    "SectionReport",
    "SessionStats",
    "StateRecord",
    "Store",
    "StoreError",
    "TiktokenCounter",
    "TokenCounter",
    "TranscriptTemplate",
    "Turn",
    "TurnStatus",
    "__version__",
    "count_messages",
    "default_counter",
    "group_turns",
    "open_store",
    "render_transcript",
    "validate_id",
]

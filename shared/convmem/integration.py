"""For authors of framework integrations: what convmem's own LangChain and LlamaIndex
wrappers are built from, with the same stability promise as `convmem` itself.

An application needs only `convmem`. A wrapper for another framework needs a few more
pieces: building memories from one set of options, the id and option checks every entry
point makes, token counting over plain text, the transcript views, the seams a
framework's own embeddings and vector stores plug into, and the capabilities a store
declares beyond the `Store` contract (`ReadsSession`, `ReadsStates`, `ReadsLogs`, `ListsUserSessions`,
`ReadsUserScope`, `HostsHistoryIndex`, `HostsVectors`, `HasFileLocation`; see `convmem.testing`)::

    from convmem.integration import memory_from_options, validate_id

    def memory_for(thread_id: str, **options):
        return memory_from_options(validate_id(thread_id, "thread_id"), options)

Nothing here is needed to use convmem, and nothing outside `convmem`, `convmem.testing`
and this module is promised to stay.
"""

import importlib
from typing import TYPE_CHECKING, Any

from ._context.transcript import render_transcript
from ._derived.user_scope import UserFacts
from ._language import chat_api_message
from ._models import group_turns
from ._options import MAX_INT_OPTION, check_bool, check_choice, check_int, check_number, is_component
from ._recall.index_rows import (
    EXCHANGE_KIND,
    KEY_SHIFT,
    PASSAGE_KIND,
    UNIT_COLUMNS,
    HistoryTables,
    IndexBatch,
    IndexCursor,
    IndexedHistory,
    IndexedSession,
    UnitRow,
)
from ._recall.lexical import tokenize
from ._sessions import memory_from_options, store_from_options
from ._stores.base import validate_id
from ._stores.capabilities import (
    AsyncReadsSession,
    HasFileLocation,
    HostsHistoryIndex,
    HostsVectors,
    ListsUserSessions,
    LogRead,
    ReadsLogs,
    ReadsSession,
    ReadsStates,
    ReadsUserScope,
)
from ._tokens import REPLY_PRIMING_TOKENS, TextTokenCounter, default_counter

if TYPE_CHECKING:
    from ._recall.embedder import BaseEmbedder
    from ._recall.index_scope import IndexScope, store_namespace
    from ._recall.store_backed_index import (
        GENERATION_KEY,
        SCOPE_KEY,
        SESSION_KEY,
        UNIT_KEY,
        USER_KEY,
        VECTOR_KEY,
        StoreBackedIndex,
        decode_vector,
        encode_vector,
        legacy_session_key,
        stored_vector,
    )

# These need numpy: they load when first named, as in `convmem`.
_LAZY = {
    "BaseEmbedder": "._recall.embedder",
    "IndexScope": "._recall.index_scope",
    "store_namespace": "._recall.index_scope",
    "GENERATION_KEY": "._recall.store_backed_index",
    "SCOPE_KEY": "._recall.store_backed_index",
    "USER_KEY": "._recall.store_backed_index",
    "legacy_session_key": "._recall.store_backed_index",
    "SESSION_KEY": "._recall.store_backed_index",
    "UNIT_KEY": "._recall.store_backed_index",
    "VECTOR_KEY": "._recall.store_backed_index",
    "StoreBackedIndex": "._recall.store_backed_index",
    "decode_vector": "._recall.store_backed_index",
    "encode_vector": "._recall.store_backed_index",
    "stored_vector": "._recall.store_backed_index",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'convmem.integration' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, "convmem"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "EXCHANGE_KIND",
    "GENERATION_KEY",
    "KEY_SHIFT",
    "MAX_INT_OPTION",
    "PASSAGE_KIND",
    "REPLY_PRIMING_TOKENS",
    "SCOPE_KEY",
    "SESSION_KEY",
    "UNIT_COLUMNS",
    "UNIT_KEY",
    "USER_KEY",
    "VECTOR_KEY",
    "AsyncReadsSession",
    "BaseEmbedder",
    "HasFileLocation",
    "HistoryTables",
    "HostsHistoryIndex",
    "HostsVectors",
    "IndexBatch",
    "IndexCursor",
    "IndexScope",
    "IndexedHistory",
    "IndexedSession",
    "ListsUserSessions",
    "LogRead",
    "ReadsLogs",
    "ReadsSession",
    "ReadsStates",
    "ReadsUserScope",
    "StoreBackedIndex",
    "TextTokenCounter",
    "UnitRow",
    "UserFacts",
    "chat_api_message",
    "check_bool",
    "check_choice",
    "check_int",
    "check_number",
    "decode_vector",
    "default_counter",
    "encode_vector",
    "group_turns",
    "is_component",
    "legacy_session_key",
    "memory_from_options",
    "render_transcript",
    "store_from_options",
    "store_namespace",
    "stored_vector",
    "tokenize",
    "validate_id",
]

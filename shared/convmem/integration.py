"""For authors of framework integrations: what convmem's own LangChain and LlamaIndex
wrappers are built from, with the same stability promise as `convmem` itself.

An application needs only `convmem`. A wrapper for another framework needs a few more
pieces: building memories from one set of options, the id and option checks every entry
point makes, token counting over plain text, the transcript views, and the seams a
framework's own embeddings and vector stores plug into::

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
from ._models import group_turns
from ._options import MAX_INT_OPTION, check_bool, check_choice, check_int, check_number
from ._recall.lexical import tokenize
from ._sessions import memory_from_options, store_from_options
from ._stores.base import validate_id
from ._tokens import REPLY_PRIMING_TOKENS, TextTokenCounter, default_counter

if TYPE_CHECKING:
    from ._recall.embedder import BaseEmbedder
    from ._recall.store_backed_index import (
        SESSION_KEY,
        UNIT_KEY,
        VECTOR_KEY,
        StoreBackedIndex,
        decode_vector,
        encode_vector,
        stored_vector,
    )

# These need numpy: they load when first named, as in `convmem`.
_LAZY = {
    "BaseEmbedder": "._recall.embedder",
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
    "MAX_INT_OPTION",
    "REPLY_PRIMING_TOKENS",
    "SESSION_KEY",
    "UNIT_KEY",
    "VECTOR_KEY",
    "BaseEmbedder",
    "StoreBackedIndex",
    "TextTokenCounter",
    "UserFacts",
    "check_bool",
    "check_choice",
    "check_int",
    "check_number",
    "decode_vector",
    "default_counter",
    "encode_vector",
    "group_turns",
    "memory_from_options",
    "render_transcript",
    "store_from_options",
    "stored_vector",
    "tokenize",
    "validate_id",
]

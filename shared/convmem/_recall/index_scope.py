"""Whose vectors a recall index holds: `IndexScope`, what `Recall` hands an ``index_factory``.

A vector store shared by many servers may also be shared by many tenants: stores
(SQLite files, Redis prefixes, PostgreSQL schemas) whose session ids are chosen
independently, so two of them can both hold a session ``"s1"``. An index is
therefore made for one *scope*: the store's namespace, the session, its owner
and the generation of its log. Entries of one scope never answer for another:
a tenant's search never sees another tenant's vectors, a tenant's forget never
deletes them, and a session started again after a forget (by any path: an
explicit forget, ``expire_idle``, a TTL) has a new generation, so it never
adopts the vectors of the conversation that went before.

A store's namespace says where its data lives (``SQLiteStore``: the file;
``RedisStore``: the server and key prefix; ``PostgresStore``: the server,
database and schema; ``InMemoryStore``: the object, as its data dies with the
process). Servers that reach one store by the same address get the same
namespace, so they share its vectors. A store of another kind names its own with
a ``namespace`` property (`NamespacedStore`); one that does not gets a namespace
for this process only (vectors are then not shared across servers).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import secrets
import threading
import weakref
from collections.abc import Callable
from hashlib import sha256
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError
from .._stores.base import SessionStats, validate_id
from .units import SessionMirror

__all__ = [
    "IndexScope",
    "NamespacedStore",
    "check_index_factory",
    "scope_key",
    "scope_of",
    "skip_stored",
    "store_namespace",
]

logger = logging.getLogger("convmem")

# The generation of a session whose log does not exist (yet), or predates generations.
NO_GENERATION = "-"


@runtime_checkable
class NamespacedStore(Protocol):
    """A store that names where its data lives, the same way in every process that opens it."""

    @property
    def namespace(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class IndexScope:
    """The session an index serves, and whose it is. `Recall` passes one to its ``index_factory``.

    Attributes:
        namespace: the tenant: the store's `namespace` (see `store_namespace`), or
            what ``Recall(namespace=...)`` says.
        session_id: the session.
        user_id: the session's owner when the index was made (None: no owner yet).
        generation: the log's generation (see `Store.stats`); None for a session
            with no log yet. An index keeps the vectors of one generation: `Recall`
            calls its ``follow_generation`` when the log is edited.
        dimension: the embedder's dimension.
        store: the store the session lives in; None when `Recall.forget` names
            none (then `namespace` alone says whose vectors go).

    Example::

        def index_factory(scope: IndexScope) -> VectorIndex:
            return LlamaIndexVectorIndex(collections[scope.namespace], **scope.arguments())
    """

    namespace: str
    session_id: str
    user_id: str | None
    generation: str | None
    dimension: int
    store: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_namespace(self.namespace)
        validate_id(self.session_id)
        if self.user_id is not None:
            validate_id(self.user_id, "user_id")
        if self.generation is not None and not isinstance(self.generation, str):
            raise ConfigError(f"generation must be a str or None, got {self.generation!r:.60}")
        if isinstance(self.dimension, bool) or not isinstance(self.dimension, int) or self.dimension <= 0:
            raise ConfigError(f"dimension must be a positive int, got {self.dimension!r}")

    @property
    def key(self) -> str:
        """A fixed-length key of the namespace and session: the first part of every node id."""
        return scope_key(self.namespace, self.session_id)

    def arguments(self) -> dict[str, Any]:
        """The scope as the keyword arguments of a `StoreBackedIndex` adapter."""
        return {
            "namespace": self.namespace,
            "session_id": self.session_id,
            "user_id": self.user_id,
            "generation": self.generation,
            "dimension": self.dimension,
        }


def check_namespace(namespace: object) -> str:
    if not isinstance(namespace, str) or not namespace.strip() or "\x00" in namespace:
        raise ConfigError(
            f"a namespace must be a non-empty string without NUL (it names a tenant), got {namespace!r:.80}"
        )
    return namespace


def scope_key(namespace: str, session_id: str) -> str:
    """32 hex digits naming a session of a namespace; the NUL between them cannot occur in either."""
    return sha256(f"{namespace}\x00{session_id}".encode()).hexdigest()[:32]


def generation_token(generation: str | None) -> str:
    """How a generation is written in node ids and metadata (`NO_GENERATION` for None)."""
    return NO_GENERATION if generation is None else generation


_process_namespaces: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_process_lock = threading.Lock()
_warned_kinds: set[str] = set()


def store_namespace(store: object) -> str:
    """The namespace of `store`'s vectors in a shared vector store.

    The store's own ``namespace`` when it has one (every convmem store does);
    otherwise one made for this store object, valid in this process only, with a
    warning: other servers cannot find these vectors, so each embeds its own.
    """
    if isinstance(store, NamespacedStore):
        return check_namespace(store.namespace)
    kind = type(store).__name__
    with _process_lock:
        try:
            namespace = _process_namespaces.get(store)
            if namespace is None:
                namespace = f"process:{kind}:{secrets.token_hex(8)}"
                _process_namespaces[store] = namespace
        except TypeError:  # not weakly referenceable: named by its identity while it lives
            namespace = f"process:{kind}:{id(store):x}"
        first = kind not in _warned_kinds
        _warned_kinds.add(kind)
    if first:
        logger.warning(
            "%s has no namespace property, so its recall vectors in a shared vector store are "
            "keyed for this process only; give it one (where its data lives) or pass "
            "Recall(namespace=...) to share them between servers",
            kind,
        )
    return namespace


def scope_of(
    namespace: str | Callable[[Any], str] | None,
    session_id: str,
    store: Any,
    stats: SessionStats | None,
    dimension: int,
) -> IndexScope:
    """The scope `index_factory` gets for a session of `store` (None: the engine's one
    `namespace` string), under the engine's `namespace` (a string, a function of the store,
    or None: the store's own, `store_namespace`)."""
    if isinstance(namespace, str):
        name = namespace
    elif store is None:
        raise ConfigError(
            f"cannot tell whose vectors of session {session_id!r:.80} to delete: pass store= "
            "(or give Recall a namespace string)"
        )
    elif namespace is not None:
        name = check_namespace(namespace(store))
    else:
        name = store_namespace(store)
    return IndexScope(
        namespace=name,
        session_id=session_id,
        user_id=None if stats is None else stats.user_id,
        generation=None if stats is None else stats.generation,
        dimension=dimension,
        store=store,
    )


def check_index_factory(index_factory: object) -> None:
    """Refuse an `index_factory` that is not a function of one `IndexScope`."""
    if index_factory is None:
        return
    if not callable(index_factory):
        raise ConfigError(f"index_factory must be a function of an IndexScope, got {index_factory!r:.80}")
    try:
        inspect.signature(index_factory).bind(None)
    except TypeError:
        raise ConfigError(
            f"index_factory must take one argument, the IndexScope of a session (its tenant, "
            f"owner and log generation), got {index_factory!r:.80}; a factory of (session_id, "
            "dimension) keyed every tenant's session alike. Use LlamaIndexVectorIndex.factory(store) "
            "or LangChainVectorIndex.factory(store)"
        ) from None
    except ValueError:
        pass  # no signature to check (a builtin): it is called as documented


def skip_stored(state: SessionMirror) -> None:
    """Leave out of the queue what another server already embedded into the shared index.

    Only an index that says which units it holds for a log generation (``stored``) is
    asked, and only for the generation the mirror holds: a unit id names fixed text
    within one generation, so its stored vector is the one this server would make.
    """
    with state.lock:
        index = state.index
        stored = getattr(index, "stored", None)
        todo = [unit for unit in state.pending if unit not in state.inflight]
        generation = state.generation
    if stored is None or not todo or not isinstance(generation, str):
        return
    try:
        held = stored(todo, generation)
    except Exception as exc:  # the queue stays as it was: embedding is always correct
        logger.warning("could not ask the shared index of %r what it holds: %s", state.session_id, exc)
        return
    with state.lock:
        if state.index is index and state.generation == generation:
            for unit in held:
                state.pending.pop(unit, None)

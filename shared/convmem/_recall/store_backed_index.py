"""The framework-free half of a `VectorIndex` kept in a vector store shared by many servers.

`FaissIndex` keeps a session's vectors in the process that serves it (and in a
file next to the store). When several servers answer the same sessions, each
would build and keep its own copy. A `StoreBackedIndex` keeps them in a vector
store the servers share instead. The framework adapters subclass it:
``langchain_convmem.LangChainVectorIndex`` and
``llamaindex_convmem.LlamaIndexVectorIndex``; this module imports neither
framework.

One adapter serves one session of one tenant at one log generation (an
`IndexScope`); many adapters (one per session, in as many processes as you
like, for as many tenants as you like) share one vector store. Every unit is
stored with the node id ``"<scope key>:<generation>:<unit id>"``, where the
scope key is a hash of the tenant's namespace and the session id, and the
metadata ``convmem_scope`` (that key), ``convmem_generation``,
``convmem_session``, ``convmem_unit`` and, when the session has an owner,
``convmem_user``. Scopes are walls: a search asks the store for this scope and
generation only (a metadata filter), and any hit whose id or metadata names
another is dropped here too, so a store that ignored the filter would return
fewer units, never another tenant's or another conversation's. Entries of
another generation of the same scope (a log edited, or forgotten and started
again) are never read, and are deleted when the adapter is made (on stores that
can list) and when it follows a new generation; `clear` deletes every
generation of the scope and nothing else.

Vectors written by convmem 0.1 (node ids ``"<hash of the session id>:<unit>"``,
no scope) are never read: recall embeds those units again from the log. On
stores that can list, the adapter deletes them (with a warning) when it is made.

Similarity is cosine, as in `FaissIndex`: vectors are normalized on the way in
(a zero or non-finite vector is rejected), so cosine, inner product and L2
rank alike, and a store that reports distances can be converted exactly (see
``score_to_similarity``).

What lives where. The store is the source of truth for search. ``ids()``,
``len()`` and ``in`` answer from a local set of ids, filled from the store
when the adapter is created (if the store can list a session's units), kept
up to date by `add` and `remove`, and grown by search hits. Another process
writing the same session is therefore seen by search at once, and by ``ids()``
after `refresh`. ``vectors()`` answers from a local copy of the vectors this
adapter wrote or read (convmem's unit ids name fixed text within a generation,
so a unit's vector never changes under it) and asks the store for the rest when
the store can return vectors. The copy costs ``4 * dimension`` bytes per unit in
this process, what a `FaissIndex` would; ``cache_vectors=False`` drops it, and
then every ``vectors()`` call reads the store.

Thread-safe: one lock per adapter serializes its calls. Failures of the store
are raised as `StoreError`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from hashlib import sha256
from typing import Any, TypeVar

import numpy as np

from .._errors import ConfigError, ConvMemError, StoreError
from .._stores.base import validate_id
from .index_scope import IndexScope, check_namespace, generation_token, scope_key
from .vector_rows import decode_vector, encode_vector, stored_vector, unit_ids, unit_rows

__all__ = [
    "GENERATION_KEY",
    "SCOPE_KEY",
    "SESSION_KEY",
    "UNIT_KEY",
    "USER_KEY",
    "VECTOR_KEY",
    "StoreBackedIndex",
    "decode_vector",
    "encode_vector",
    "legacy_session_key",
    "stored_vector",
]

logger = logging.getLogger("convmem")

SCOPE_KEY = "convmem_scope"
GENERATION_KEY = "convmem_generation"
SESSION_KEY = "convmem_session"
USER_KEY = "convmem_user"
UNIT_KEY = "convmem_unit"
VECTOR_KEY = "convmem_vector"

_Index = TypeVar("_Index", bound="StoreBackedIndex")


def legacy_session_key(session_id: str) -> str:
    """The key convmem 0.1 put in node ids: a hash of the session id alone, shared by every tenant."""
    return sha256(session_id.encode("utf-8")).hexdigest()[:32]


class StoreBackedIndex:
    """A `VectorIndex` over an outside vector store: ids, local vectors, input checks, scope walls.

    A subclass adapts one framework's stores. It sets ``framework`` (the
    prefix of `kind`), checks the store, calls ``super().__init__`` (which
    checks the scope and dimension), prepares what its methods need (the search
    filter from `match`, rebuilt in `_scope_changed`) and ends with
    ``self._open()``, which reads the scope's existing ids through `_list` and
    deletes entries of other generations and of convmem 0.1. It talks to the
    store only through these methods, each called under the adapter's lock with
    validated, normalized input; any exception they raise (other than a
    `ConvMemError`) reaches the caller as a `StoreError` naming the action:

    - `_write(units, matrix)`: store unit-length float32 rows under
      ``node_id(unit)``, with the metadata `metadata(unit)`;
    - `_delete(node_ids)`: delete those nodes;
    - `_query(vector, fetch_k)`: nearest nodes matching `match` as
      (node id, store score, stored vector or None);
    - `_fetch(units)`: stored vectors of units, ``{}`` when the store cannot return them;
    - `_list()`: every node of the scope, any generation (node id -> vector or
      None), None when the store cannot list;
    - `_delete_scope()`: delete every node of the scope, any generation;
    - `_delete_legacy()`: delete convmem 0.1's nodes of the session id, returning
      how many (0 when the store cannot find them).

    `factory` makes an ``index_factory`` for `Recall` from a store and options.
    """

    framework = ""

    def __init__(
        self,
        vector_store: Any,
        *,
        namespace: str,
        session_id: str,
        dimension: int,
        user_id: str | None = None,
        generation: str | None = None,
        score_to_similarity: Callable[[float], float] | None,
        cache_vectors: bool,
    ) -> None:
        check_namespace(namespace)
        validate_id(session_id)
        if user_id is not None:
            validate_id(user_id, "user_id")
        if generation is not None and (not isinstance(generation, str) or not generation):
            raise ConfigError(f"generation must be a non-empty str or None, got {generation!r:.60}")
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension <= 0:
            raise ConfigError(f"dimension must be a positive int, got {dimension!r}")
        if score_to_similarity is not None and not callable(score_to_similarity):
            raise ConfigError(
                f"score_to_similarity must be a function of the store's score, got {score_to_similarity!r}"
            )
        self._store = vector_store
        self._namespace = namespace
        self._session_id = session_id
        self._user_id = user_id
        self._key = scope_key(namespace, session_id)
        self._generation = generation_token(generation)
        self._dimension = dimension
        self._score_to_similarity = score_to_similarity
        self._cache_vectors = bool(cache_vectors)
        self._lock = threading.RLock()
        self._ids: set[int] = set()
        self._vectors: dict[int, np.ndarray] = {}

    @classmethod
    def factory(cls: type[_Index], vector_store: Any, **options: Any) -> Callable[[IndexScope], _Index]:
        """An ``index_factory`` for `Recall`: one adapter over `vector_store` per scope.

        `options` are the adapter's other keyword arguments (``cache_vectors``, ...).

        Example::

            recall = Recall(embedder, index_factory=LlamaIndexVectorIndex.factory(shared))
        """
        reserved = sorted(set(options) & {"namespace", "session_id", "user_id", "generation", "dimension"})
        if reserved:
            raise ConfigError(
                f"{cls.__name__}.factory takes the store's options only; {', '.join(reserved)} "
                "come from the IndexScope Recall passes (use Recall(namespace=...) to name the tenant)"
            )

        def new_index(scope: IndexScope) -> _Index:
            if not isinstance(scope, IndexScope):
                raise ConfigError(
                    f"{cls.__name__}.factory(...) makes an index from the IndexScope Recall passes, "
                    f"got {type(scope).__name__}: {scope!r:.80}"
                )
            return cls(vector_store, **scope.arguments(), **options)

        return new_index

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({type(self._store).__name__}, session_id={self._session_id!r}, "
            f"dimension={self._dimension}, vectors={len(self)})"
        )

    # -- inspection --------------------------------------------------------------

    @property
    def vector_store(self) -> Any:
        """The framework store the vectors live in."""
        return self._store

    @property
    def namespace(self) -> str:
        """The tenant: the namespace of the store the session lives in."""
        return self._namespace

    @property
    def session_id(self) -> str:
        """The session whose messages the vectors stand for."""
        return self._session_id

    @property
    def user_id(self) -> str | None:
        """The session's user, stored with each vector; ``None`` for a session without one."""
        return self._user_id

    @property
    def generation(self) -> str | None:
        """The log generation whose vectors this adapter reads and writes."""
        return None if self._generation == generation_token(None) else self._generation

    @property
    def dimension(self) -> int:
        """The length of every vector the index holds and searches with."""
        return self._dimension

    @property
    def kind(self) -> str:
        """The framework and store class, e.g. ``"llamaindex:SimpleVectorStore"``."""
        return f"{self.framework}:{type(self._store).__name__}"

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, unit_id: object) -> bool:
        return unit_id in self._ids

    def ids(self) -> set[int]:
        """The ids known here: written by this adapter, listed by `refresh`, or seen in a search."""
        with self._lock:
            return set(self._ids)

    @property
    def scope_key(self) -> str:
        """The key of the namespace and session that starts every node id (``convmem_scope``)."""
        return self._key

    def node_id(self, unit_id: int) -> str:
        """The store's id for one of this scope's units at the current generation."""
        return f"{self._key}:{self._generation}:{int(unit_id)}"

    def match(self) -> dict[str, str]:
        """The metadata every node of this scope and generation has, and a search filters on."""
        return {SCOPE_KEY: self._key, GENERATION_KEY: self._generation}

    def metadata(self, unit: int) -> dict[str, Any]:
        """What one unit's node carries besides its vector."""
        metadata: dict[str, Any] = {**self.match(), SESSION_KEY: self._session_id, UNIT_KEY: unit}
        if self._user_id is not None:
            metadata[USER_KEY] = self._user_id
        return metadata

    def _parse(self, node_id: object) -> tuple[str, int] | None:
        """(generation, unit) of one of this scope's node ids; None for anything else."""
        if not isinstance(node_id, str):
            return None
        key, _, rest = node_id.partition(":")
        generation, _, unit = rest.rpartition(":")
        if key != self._key or not generation:
            return None
        try:
            return generation, int(unit)
        except ValueError:
            return None

    def _unit_of(self, node_id: object) -> int | None:
        """The unit id inside one of this scope's node ids at the current generation; None otherwise."""
        parsed = self._parse(node_id)
        return parsed[1] if parsed is not None and parsed[0] == self._generation else None

    def _matches(self, metadata: object) -> bool:
        """Whether a hit's metadata (when the store returned it) names this scope and generation."""
        if not isinstance(metadata, dict):
            return True  # judged by its node id alone
        return all(metadata.get(key, value) == value for key, value in self.match().items())

    def bytes_per_vector(self) -> float:
        """Bytes one unit costs: the float32 vector and node id in the store, plus the local copy."""
        stored = 4 * self._dimension + len(self.node_id(0)) + 8 + self._extra_bytes_per_vector()
        return float(stored + (4 * self._dimension if self._cache_vectors else 0))

    def _extra_bytes_per_vector(self) -> int:
        return 0

    # -- writing -----------------------------------------------------------------

    def add(self, ids: Iterable[int], vectors: np.ndarray) -> None:
        """Add vectors (normalized here); an id already present is replaced."""
        units = unit_ids(ids)
        matrix = (
            unit_rows(vectors, self._dimension, "vectors")
            if np.size(vectors)
            else np.zeros((0, self._dimension), dtype=np.float32)
        )
        if len(units) != len(matrix):
            raise ConfigError(f"add got {len(units)} ids for {len(matrix)} vectors")
        if not units:
            return
        if len(set(units)) != len(units):
            raise ConfigError("add got the same id twice in one call")
        with self._lock:
            present = [u for u in units if u in self._ids]
            if present:
                # Not every store upserts (community FAISS refuses an existing id).
                with self._calling("replace units"):
                    self._delete([self.node_id(u) for u in present])
            with self._calling("add units"):
                self._write(units, matrix)
            self._ids.update(units)
            if self._cache_vectors:
                self._vectors.update(zip(units, matrix, strict=True))

    def remove(self, ids: Iterable[int]) -> None:
        """Remove ids from the store (ids it does not hold are ignored)."""
        units = unit_ids(ids)
        if not units:
            return
        with self._lock:
            self._delete_known(
                [self.node_id(u) for u in dict.fromkeys(units)], {u for u in units if u in self._ids}
            )
            self._ids.difference_update(units)
            for unit in units:
                self._vectors.pop(unit, None)

    def _delete_known(self, node_ids: list[str], known: set[int]) -> None:
        """Delete `node_ids`, of which the units `known` are certainly in the store."""
        try:
            # Unknown ids too: another process may have written them.
            self._delete(node_ids)
        except Exception as exc:
            if len(known) == len(node_ids):
                if isinstance(exc, ConvMemError):
                    raise
                raise self._failure("remove units", exc) from exc
            # Some stores refuse to delete ids they do not hold; delete the ones we know.
            if known:
                with self._calling("remove units"):
                    self._delete([self.node_id(u) for u in sorted(known)])

    def clear(self) -> None:
        """Delete every unit of this scope from the store, of every generation and process."""
        with self._lock, self._calling("delete the session"):
            self._delete_scope()
            self._ids.clear()
            self._vectors.clear()

    def refresh(self) -> int:
        """Re-read this scope's ids (and vectors, when returned) from the store; returns the count.

        Entries of other generations found on the way are deleted. Raises `ConfigError`
        when the store cannot list a session's units.
        """
        with self._lock, self._calling("list the session's units"):
            listed = self._list()
            if listed is None:
                raise ConfigError(
                    f"{self.kind} cannot list a session's units, so ids() only knows what this "
                    "adapter wrote or found; use a store that can list them to see other writers"
                )
            current: dict[int, np.ndarray | None] = {}
            stale: list[str] = []
            for node_id, vector in listed.items():
                parsed = self._parse(node_id)
                if parsed is None:
                    continue
                if parsed[0] == self._generation:
                    current[parsed[1]] = vector
                else:
                    stale.append(node_id)
            if stale:
                # A forgotten or edited log's vectors: never read again, so nothing should keep them.
                self._delete(stale)
            self._ids = set(current)
            if self._cache_vectors:
                self._vectors = {u: v for u, v in self._vectors.items() if u in self._ids}
                self._vectors.update((u, v) for u, v in current.items() if v is not None)
            return len(self._ids)

    def _open(self) -> None:
        """Read the scope's ids at creation (so units other processes wrote are not embedded
        again), deleting entries of other generations and convmem 0.1's."""
        try:
            self.refresh()
        except ConfigError:
            pass  # the store cannot list: ids() starts with what this adapter writes
        except StoreError as exc:
            logger.warning("%s; starting with no known ids (call refresh() later)", exc)
        try:
            with self._lock:
                legacy = self._delete_legacy()
        except Exception as exc:  # they are never read: deleting them is housekeeping
            logger.warning(
                "%s could not delete convmem 0.1 vectors of session %r: %s", self.kind, self._session_id, exc
            )
            return
        if legacy:
            logger.warning(
                "%s held %d vectors of session %r written by convmem 0.1 without a tenant or log "
                "generation; they were deleted and recall embeds the session again from its log",
                self.kind,
                legacy,
                self._session_id,
            )

    def follow_generation(self, generation: str | None) -> None:
        """Serve the log `generation` from now on; `Recall` calls it once its mirror holds that log.

        Nothing happens when it is the generation already followed. Otherwise what
        this adapter holds (what the mirror kept: units whose text did not change) is
        written under the new generation, and the entries of the old one are deleted.
        A unit whose vector can be read neither here nor from the store is dropped
        (recall finds it by its words until the session is indexed again).
        """
        token = generation_token(generation)
        with self._lock:
            if token == self._generation:
                return
            units = sorted(self._ids)
            kept = self.vectors(units) if units else {}
            old = [self.node_id(u) for u in units]
            self._generation = token
            self._scope_changed()
            self._ids.clear()
            self._vectors.clear()
            lost = len(units) - len(kept)
            if lost:
                logger.warning(
                    "%d vectors of session %r could not be read back to move them to its new log; "
                    "they are dropped",
                    lost,
                    self._session_id,
                )
            if kept:
                ordered = sorted(kept)
                self.add(ordered, np.stack([kept[u] for u in ordered]))
            if old:
                with self._calling("delete the vectors of an older log"):
                    self._delete_stale(old)

    def _delete_stale(self, old: list[str]) -> None:
        """Delete another generation's entries: every one on a store that can list, else `old`."""
        listed = self._list()
        if listed is not None:
            stale = [n for n in listed if (p := self._parse(n)) is not None and p[0] != self._generation]
        else:
            stale = old
        if stale:
            with contextlib.suppress(Exception):  # a store that refuses unknown ids: they are gone
                self._delete(stale)

    def _scope_changed(self) -> None:
        """Rebuild what depends on the generation (the search filter); subclasses override."""

    # -- reading -----------------------------------------------------------------

    def search(self, query: np.ndarray, k: int, *, exclude: Iterable[int] = ()) -> list[tuple[int, float]]:
        """The `k` nearest (id, cosine similarity) pairs of this scope, best first, skipping `exclude`."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise ConfigError(f"k must be an int, got {k!r}")
        vector = unit_rows(query, self._dimension, "the query vector")[0]
        if k <= 0:
            return []
        excluded = set(unit_ids(exclude))
        with self._lock, self._calling("search"):
            hits = self._query(vector, int(k) + len(excluded))
            found: dict[int, float] = {}
            for node_id, score, stored in hits:
                unit = self._unit_of(node_id)
                if unit is None or unit in excluded or unit in found:
                    continue
                if stored is None:
                    stored = self._vectors.get(unit)
                elif self._cache_vectors:
                    self._vectors[unit] = stored
                found[unit] = float(stored @ vector) if stored is not None else self._similarity(score)
                self._ids.add(unit)
        ranked = sorted(found.items(), key=lambda pair: -pair[1])
        return ranked[: int(k)]

    def _similarity(self, score: float | None) -> float:
        if score is None:
            raise StoreError(f"{self.kind} returned a hit without a score or a vector")
        return float(score) if self._score_to_similarity is None else float(self._score_to_similarity(score))

    def vectors(self, ids: Iterable[int]) -> dict[int, np.ndarray]:
        """The stored (normalized) vectors of the ids that are present."""
        units = list(dict.fromkeys(unit_ids(ids)))
        with self._lock:
            out = {u: self._vectors[u].copy() for u in units if u in self._ids and u in self._vectors}
            missing = [u for u in units if u in self._ids and u not in out]
            if missing:
                with self._calling("read vectors"):
                    fetched = self._fetch(missing)
                for unit, vector in fetched.items():
                    if unit in self._ids:
                        out[unit] = vector.copy()
                        if self._cache_vectors:
                            self._vectors[unit] = vector
        return out

    # -- framework edge ----------------------------------------------------------

    def _write(self, units: list[int], matrix: np.ndarray) -> None:
        raise NotImplementedError

    def _delete(self, node_ids: list[str]) -> None:
        raise NotImplementedError

    def _query(self, vector: np.ndarray, fetch_k: int) -> list[tuple[str, float | None, np.ndarray | None]]:
        """(node id, store score, stored vector if the store returned it) of the nearest units."""
        raise NotImplementedError

    def _fetch(self, units: list[int]) -> dict[int, np.ndarray]:
        raise NotImplementedError

    def _list(self) -> dict[str, np.ndarray | None] | None:
        """Every node of this scope, any generation (with its vector when known), or None if the
        store cannot list."""
        raise NotImplementedError

    def _delete_scope(self) -> None:
        raise NotImplementedError

    def _delete_legacy(self) -> int:
        return 0

    # -- errors ------------------------------------------------------------------

    def _failure(self, action: str, exc: BaseException) -> StoreError:
        return StoreError(
            f"{self.kind} could not {action} for session {self._session_id!r}: {type(exc).__name__}: {exc}"
        )

    @contextlib.contextmanager
    def _calling(self, action: str) -> Iterator[None]:
        try:
            yield
        except ConvMemError:
            raise
        except Exception as exc:
            raise self._failure(action, exc) from exc

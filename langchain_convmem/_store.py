"""`ConvMemStore`: a user's convmem memory as a LangGraph `BaseStore`.

An agent built with ``create_agent(..., store=...)`` or a graph compiled with
``store=`` reads long-term memory through the store API (``runtime.store``,
``get_store()``). `ConvMemStore` shows what convmem knows about a user there,
under two namespaces it answers itself, both below the reserved first label
``"convmem"`` (`ConvMemStore.RESERVED`):

- ``("convmem", user_id, "facts")`` (`ConvMemStore.facts_namespace`): one item
  per current fact of the user (key: the fact key, ``"<speaker>:<key>"`` for a
  named speaker of a chat of several people; value: ``key``, ``value``,
  ``speaker``, ``session_id``, ``seq``, ``timestamp``, ``source``). Deleting one forgets the
  fact in every session of the user. Facts come from what the user says, so
  writing one is refused.
- ``("convmem", user_id, "conversations")`` (`ConvMemStore.conversations_namespace`):
  the messages of the user's sessions. ``search(..., query=...)`` ranks them by
  convmem recall (by words, or by meaning with an embedder); without a query
  the newest come first. Key: ``"<session_id>:<seq>"``; value: ``text``,
  ``role``, ``session_id``, ``seq``, ``timestamp``. Read-only.

Every namespace that does not start with ``"convmem"`` belongs to the
application (``("users", user_id, "facts")``, ``("memories", user_id)``, ...)
and lives in an inner `BaseStore` (LangGraph's ``InMemoryStore`` by default,
``index=`` for its vector search), so the whole store contract holds for it,
and no prefix an application uses ever reaches convmem's items. Nothing else
may be written under ``"convmem"``. A search or listing whose prefix covers a
user's convmem namespaces (``("convmem", user_id)`` or longer) merges what
the inner store holds there (nothing) with them: by score when there is a
query (fact scores are the share of query words a fact names, conversation
scores recall's), else facts, then messages.

The convmem namespaces appear only for a prefix that names the user: the store
never enumerates users, and a user id never reaches another user's sessions
(ids are compared exactly, so ``"Alice"`` is not ``"alice"``). LangGraph
refuses a namespace label with a ``.``, so a user id with one cannot be
addressed here.
"""

from __future__ import annotations

import asyncio
import heapq
import os
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from convmem import (
    ApproximateCounter,
    ConfigError,
    Fact,
    InvalidSessionIdError,
    Message,
    SQLiteStore,
    Store,
    forget_user,
)
from convmem.integration import UserFacts, check_int, store_from_options, tokenize, validate_id

from ._embeddings import as_embedder

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from convmem import Embedder, Recall

__all__ = ["ConvMemStore"]

RESERVED = "convmem"
"""The first namespace label of convmem's own items; an application may use any other."""
USERS = "users"
_Kind = Literal["facts", "conversations"]
FACTS: _Kind = "facts"
CONVERSATIONS: _Kind = "conversations"
_KINDS: tuple[_Kind, ...] = (FACTS, CONVERSATIONS)

# Recall fits its answer to a token cap; the store pages by item count instead, so the
# cap is only a bound on how much one search renders.
_RECALL_MAX_TOKENS = 200_000


def _user_of(label: str) -> str | None:
    """`label` as a convmem user id, or None if no user can have it (nothing to show)."""
    try:
        return validate_id(label, "user_id")
    except InvalidSessionIdError:
        return None


def _virtual(namespace: tuple[str, ...]) -> tuple[str, _Kind] | None:
    """(user id, kind) if `namespace` is one of convmem's own namespaces."""
    if len(namespace) == 3 and namespace[0] == RESERVED and namespace[2] in _KINDS:
        user_id = _user_of(namespace[1])
        if user_id is not None:
            return user_id, FACTS if namespace[2] == FACTS else CONVERSATIONS
    return None


def _covered(prefix: tuple[str, ...]) -> list[tuple[str, _Kind]]:
    """convmem's namespaces a search with `prefix` reaches (those of the one user it names)."""
    if len(prefix) < 2 or prefix[0] != RESERVED or len(prefix) > 3:
        return []
    user_id = _user_of(prefix[1])
    if user_id is None:
        return []
    return [(user_id, kind) for kind in _KINDS if len(prefix) == 2 or prefix[2] == kind]


def _named_users(conditions: Sequence[MatchCondition]) -> set[str]:
    """The users a listing's prefix conditions name below ``"convmem"`` (no wildcard in their place)."""
    users = set()
    for condition in conditions:
        path = tuple(condition.path)
        if condition.match_type == "prefix" and len(path) >= 2 and path[0] == RESERVED and path[1] != "*":
            user_id = _user_of(path[1])
            if user_id is not None:
                users.add(user_id)
    return users


def _matches_condition(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    if condition.match_type not in ("prefix", "suffix"):
        raise ValueError(f"match_type must be 'prefix' or 'suffix', got {condition.match_type!r}")
    # a path may be shorter than the namespace: compared from its start (prefix) or end (suffix)
    if condition.match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    else:
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    return all(wanted == "*" or label == wanted for label, wanted in pairs)


def _matches_filter(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    """The store contract's filter: exact values, nested dicts, and $eq/$ne/$gt/$gte/$lt/$lte."""
    return not filter or all(_compare(value.get(key), wanted) for key, wanted in filter.items())


def _compare(value: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(key.startswith("$") for key in wanted):
            return all(_apply_operator(value, op, operand) for op, operand in wanted.items())
        return isinstance(value, dict) and all(_compare(value.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(value, (list, tuple))
            and len(value) == len(wanted)
            and all(_compare(v, w) for v, w in zip(value, wanted, strict=True))
        )
    return bool(value == wanted)


def _apply_operator(value: Any, operator: str, operand: Any) -> bool:
    if operator == "$eq":
        return bool(value == operand)
    if operator == "$ne":
        return bool(value != operand)
    if operator in ("$gt", "$gte", "$lt", "$lte"):
        if value is None:
            return False
        left, right = float(value), float(operand)
        return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[
            operator
        ]
    raise ValueError(f"unsupported filter operator {operator!r}; use $eq, $ne, $gt, $gte, $lt or $lte")


def _when(timestamp: float | None) -> datetime:
    return datetime.fromtimestamp(timestamp or 0.0, tz=timezone.utc)


def _fact_item_key(fact: Fact) -> str:
    """The item key of a fact: its key, or ``"<speaker>:<key>"`` for a named speaker of a
    chat of several people, so two people's facts of one key are two items."""
    return fact.key if fact.speaker is None else f"{fact.speaker}:{fact.key}"


def _fact_item(namespace: tuple[str, ...], fact: Fact, score: float | None) -> SearchItem:
    value = {
        "key": fact.key,
        "value": fact.value,
        "speaker": fact.speaker,
        "session_id": fact.session_id,
        "seq": fact.seq,
        "timestamp": fact.timestamp,
        "source": fact.source,
    }
    when = _when(fact.timestamp)
    return SearchItem(namespace, _fact_item_key(fact), value, when, when, score)


def _message_key(session_id: str, seq: int | None) -> str:
    return f"{session_id}:{seq}"


def _parse_message_key(key: str) -> tuple[str, int] | None:
    """(session id, seq) of the item key `_message_key` writes, or None for any other string:
    an item is found by its exact key, so ``"s:01"`` or ``"s:١"`` (another spelling of 1) is none."""
    session_id, _, seq_text = key.rpartition(":")
    if not session_id or not (seq_text.isascii() and seq_text.isdigit()):
        return None
    seq = int(seq_text)
    return (session_id, seq) if _message_key(session_id, seq) == key else None


def _message_item(
    namespace: tuple[str, ...], session_id: str, message: Message, score: float | None
) -> SearchItem:
    value = {
        "text": message.text,
        "role": getattr(message.role, "value", message.role),
        "session_id": session_id,
        "seq": message.seq,
        "timestamp": message.timestamp,
    }
    when = _when(message.timestamp)
    return SearchItem(namespace, _message_key(session_id, message.seq), value, when, when, score)


def _as_item(item: SearchItem) -> Item:
    return Item(
        value=item.value,
        key=item.key,
        namespace=item.namespace,
        created_at=item.created_at,
        updated_at=item.updated_at,
    )


def _ranked(items: list[SearchItem], query: str | None) -> list[SearchItem]:
    """Items of several sources in one order: by score when there is a query (unscored last)."""
    if not query:
        return items
    return sorted(items, key=lambda item: (item.score is None, -(item.score or 0.0)))


class ConvMemStore(BaseStore):
    """A LangGraph `BaseStore` over convmem: a user's facts and past conversations,
    plus any items the application stores.

    Args:
        store: The convmem `Store` the memories write to (the one given to
            `ConversationMemory`, `ConvMemChatMessageHistory`, `ConvMemNode`, ...).
        path: Or a SQLite file to open as that store (not both; the same object as
            every wrapper's ``path=`` on that file). With neither, a new in-memory store.
        inner: Where every other namespace lives; default LangGraph's ``InMemoryStore``.
        index: Vector search config for the default inner store (not with ``inner``).
        embedder: A convmem `Embedder` or a LangChain ``Embeddings`` (wrapped in
            `LangChainEmbedder`) to search conversations by meaning (default: by words).
        recall: Or a configured `convmem.Recall` (not with ``embedder``).

    Example::

        store = ConvMemStore(convmem_store)
        store.search(("convmem", "alice", "facts"))
        store.search(ConvMemStore.conversations_namespace("alice"), query="dog's name", limit=3)
        store.put(("users", "alice", "facts"), "tip-1", {"text": "likes short answers"})  # the app's own
    """

    RESERVED = RESERVED
    """The first label of convmem's own namespaces (``"convmem"``); writes under it are refused."""

    @staticmethod
    def facts_namespace(user_id: str) -> tuple[str, str, str]:
        """``("convmem", user_id, "facts")``: the user's current facts."""
        return (RESERVED, user_id, FACTS)

    @staticmethod
    def conversations_namespace(user_id: str) -> tuple[str, str, str]:
        """``("convmem", user_id, "conversations")``: the messages of the user's sessions."""
        return (RESERVED, user_id, CONVERSATIONS)

    def __init__(
        self,
        store: Store | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
        inner: BaseStore | None = None,
        index: IndexConfig | None = None,
        embedder: Embedder | Embeddings | None = None,
        recall: Recall | None = None,
    ) -> None:
        if inner is not None and index is not None:
            raise ConfigError("index= configures the default inner store; with inner= configure that store")
        if recall is not None and embedder is not None:
            raise ConfigError("pass embedder= (recall with default settings) or recall=, not both")
        if inner is not None and not isinstance(inner, BaseStore):
            raise ConfigError(f"inner must be a langgraph BaseStore, got {type(inner).__name__}")
        recall_embedder = None if embedder is None else as_embedder(embedder)
        store = store_from_options(path, store)
        self.store: Store = store
        if inner is None:
            from langgraph.store.memory import InMemoryStore

            inner = InMemoryStore(index=index)
        self.inner: BaseStore = inner
        # Generic items live in `inner`, so its TTL support is this store's.
        self.supports_ttl = inner.supports_ttl
        self.ttl_config = inner.ttl_config
        if recall is None:
            from convmem import Recall as DefaultRecall

            # Vectors next to a SQLite file, where the memories with this embedder keep theirs.
            index_dir = (
                Path(f"{store.path}.vectors")
                if recall_embedder is not None and isinstance(store, SQLiteStore)
                else None
            )
            recall = DefaultRecall(recall_embedder, index_dir=index_dir)
        self.recall: Recall = recall
        self._counter = ApproximateCounter()

    @property
    def index_config(self) -> IndexConfig | None:
        """The inner store's vector search config (None without one)."""
        config: IndexConfig | None = getattr(self.inner, "index_config", None)
        return config

    def __repr__(self) -> str:
        return f"ConvMemStore(store={self.store!r}, inner={type(self.inner).__name__})"

    # -- the batch: split, run each part where it lives, put results back in order ----

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run `ops` in order of results: convmem's namespaces here, the rest in `inner`."""
        plan = _Plan(list(ops))
        inner_results = self.inner.batch(plan.inner_ops) if plan.inner_ops else []
        return plan.assemble(inner_results, self._run_virtual(plan))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async `batch`: convmem's part runs in a worker thread, `inner` through its ``abatch``."""
        plan = _Plan(list(ops))
        virtual = asyncio.to_thread(self._run_virtual, plan)
        if plan.inner_ops:
            inner_results, virtual_results = await asyncio.gather(self.inner.abatch(plan.inner_ops), virtual)
        else:
            inner_results, virtual_results = [], await virtual
        return plan.assemble(inner_results, virtual_results)

    def _run_virtual(self, plan: _Plan) -> dict[int, Any]:
        results: dict[int, Any] = {}
        for index, op in plan.virtual_ops:
            if isinstance(op, GetOp):
                found = _virtual(op.namespace)
                assert found is not None
                results[index] = self._get(op.namespace, *found, op.key)
            elif isinstance(op, PutOp):
                found = _virtual(op.namespace)
                assert found is not None
                self._forget_fact(found[0], op.key)
                results[index] = None
            elif isinstance(op, SearchOp):
                wanted = op.offset + op.limit
                results[index] = [
                    item
                    for user_id, kind in _covered(op.namespace_prefix)
                    for item in self._search(user_id, kind, op.query, op.filter, wanted)
                ]
            elif isinstance(op, ListNamespacesOp):
                results[index] = self._namespaces(op)
        return results

    # -- convmem's namespaces --------------------------------------------------------

    def _sessions(self, user_id: str) -> list[str]:
        return list(self.store.sessions(user_id=user_id))

    def _facts(self, user_id: str) -> list[Fact]:
        sessions = self._sessions(user_id)
        if not sessions:
            return []
        return UserFacts(self.store, user_id, sessions[0]).book().current()

    def _forget_fact(self, user_id: str, key: str) -> None:
        sessions = self._sessions(user_id)
        if sessions:
            # Found by its item key, which names the speaker (a fact key may hold ":" too).
            found = [fact for fact in self._facts(user_id) if _fact_item_key(fact) == key]
            speaker, fact_key = (found[0].speaker, found[0].key) if found else (None, key)
            UserFacts(self.store, user_id, sessions[0]).forget(fact_key, speaker)

    def _get(self, namespace: tuple[str, ...], user_id: str, kind: _Kind, key: str) -> Item | None:
        if kind == FACTS:
            for fact in self._facts(user_id):
                if _fact_item_key(fact) == key:
                    return _as_item(_fact_item(namespace, fact, None))
            return None
        parsed = _parse_message_key(key)
        if parsed is None or parsed[0] not in self._sessions(user_id):
            return None
        session_id, seq = parsed
        messages = self.store.get(session_id, [seq])
        return _as_item(_message_item(namespace, session_id, messages[0], None)) if messages else None

    def _search(
        self, user_id: str, kind: _Kind, query: str | None, filter: dict[str, Any] | None, wanted: int
    ) -> list[SearchItem]:
        if wanted <= 0:
            return []
        namespace = (RESERVED, user_id, kind)
        if kind == FACTS:
            items = [_fact_item(namespace, fact, None) for fact in self._facts(user_id)]
            if query:
                terms = set(tokenize(query))
                for position, item in enumerate(items):
                    said = set(tokenize(f"{item.value['key'].replace('_', ' ')} {item.value['value']}"))
                    score = len(terms & said) / len(terms) if terms else 0.0
                    items[position] = SearchItem(
                        item.namespace, item.key, item.value, item.created_at, item.updated_at, score
                    )
                items = _ranked(items, query)
            return [item for item in items if _matches_filter(item.value, filter)][:wanted]
        sessions = self._sessions(user_id)
        if not sessions:
            return []
        if query:
            return self._recalled(namespace, sessions, query, filter, wanted)
        return self._newest(namespace, sessions, filter, wanted)

    def _recalled(
        self,
        namespace: tuple[str, ...],
        sessions: list[str],
        query: str,
        filter: dict[str, Any] | None,
        wanted: int,
    ) -> list[SearchItem]:
        result = self.recall.search(
            sessions[0],
            query,
            store=self.store,
            max_tokens=_RECALL_MAX_TOKENS,
            counter=self._counter,
            other_sessions=sessions[1:],
        )
        # A recalled item may be a question with its answer: each message is an item, at its
        # passage's score, the best passage first.
        scored: dict[tuple[str, int], float] = {}
        for recalled in sorted(result.items, key=lambda item: -item.score):
            session_id = recalled.session_id or sessions[0]
            for seq in recalled.seqs:
                scored.setdefault((session_id, seq), recalled.score)
        by_session: dict[str, list[int]] = {}
        for session_id, seq in scored:
            by_session.setdefault(session_id, []).append(seq)
        items = [
            _message_item(namespace, session_id, message, scored[(session_id, message.seq or 0)])
            for session_id, seqs in by_session.items()
            for message in self.store.get(session_id, seqs)
        ]
        items = [item for item in _ranked(items, query) if _matches_filter(item.value, filter)]
        return items[:wanted]

    def _newest(
        self, namespace: tuple[str, ...], sessions: list[str], filter: dict[str, Any] | None, wanted: int
    ) -> list[SearchItem]:
        """The user's messages newest first (a filter reads whole logs; without one, each log's tail)."""
        items: list[SearchItem] = []
        for session_id in sessions:
            messages = self.store.messages(session_id) if filter else self.store.tail(session_id, wanted)
            items.extend(
                item
                for message in messages
                if _matches_filter(
                    (item := _message_item(namespace, session_id, message, None)).value, filter
                )
            )
        # A question and its answer often share a timestamp (imports, add_turn): then the later
        # seq is the newer, compared as a number ("s:10" after "s:9"); the session id only makes
        # the order total, so pages never overlap.
        return heapq.nlargest(
            wanted,
            items,
            key=lambda item: (item.value["timestamp"], item.value["seq"], item.value["session_id"]),
        )

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        conditions = tuple(op.match_conditions or ())
        found = set()
        for user_id in _named_users(conditions):
            if not self._sessions(user_id):
                continue
            for kind in _KINDS:
                namespace = (RESERVED, user_id, kind)
                if all(_matches_condition(condition, namespace) for condition in conditions):
                    found.add(namespace if op.max_depth is None else namespace[: op.max_depth])
        return sorted(found)

    # -- convenience -------------------------------------------------------------------

    def forget_user(self, user_id: str) -> list[str]:
        """Forget everything of `user_id`: their convmem sessions (logs, facts, vectors) and
        the inner store's items under ``("users", user_id, ...)``; return the sessions deleted."""
        user_id = validate_id(user_id, "user_id")
        deleted = forget_user(self.store, user_id, recall=self.recall)
        for namespace in self.inner.list_namespaces(prefix=(USERS, user_id), limit=1_000_000):
            while items := self.inner.search(namespace, limit=1000):
                self.inner.batch([PutOp(item.namespace, item.key, None) for item in items])
        return deleted

    async def aforget_user(self, user_id: str) -> list[str]:
        """Async `forget_user`."""
        user_id = validate_id(user_id, "user_id")
        deleted = await asyncio.to_thread(forget_user, self.store, user_id, recall=self.recall)
        for namespace in await self.inner.alist_namespaces(prefix=(USERS, user_id), limit=1_000_000):
            while items := await self.inner.asearch(namespace, limit=1000):
                await self.inner.abatch([PutOp(item.namespace, item.key, None) for item in items])
        return deleted


class _Plan:
    """Where each op of a batch runs, checked before any runs (a refused write leaves
    the batch undone), and how the parts' results go back in order."""

    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops
        self.inner_ops: list[Op] = []
        self.inner_index: dict[int, int] = {}
        self.virtual_ops: list[tuple[int, Op]] = []
        for index, op in enumerate(ops):
            if not isinstance(op, (GetOp, PutOp, SearchOp, ListNamespacesOp)):
                raise ValueError(f"unknown store operation {type(op).__name__}")
            validate_op_namespace(op)
            if isinstance(op, (SearchOp, ListNamespacesOp)):
                check_int("limit", op.limit, low=0)  # a negative one cut pages from the end
                check_int("offset", op.offset, low=0)
            if isinstance(op, PutOp) and op.namespace[:1] == (RESERVED,) and _virtual(op.namespace) is None:
                raise ConfigError(
                    f"cannot {'delete from' if op.value is None else 'put into'} {op.namespace!r}: namespaces "
                    f"starting with {RESERVED!r} are reserved for convmem's own items (the user's facts and "
                    f"conversations); store yours under any other first label, e.g. {(USERS, *op.namespace[1:])!r}"
                )
            if isinstance(op, (GetOp, PutOp)) and (found := _virtual(op.namespace)) is not None:
                if isinstance(op, PutOp):
                    _check_write(op, found[1])
                self.virtual_ops.append((index, op))
                continue
            if isinstance(op, SearchOp) and _covered(op.namespace_prefix):
                self.virtual_ops.append((index, op))
                # inner's share of the page: everything up to its end, cut once merged
                op = op._replace(offset=0, limit=max(0, op.offset + op.limit))
            elif isinstance(op, ListNamespacesOp) and _named_users(op.match_conditions or ()):
                self.virtual_ops.append((index, op))
                op = op._replace(offset=0, limit=max(0, op.offset + op.limit))
            self.inner_index[index] = len(self.inner_ops)
            self.inner_ops.append(op)

    def assemble(self, inner_results: list[Result], virtual_results: dict[int, Any]) -> list[Result]:
        results: list[Result] = []
        for index, op in enumerate(self.ops):
            inner: Any = inner_results[self.inner_index[index]] if index in self.inner_index else None
            if index not in virtual_results:
                results.append(inner)
            elif isinstance(op, SearchOp):
                merged = _ranked([*virtual_results[index], *(inner or [])], op.query)
                results.append(merged[op.offset : op.offset + op.limit])
            elif isinstance(op, ListNamespacesOp):
                names = sorted({*virtual_results[index], *(inner or [])})
                results.append(names[op.offset : op.offset + op.limit])
            else:
                results.append(virtual_results[index])
        return results


def _check_write(op: PutOp, kind: _Kind) -> None:
    namespace = op.namespace
    if kind == FACTS and op.value is None:
        return  # forgetting a fact: the user's sessions drop it
    if kind == FACTS:
        raise ConfigError(
            f"cannot put into {namespace!r}: convmem's facts come from what the user says "
            "(delete one to forget it); store facts of your own under a namespace of yours, "
            f"e.g. {(USERS, namespace[1], 'facts')!r}"
        )
    raise ConfigError(
        f"cannot {'delete from' if op.value is None else 'put into'} {namespace!r}: it shows the user's "
        "conversations as convmem logged them (forget them with ConvMemStore.forget_user, or delete "
        "messages through ConversationMemory.delete_messages)"
    )

"""`ConvMemNode`: conversation memory for a LangGraph `StateGraph` chatbot.

A graph with a checkpointer keeps the whole conversation in its ``messages``
state; the model should see the managed context instead (facts, summary,
recall and the recent window within a budget), and convmem should record each
turn with its status. `ConvMemNode.node` wraps the function that calls the
model into a graph node that does both::

    memory = ConvMemNode(path="chat.db")
    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", memory.node(model.invoke))       # or model.ainvoke
    builder.add_edge(START, "chatbot")
    graph = builder.compile(checkpointer=InMemorySaver())
    graph.invoke({"messages": [("user", "Hi, I'm Ana.")]}, {"configurable": {"thread_id": "ana-1"}})

The graph's state is never changed, only read. Each message of it reaches the
log once (see `_state_sync`): messages the log already holds (sent again, or
written by another graph, server or writer) are not stored twice, and nothing
another writer added is ever deleted. A message a node or ``update_state``
removed from this graph's state (``RemoveMessage(id=...)``) is deleted from the
log at the next model call; an emptied or rewritten state (``REMOVE_ALL_MESSAGES``)
leaves the log whole. What this graph's state held is remembered in this
process (a bounded number of threads), so a removal made while the process was
down is not seen.

The question and the steps after it are RUNNING and filed under that question;
the reply completes the turn (or keeps it RUNNING while it asks for tools); a
model call that raises marks it FAILED, until a retry of the node (its
``retry_policy``) or a run resumed in this process answers; a turn this graph's state left
unanswered is CANCELLED when the state's next question arrives.

Needs ``langgraph`` only for the graph itself; this module imports nothing from it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from convmem import (
    ConversationMemory,
    InvalidMessageError,
    InvalidSessionIdError,
    MemoryConfig,
    Store,
    TokenCounter,
    TurnStatus,
)

from ._convert import context_to_langchain
from ._history import ConvMemSessions, check_budget, check_config_keys, check_options
from ._state_sync import Held, HeldEntry, find_logged, fingerprint, held_entry, question_text, sync_input
from ._turns import FailedTurns, append_steps, is_final_answer, is_question, settle_turn

__all__ = ["ConvMemNode"]

# Graph states of one thread remembered at once: two servers (or checkpointers) taking turns
# on a thread each keep their own, and none is mistaken for another.
_STATES_PER_THREAD = 4


@dataclasses.dataclass
class _Prepared:
    memory: ConversationMemory
    held: dict[str, HeldEntry]
    turn: int | None
    model_input: list[BaseMessage]


class _GraphStates:
    """What each graph state of a thread held at its last model call, in this process.

    A state is recognised by the messages it shares with one remembered earlier
    (the one sharing most); a state sharing none is new to this process. Bounded:
    `_STATES_PER_THREAD` per thread, and the least recently used threads beyond
    ``max_threads`` are forgotten.
    """

    def __init__(self, max_threads: int) -> None:
        self._max_threads = max_threads
        self._threads: OrderedDict[str, list[dict[str, HeldEntry]]] = OrderedDict()
        self._lock = threading.Lock()

    def match(self, thread: str, messages: Sequence[BaseMessage]) -> dict[str, HeldEntry]:
        ids = {m.id for m in messages}
        with self._lock:
            states = self._threads.get(thread) or []
            best = max(states, key=lambda held: len(ids & held.keys()), default=None)
            return dict(best) if best is not None and ids & best.keys() else {}

    def remember(self, thread: str, before: Mapping[str, HeldEntry], now: dict[str, HeldEntry]) -> None:
        with self._lock:
            states = self._threads.pop(thread, [])
            states = [held for held in states if not (before and held.keys() == before.keys())]
            states.append(now)
            self._threads[thread] = states[-_STATES_PER_THREAD:]
            while len(self._threads) > self._max_threads:
                self._threads.popitem(last=False)

    def add(self, thread: str, held: dict[str, HeldEntry], message_id: str, entry: HeldEntry) -> None:
        with self._lock:
            held[message_id] = entry


def _open_turn(messages: Sequence[BaseMessage], held: Mapping[str, HeldEntry]) -> int | None:
    """Seq of the newest question the state held that no final answer in the state follows."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        entry = held.get(message.id or "")
        if entry is None or not is_question(message):
            continue
        if any(is_final_answer(m) for m in messages[index + 1 :]):
            return None
        return Held.of(entry).seq
    return None


class ConvMemNode:
    """Builds a `StateGraph` node (or a ``pre_model_hook``) on a convmem memory.

    Args:
        sessions: Where sessions live (`ConvMemSessions`); or build them from
            ``path`` / ``store`` / ``config`` / ``counter``.
        budget: Token budget of the model input (default: ``config.budget``).
        session_id_key: The ``config["configurable"]`` key naming the
            session (default ``thread_id``, the checkpointer's key).
        user_id_key: The key naming the user (optional).
    """

    def __init__(
        self,
        sessions: ConvMemSessions | None = None,
        *,
        budget: int | None = None,
        session_id_key: str = "thread_id",
        user_id_key: str = "user_id",
        path: str | os.PathLike[str] | None = None,
        store: Store | None = None,
        config: MemoryConfig | None = None,
        counter: TokenCounter | None = None,
        **memory_options: Any,
    ) -> None:
        check_options(ConvMemNode.__init__, memory_options)
        self.sessions = ConvMemSessions.from_options(
            sessions, path=path, store=store, config=config, counter=counter, **memory_options
        )
        self.budget = check_budget(budget)
        self.session_id_key, self.user_id_key = check_config_keys(session_id_key, user_id_key)
        self._states = _GraphStates(self.sessions.max_cached_sessions)
        self._failed_turns = FailedTurns()

    def memory(self, config: RunnableConfig | None) -> ConversationMemory:
        """The memory of the session the graph runs for (``config["configurable"]``)."""
        configurable = (config or {}).get("configurable") or {}
        session_id = configurable.get(self.session_id_key)
        if session_id is None or session_id == "":
            raise InvalidSessionIdError(
                f"ConvMemNode found no session id in config['configurable'][{self.session_id_key!r}]; "
                f"invoke the graph with config={{'configurable': {{{self.session_id_key!r}: 'conversation-1'}}}}"
            )
        return self.sessions.memory(str(session_id), configurable.get(self.user_id_key))

    # -- one model call: prepare, call, record ------------------------------------------

    def _sync(self, messages: Sequence[BaseMessage], config: RunnableConfig | None) -> _Prepared:
        memory = self.memory(config)
        before = self._states.match(memory.session_id, messages)
        synced = sync_input(memory, messages, before, _open_turn(messages, before))
        self._states.remember(memory.session_id, before, synced.held)
        return _Prepared(memory, synced.held, synced.turn, [])

    def _prepare(self, state: Mapping[str, Any], config: RunnableConfig | None) -> _Prepared:
        messages: Sequence[BaseMessage] = state["messages"]
        prepared = self._sync(messages, config)
        context = prepared.memory.build_context(question_text(messages), self.budget, include_query=False)
        prepared.model_input = context_to_langchain(context, turn=prepared.turn)
        return prepared

    def _record(self, prepared: _Prepared, reply: BaseMessage) -> None:
        if not isinstance(reply, BaseMessage):
            raise InvalidMessageError(
                f"the model call returned {type(reply).__name__}, not a LangChain message; "
                "return the AIMessage the chat model gave (e.g. model.invoke(messages))"
            )
        if reply.id is None:
            # The graph's state would give it an id of its own; the log must know it by the same one.
            reply.id = str(uuid.uuid4())
        final = is_final_answer(reply)
        self._failed_turns.answered(prepared.memory, prepared.turn)
        [stored] = append_steps(prepared.memory, [reply], turn=prepared.turn, final=final)
        if final:
            settle_turn(prepared.memory, prepared.turn, TurnStatus.COMPLETED)
        entry = held_entry(stored.seq, fingerprint(reply), stored.reply_to_seq)
        self._states.add(prepared.memory.session_id, prepared.held, reply.id, entry)

    def _fail(self, prepared: _Prepared) -> None:
        self._failed_turns.fail(prepared.memory, prepared.turn)

    def model_input(self, state: Mapping[str, Any], config: RunnableConfig | None) -> list[BaseMessage]:
        """Store the state's new messages and return what the model should see now."""
        return self._prepare(state, config).model_input

    async def amodel_input(
        self, state: Mapping[str, Any], config: RunnableConfig | None
    ) -> list[BaseMessage]:
        """Async `model_input`."""
        prepared = await asyncio.to_thread(self._prepare, state, config)
        return prepared.model_input

    def record_reply(
        self, reply: BaseMessage, config: RunnableConfig | None, state: Mapping[str, Any]
    ) -> None:
        """Store the model's reply to the question `state` ends on; one without tool calls
        completes the turn. The state may hold the reply already (a ``post_model_hook``),
        and the log too: a hook that interrupts runs again when the run is resumed."""
        messages: Sequence[BaseMessage] = state["messages"]
        if reply.id is not None and any(m.id == reply.id for m in messages):
            memory = self.memory(config)
            held = self._states.match(memory.session_id, messages)
            # A state this process has seen holds what it recorded; another's is looked up.
            if reply.id in held or (not held and find_logged(memory, [reply])[0] is not None):
                self._sync(messages, config)  # recorded already: only what else changed
                return
        self._record(self._sync([m for m in messages if reply.id is None or m.id != reply.id], config), reply)

    async def arecord_reply(
        self, reply: BaseMessage, config: RunnableConfig | None, state: Mapping[str, Any]
    ) -> None:
        """Async `record_reply`."""
        await asyncio.to_thread(self.record_reply, reply, config, state)

    def node(
        self, call_model: Callable[[list[BaseMessage]], BaseMessage | Awaitable[BaseMessage]]
    ) -> Callable[[Mapping[str, Any], RunnableConfig], Any]:
        """A graph node: managed context in, ``{"messages": [reply]}`` out, the turn recorded.

        `call_model` takes the messages and returns the reply: ``model.invoke``, or an
        async function such as ``model.ainvoke`` (then the node is async, for
        ``graph.ainvoke`` and ``graph.astream``).
        """
        if _is_async(call_model):
            call_async: Callable[[list[BaseMessage]], Awaitable[BaseMessage]] = call_model  # type: ignore[assignment]

            async def achatbot(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
                prepared = await asyncio.to_thread(self._prepare, state, config)
                try:
                    reply = await call_async(prepared.model_input)
                except Exception:
                    await asyncio.to_thread(self._fail, prepared)
                    raise
                await asyncio.to_thread(self._record, prepared, reply)
                return {"messages": [reply]}

            return achatbot

        def chatbot(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
            prepared = self._prepare(state, config)
            try:
                reply = call_model(prepared.model_input)
            except Exception:
                self._fail(prepared)
                raise
            if inspect.isawaitable(reply):
                if inspect.iscoroutine(reply):
                    reply.close()  # never awaited: closing it keeps Python from warning about it
                self._fail(prepared)
                raise TypeError(
                    "the model call returned an awaitable, which a sync node cannot wait for; pass the "
                    "async function itself (node(model.ainvoke), or an `async def`) and run the graph "
                    "with ainvoke/astream"
                )
            self._record(prepared, reply)
            return {"messages": [reply]}

        return chatbot

    def pre_model_hook(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """For ``create_react_agent(pre_model_hook=...)``: the managed context as ``llm_input_messages``
        (the graph's own messages stay whole). Pair it with `post_model_hook` so turns complete."""
        return {"llm_input_messages": self.model_input(state, config)}

    async def apre_model_hook(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """Async `pre_model_hook`."""
        return {"llm_input_messages": await self.amodel_input(state, config)}

    def post_model_hook(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """For ``create_react_agent(post_model_hook=...)``: record the reply the model just gave."""
        messages: Sequence[BaseMessage] = state["messages"]
        if messages and messages[-1].type == "ai":
            self.record_reply(messages[-1], config, state)
        return {}

    async def apost_model_hook(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """Async `post_model_hook`."""
        return await asyncio.to_thread(self.post_model_hook, state, config)


def _is_async(call_model: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(call_model) or inspect.iscoroutinefunction(
        getattr(call_model, "__call__", None)  # noqa: B004 - an object whose __call__ is async
    )

"""`ConvMemMiddleware`: conversation memory for `langchain.agents.create_agent`.

Before every model call the agent's messages are written to the session's log
(those not stored yet) and replaced by the managed context: facts, summary and
recalled turns in a leading system message, then the recent window, with every
tool call kept next to its results. This is the pattern of LangChain's own
``SummarizationMiddleware`` (``RemoveMessage(REMOVE_ALL_MESSAGES)`` followed by
the new list), with convmem deciding what the list holds.

Requires the ``langchain`` package (``pip install "convmem[all]"`` or
``pip install langchain``); without it, creating the middleware raises
`ImportError` saying so.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Annotated, Any

from langchain_core.messages import AIMessage, BaseMessage, RemoveMessage
from typing_extensions import NotRequired

from convmem import (
    ConfigError,
    ConversationMemory,
    InvalidSessionIdError,
    MemoryConfig,
    Store,
    TokenCounter,
    TurnStatus,
)
from convmem.integration import memory_from_options

from ._convert import (
    CONTEXT_MESSAGE_ID,
    MEMORY_MESSAGE_ID,
    latest_human_text,
    state_messages,
)
from ._history import ConvMemSessions, check_budget, check_options
from ._removals import delete_by_ids
from ._turns import record_new_messages, settle_last_turn

__all__ = ["ConvMemMiddleware"]

_INSTALL_HINT = (
    "ConvMemMiddleware needs the 'langchain' package (LangChain v1 agents); install it with "
    "pip install 'langchain>=1.0' (or pip install 'convmem[all]'). The chat history and "
    "the runnable of langchain_convmem need only langchain-core."
)

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
    from langchain.agents.middleware.types import PrivateStateAttr
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    _IMPORT_ERROR: ImportError | None = exc

    class AgentMiddleware:  # type: ignore[no-redef]
        """Stand-in so that importing this module works without ``langchain``."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ImportError(_INSTALL_HINT) from _IMPORT_ERROR

    AgentState = dict  # type: ignore[assignment,misc]
    ModelRequest = ModelResponse = Any  # type: ignore[assignment,misc]
    REMOVE_ALL_MESSAGES = "__remove_all__"
    PrivateStateAttr = None  # type: ignore[assignment]
else:
    _IMPORT_ERROR = None

_STORED_KEY = "convmem_stored"
_IDS_KEY = "convmem_ids"


class ConvMemAgentState(AgentState):
    """The agent state plus how many leading messages are already in the log, and their ids
    (to tell which of them a ``RemoveMessage`` took out)."""

    convmem_stored: NotRequired[Annotated[int, PrivateStateAttr]]
    convmem_ids: NotRequired[Annotated[list[str], PrivateStateAttr]]


class ConvMemMiddleware(AgentMiddleware):
    """Keeps an agent's messages within a token budget, with summary, facts and recall.

    Use it with ``create_agent``::

        from langchain.agents import create_agent

        agent = create_agent(model, tools, middleware=[ConvMemMiddleware(path="chat.db")])
        agent.invoke({"messages": [{"role": "user", "content": "Hi, I'm Ana."}]},
                     config={"configurable": {"thread_id": "ana-1"}})

    The session is ``config["configurable"]["thread_id"]`` (``session_id_key``),
    the user ``config["configurable"]["user_id"]`` (``user_id_key``); pass
    ``memory=`` to pin one `ConversationMemory` instead. The log is the record
    of the conversation, so invoke the agent with the new message only (with or
    without a checkpointer); the agent's ``messages`` state holds the managed
    context, not the whole conversation.

    A message removed from the agent's state (``RemoveMessage(id=...)`` from a
    node, a tool or ``agent.update_state``) is deleted from the memory before
    the next model call, so the context never brings it back;
    ``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` deletes the whole conversation.
    Ids in the state are ``convmem-seq-<seq>`` for messages of the context.

    Turn status: the new user message and the steps that follow it are stored
    as RUNNING; the final answer marks the turn COMPLETED; a model call that
    raises marks it FAILED; a turn left unfinished when the next user message
    arrives (e.g. an interrupted run) is marked CANCELLED.

    Args:
        sessions: Where sessions live (`ConvMemSessions`); or build them from
            ``path`` / ``store`` / ``config`` / ``counter``.
        memory: One fixed memory for every call (then no session id is read).
        budget: Token budget of the context (default: ``config.budget``); leave
            room for the agent's system prompt and tool schemas.
    """

    state_schema = ConvMemAgentState

    def __init__(
        self,
        sessions: ConvMemSessions | None = None,
        *,
        memory: ConversationMemory | None = None,
        budget: int | None = None,
        session_id_key: str = "thread_id",
        user_id_key: str = "user_id",
        path: str | os.PathLike[str] | None = None,
        store: Store | None = None,
        config: MemoryConfig | None = None,
        counter: TokenCounter | None = None,
        **memory_options: Any,
    ) -> None:
        if _IMPORT_ERROR is not None:  # pragma: no cover - exercised in a subprocess test
            raise ImportError(_INSTALL_HINT) from _IMPORT_ERROR
        check_options(ConvMemMiddleware.__init__, memory_options)
        super().__init__()
        self.fixed_memory: ConversationMemory | None = None
        self.sessions: ConvMemSessions | None = None
        if memory is not None:
            if sessions is not None:
                raise ConfigError("pass memory= (one fixed memory) or sessions=, not both")
            self.fixed_memory = memory_from_options(
                memory, path=path, store=store, config=config, counter=counter, **memory_options
            )
        else:
            self.sessions = ConvMemSessions.from_options(
                sessions, path=path, store=store, config=config, counter=counter, **memory_options
            )
        self.budget = check_budget(budget)
        self.session_id_key = session_id_key
        self.user_id_key = user_id_key

    # -- which session --------------------------------------------------------------

    def _memory(self, runtime: Any) -> ConversationMemory:
        if self.fixed_memory is not None:
            return self.fixed_memory
        configurable: dict[str, Any] = {}
        try:
            from langgraph.config import get_config

            configurable = dict(get_config().get("configurable") or {})
        except RuntimeError:  # outside a graph run, or an async run on Python 3.10
            pass
        session_id = configurable.get(self.session_id_key)
        info = getattr(runtime, "execution_info", None)
        if session_id is None and self.session_id_key == "thread_id" and info is not None:
            session_id = info.thread_id
        if session_id is None or session_id == "":
            raise InvalidSessionIdError(
                f"ConvMemMiddleware found no session id in config['configurable'][{self.session_id_key!r}]; "
                f"invoke the agent with config={{'configurable': {{{self.session_id_key!r}: 'conversation-1'}}}} "
                "or create the middleware with memory=ConversationMemory(...)"
            )
        assert self.sessions is not None
        return self.sessions.memory(str(session_id), configurable.get(self.user_id_key))

    # -- syncing the agent's messages into the log ----------------------------------------

    @staticmethod
    def _unstored(state: Mapping[str, Any], removed: int) -> list[BaseMessage]:
        """The messages of the agent state that the log does not hold yet.

        Decided by position, never by id: the state's first ``convmem_stored``
        messages are in the log (the context this middleware put there, then
        what it stored since), less the `removed` ones, and everything after
        them is new. A client may reuse a message id for a new message; that
        message is new all the same.
        """
        messages: Sequence[BaseMessage] = state["messages"]
        stored = max(0, (state.get(_STORED_KEY) or 0) - removed)
        return [m for m in messages[stored:] if m.id not in (CONTEXT_MESSAGE_ID, MEMORY_MESSAGE_ID)]

    @staticmethod
    def _forget_removed(memory: ConversationMemory, state: Mapping[str, Any]) -> int:
        """Delete from the log what a ``RemoveMessage`` took out of the stored part of the
        state; return how many stored messages went. All of them gone (``REMOVE_ALL_MESSAGES``)
        deletes the whole conversation."""
        recorded: list[str] = list(state.get(_IDS_KEY) or ())
        present = {m.id for m in state["messages"]}
        removed = [message_id for message_id in recorded if message_id not in present]
        if not removed:
            return 0
        if len(removed) == len(recorded):
            memory.clear()
        else:
            delete_by_ids(memory, removed, search_newest=len(recorded))
        return len(removed)

    def _sync(self, memory: ConversationMemory, state: Mapping[str, Any], *, final: bool) -> dict[str, Any]:
        """Store the new messages; returns the state update that records them as stored."""
        removed = self._forget_removed(memory, state)
        record_new_messages(memory, self._unstored(state, removed), final=final)
        messages: Sequence[BaseMessage] = state["messages"]
        return {_STORED_KEY: len(messages), _IDS_KEY: [str(m.id) for m in messages]}

    def _replace(self, memory: ConversationMemory, messages: Sequence[BaseMessage]) -> dict[str, Any]:
        context = memory.build_context(latest_human_text(messages), self.budget, include_query=False)
        managed = state_messages(context)
        update: dict[str, Any] = {_STORED_KEY: len(managed), _IDS_KEY: [str(m.id) for m in managed]}
        if [(m.id, m.content) for m in managed] != [(m.id, m.content) for m in messages]:
            update["messages"] = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *managed]
        return update

    def _before_model(self, memory: ConversationMemory, state: Mapping[str, Any]) -> dict[str, Any]:
        self._sync(memory, state, final=False)
        return self._replace(memory, state["messages"])

    @staticmethod
    def _is_final(messages: Sequence[BaseMessage]) -> bool:
        return bool(messages) and isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls

    # -- hooks ----------------------------------------------------------------------

    def before_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        """Store what the agent added since the last call, then hand the model the managed context."""
        return self._before_model(self._memory(runtime), state)

    async def abefore_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._before_model, self._memory(runtime), state)

    def after_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        """Store the model's reply; a reply without tool calls completes the turn."""
        messages = state["messages"]
        return self._sync(self._memory(runtime), state, final=self._is_final(messages))

    async def aafter_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        messages = state["messages"]
        memory = self._memory(runtime)
        return await asyncio.to_thread(self._sync, memory, state, final=self._is_final(messages))

    def after_agent(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        """The agent finished: its turn is COMPLETED, whatever ended it (a plain answer,
        a structured response, a tool that returns directly)."""
        return self._sync(self._memory(runtime), state, final=True)

    async def aafter_agent(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        return await asyncio.to_thread(self._sync, self._memory(runtime), state, final=True)

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        """Mark the turn FAILED when the model call raises."""
        try:
            return handler(request)
        except Exception:
            settle_last_turn(self._memory(request.runtime), TurnStatus.FAILED)
            raise

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        try:
            return await handler(request)
        except Exception:
            memory = self._memory(request.runtime)
            await asyncio.to_thread(settle_last_turn, memory, TurnStatus.FAILED)
            raise

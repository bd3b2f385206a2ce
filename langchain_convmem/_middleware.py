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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage

from convmem import (
    ConfigError,
    ConversationMemory,
    InvalidSessionIdError,
    MemoryConfig,
    Message,
    Store,
    TokenCounter,
    TurnStatus,
    memory_from_options,
)

from ._convert import (
    CONTEXT_MESSAGE_ID,
    context_to_langchain,
    fallback_message_id,
    latest_human_text,
    stored_message_id,
    to_convmem_message,
)
from ._history import ConvMemSessions, check_budget

__all__ = ["ConvMemMiddleware"]

_INSTALL_HINT = (
    "ConvMemMiddleware needs the 'langchain' package (LangChain v1 agents); install it with "
    "pip install 'langchain>=1.0' (or pip install 'convmem[all]'). The chat history and "
    "the runnable of langchain_convmem need only langchain-core."
)

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
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
else:
    _IMPORT_ERROR = None


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
    def _unstored(memory: ConversationMemory, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """The messages of the agent state that the log does not hold yet.

        The state holds the context this middleware put there (its system
        message and a window drawn from the newest turns) followed by what the
        agent added since, so the newest turns and the log's last
        ``len(messages)`` entries are enough to tell them apart.
        """
        if not messages:
            return []
        recent = [m for turn in memory.recent_turns(memory.config.keep_recent_turns) for m in turn.messages]
        recent += memory.tail(len(messages))
        known = {stored_message_id(m) or fallback_message_id(m.seq) for m in recent}
        return [m for m in messages if m.id != CONTEXT_MESSAGE_ID and (m.id is None or m.id not in known)]

    @staticmethod
    def _to_store(new: Sequence[BaseMessage], *, final: bool) -> list[Message]:
        """Messages of the unfinished turn are RUNNING; earlier ones and a final answer COMPLETED."""
        # Without a human message in the batch, everything continues the current turn.
        turn_start = max((i for i, m in enumerate(new) if isinstance(m, HumanMessage)), default=0)
        converted = []
        for index, message in enumerate(new):
            answer = final and index == len(new) - 1
            running = index >= turn_start and not answer
            converted.append(
                to_convmem_message(message, status=TurnStatus.RUNNING if running else TurnStatus.COMPLETED)
            )
        return converted

    @staticmethod
    def _settle_last_turn(memory: ConversationMemory, status: TurnStatus) -> None:
        """Give every RUNNING message of the newest turn its final status."""
        turns = memory.recent_turns(1)
        if not turns:
            return
        for message in turns[-1].messages:
            if message.status is TurnStatus.RUNNING and message.seq is not None:
                memory.set_status(message.seq, status)

    def _sync(self, memory: ConversationMemory, messages: Sequence[BaseMessage], *, final: bool) -> None:
        new = self._unstored(memory, messages)
        if not new:
            return
        if any(isinstance(m, HumanMessage) for m in new):
            self._settle_last_turn(memory, TurnStatus.CANCELLED)
        memory.add_messages(self._to_store(new, final=final))
        if final:
            self._settle_last_turn(memory, TurnStatus.COMPLETED)

    def _replace(self, memory: ConversationMemory, messages: Sequence[BaseMessage]) -> dict[str, Any] | None:
        context = memory.build_context(latest_human_text(messages), self.budget, include_query=False)
        managed = context_to_langchain(context, system_message_id=CONTEXT_MESSAGE_ID, stable_ids=True)
        if [(m.id, m.content) for m in managed] == [(m.id, m.content) for m in messages]:
            return None
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *managed]}

    @staticmethod
    def _is_final(messages: Sequence[BaseMessage]) -> bool:
        return bool(messages) and isinstance(messages[-1], AIMessage) and not messages[-1].tool_calls

    # -- hooks ----------------------------------------------------------------------

    def before_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        """Store what the agent added since the last call, then hand the model the managed context."""
        memory = self._memory(runtime)
        messages = state["messages"]
        self._sync(memory, messages, final=False)
        return self._replace(memory, messages)

    async def abefore_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        memory = self._memory(runtime)
        messages = state["messages"]
        await asyncio.to_thread(self._sync, memory, messages, final=False)
        return await asyncio.to_thread(self._replace, memory, messages)

    def after_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        """Store the model's reply; a reply without tool calls completes the turn."""
        messages = state["messages"]
        self._sync(self._memory(runtime), messages, final=self._is_final(messages))
        return None

    async def aafter_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        messages = state["messages"]
        memory = self._memory(runtime)
        await asyncio.to_thread(self._sync, memory, messages, final=self._is_final(messages))
        return None

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        """Mark the turn FAILED when the model call raises."""
        try:
            return handler(request)
        except Exception:
            self._settle_last_turn(self._memory(request.runtime), TurnStatus.FAILED)
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
            await asyncio.to_thread(self._settle_last_turn, memory, TurnStatus.FAILED)
            raise

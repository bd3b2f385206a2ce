"""`ConvMemMiddleware`: conversation memory for `langchain.agents.create_agent`.

The agent's ``messages`` state stays the user's conversation, exactly as the
client and the model wrote it (ids included); the middleware records it in the
session's log and hands the model the managed context instead of the state,
through LangChain v1's request override (``wrap_model_call``): facts, summary
and recalled turns in a delimited memory message, then the recent window, with
every tool call kept next to its results. What the log takes from the state,
and when a change to the state reaches it, is decided in `_state_sync`.

Requires the ``langchain`` package (``pip install "convmem[all]"`` or
``pip install langchain``); without it, creating the middleware raises
`ImportError` saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Annotated, Any, cast

from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage
from typing_extensions import NotRequired

from convmem import (
    ConfigError,
    ConversationMemory,
    InvalidSessionIdError,
    MemoryConfig,
    Store,
    TokenCounter,
)
from convmem.integration import memory_from_options

from ._convert import context_to_langchain
from ._history import ConvMemSessions, check_budget, check_config_keys, check_options
from ._removals import delete_by_ids
from ._state_sync import Held, Synced, is_derived, load_held, question_text, sync_input, sync_steps
from ._turns import FailedTurns, is_final_answer, session_key

__all__ = ["ConvMemMiddleware"]

_INSTALL_HINT = (
    "ConvMemMiddleware needs the 'langchain' package (LangChain v1 agents); install it with "
    "pip install 'langchain>=1.0' (or pip install 'convmem[all]'). The chat history and "
    "the runnable of langchain_convmem need only langchain-core."
)

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
        ToolCallRequest,
    )
    from langchain.agents.middleware.types import PrivateStateAttr
    from langgraph.errors import GraphBubbleUp
    from langgraph.graph.message import REMOVE_ALL_MESSAGES
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    _IMPORT_ERROR: ImportError | None = exc

    class AgentMiddleware:  # type: ignore[no-redef]
        """Stand-in so that importing this module works without ``langchain``."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise ImportError(_INSTALL_HINT) from _IMPORT_ERROR

    AgentState = dict  # type: ignore[assignment,misc]
    ModelRequest = ModelResponse = ToolCallRequest = Command = Any  # type: ignore[assignment,misc]
    REMOVE_ALL_MESSAGES = "__remove_all__"
    PrivateStateAttr = None  # type: ignore[assignment]

    class GraphBubbleUp(Exception):  # type: ignore[no-redef]
        """Stand-in: never raised without ``langgraph``."""
else:
    _IMPORT_ERROR = None


_HELD_KEY = "convmem_held"
_TURN_KEY = "convmem_turn"
# How many of the newest logged messages a tool's RemoveMessage is looked for in, beyond
# the state's own length, when its id is not one the state held.
_REMOVAL_SLACK = 32

# The sessions whose agent is running a tool in this context. LangGraph copies context
# variables into every run a tool starts, as it copies the config: an agent run there with
# the config it inherited resolves to the same session, and is a sub-agent, not the user.
_RUNNING_TOOLS_OF: contextvars.ContextVar[frozenset[tuple[int, str]]] = contextvars.ContextVar(
    "convmem_running_tools_of", default=frozenset()
)


@contextlib.contextmanager
def _running_a_tool_of(memory: ConversationMemory) -> Iterator[None]:
    token = _RUNNING_TOOLS_OF.set(_RUNNING_TOOLS_OF.get() | {session_key(memory)})
    try:
        yield
    finally:
        _RUNNING_TOOLS_OF.reset(token)


class ConvMemAgentState(AgentState):
    """The agent state plus, private to the middleware, what it holds as the log holds it
    (message id → seq, fingerprint, question answered) and the question of the turn in progress."""

    convmem_held: NotRequired[Annotated[dict[str, list[Any]], PrivateStateAttr]]
    convmem_turn: NotRequired[Annotated[int | None, PrivateStateAttr]]


class ConvMemMiddleware(AgentMiddleware):
    """Keeps an agent's conversation in a convmem memory and hands the model the managed
    context: summary, facts and recall within a token budget.

    Use it with ``create_agent``, with or without a checkpointer, and with other
    middleware such as ``SummarizationMiddleware``::

        from langchain.agents import create_agent
        from langgraph.checkpoint.memory import InMemorySaver

        agent = create_agent(
            model, tools, middleware=[ConvMemMiddleware(path="chat.db")], checkpointer=InMemorySaver()
        )
        agent.invoke({"messages": [{"role": "user", "content": "Hi, I'm Ana."}]},
                     config={"configurable": {"thread_id": "ana-1"}})

    The session is ``config["configurable"]["thread_id"]`` (``session_id_key``),
    the user ``config["configurable"]["user_id"]`` (``user_id_key``); pass
    ``memory=`` to pin one `ConversationMemory` instead.

    The agent's ``messages`` state is left as the client and the model wrote it,
    ids included; only the model request carries the managed context (with the
    middleware first in the list, the ``wrap_model_call`` of the middleware after
    it see and may change that context). Every message reaches the log once: a
    client may resend ``result["messages"]`` plus its new question without a
    checkpointer, and two servers, a chat history and the core API may write the
    same session. What other middleware do to the state during a run (a summary,
    a trimmed list) stays in the state. Deletes that reach the log:

    - ``agent.update_state(config, {"messages": [RemoveMessage(id=...)]})`` with an
      id the client saw in the state: the message leaves the log at the next run;
    - a tool returning ``Command(update={"messages": [RemoveMessage(id=...), ...]})``.

    ``RemoveMessage(id=REMOVE_ALL_MESSAGES)`` empties or rewrites the agent's state
    and leaves the log whole; ``memory.clear()`` deletes a conversation. Editing a
    message with ``update_state`` and its id replaces it in the log.

    Turn status: the new user message and the steps that follow it are stored as
    RUNNING and filed under that question (``reply_to_seq``), so two requests
    answered at once on one thread keep their own answers; the final answer
    marks the turn COMPLETED; a model call that raises marks it FAILED, until a
    retry of the call answers (``ModelRetryMiddleware`` placed before this one, or
    the run resumed from its checkpoint in this process); a turn of this thread left unfinished
    (an interrupted run) is CANCELLED when the thread's next question arrives.
    Another writer's turns are never touched.

    Sub-agents: an agent that one of this agent's tools runs inherits the
    thread id through LangGraph's config. When its own ``ConvMemMiddleware``
    resolves to the same session (same store and session id, or the same fixed
    memory), what it says is not the user's: it leaves the session, its model
    request and its state alone. Invoke it with a thread of its own
    (``config={"configurable": {"thread_id": "research-1"}}``) to give it a memory.

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
        self.session_id_key, self.user_id_key = check_config_keys(session_id_key, user_id_key)
        self._failed_turns = FailedTurns()

    # -- which session --------------------------------------------------------------

    def _memory(self, runtime: Any) -> ConversationMemory:
        if self.fixed_memory is not None:
            return self.fixed_memory
        configurable: dict[str, Any] = dict(
            (getattr(runtime, "config", None) or {}).get("configurable") or {}
        )
        if not configurable:
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

    def _recording(self, runtime: Any) -> ConversationMemory | None:
        """The memory this run records in; None for an agent run inside a tool of an agent on
        the same session (a sub-agent that inherited the thread id), which is left alone."""
        memory = self._memory(runtime)
        return None if session_key(memory) in _RUNNING_TOOLS_OF.get() else memory

    # -- the log, from the state ------------------------------------------------------

    @staticmethod
    def _update(synced: Synced) -> dict[str, Any]:
        return {_HELD_KEY: synced.held, _TURN_KEY: synced.turn}

    def _start(self, memory: ConversationMemory, state: Mapping[str, Any]) -> dict[str, Any]:
        messages: Sequence[BaseMessage] = state["messages"]
        held = load_held(state.get(_HELD_KEY))
        update = self._update(sync_input(memory, messages, held, _turn(state)))
        # A checkpoint written by an earlier release holds the context it put in state: out it goes.
        derived = [RemoveMessage(id=str(m.id)) for m in messages if is_derived(m)]
        if derived:
            update["messages"] = derived
        return update

    def _steps(
        self,
        memory: ConversationMemory,
        state: Mapping[str, Any],
        *,
        final: bool,
        run_ended: bool = False,
        model_next: bool = False,
    ) -> dict[str, Any]:
        held = load_held(state.get(_HELD_KEY))
        synced = sync_steps(
            memory,
            state["messages"],
            held,
            _turn(state),
            final=final,
            run_ended=run_ended,
            model_next=model_next,
        )
        return self._update(synced)

    def _model_messages(self, memory: ConversationMemory, state: Mapping[str, Any]) -> list[AnyMessage]:
        messages: Sequence[BaseMessage] = state["messages"]
        context = memory.build_context(question_text(messages), self.budget, include_query=False)
        return cast("list[AnyMessage]", context_to_langchain(context, stable_ids=True, turn=_turn(state)))

    def _forget_tool_removals(
        self, memory: ConversationMemory, state: Mapping[str, Any], result: Any
    ) -> None:
        removed = _removed_ids(result)
        if removed:
            held = load_held(state.get(_HELD_KEY))
            known = {message_id: Held.of(entry).seq for message_id, entry in held.items()}
            newest = len(state.get("messages") or ()) + _REMOVAL_SLACK
            delete_by_ids(memory, removed, known=known, search_newest=newest)

    # -- hooks ----------------------------------------------------------------------

    def before_agent(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        """Store the run's input (what the log does not hold yet), and what the client
        removed from or edited in the state since the last run."""
        memory = self._recording(runtime)
        return None if memory is None else self._start(memory, state)

    async def abefore_agent(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        memory = self._recording(runtime)
        return None if memory is None else await asyncio.to_thread(self._start, memory, state)

    def before_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        """Store the tool results the model is about to see."""
        memory = self._recording(runtime)
        return None if memory is None else self._steps(memory, state, final=False, model_next=True)

    async def abefore_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        memory = self._recording(runtime)
        if memory is None:
            return None
        return await asyncio.to_thread(
            functools.partial(self._steps, memory, state, final=False, model_next=True)
        )

    def wrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], ModelResponse],
    ) -> ModelResponse:
        """Hand the model the managed context in place of the state's messages; a model
        call that raises marks the turn FAILED, until a retry of the call answers."""
        memory = self._recording(request.runtime)
        if memory is None:
            return handler(request)
        messages = self._model_messages(memory, request.state)
        turn = _turn(request.state)
        try:
            response = handler(request.override(messages=messages))
        except Exception:
            self._failed_turns.fail(memory, turn)
            raise
        self._failed_turns.answered(memory, turn)
        return response

    async def awrap_model_call(
        self,
        request: ModelRequest,
        handler: Callable[[ModelRequest], Awaitable[ModelResponse]],
    ) -> ModelResponse:
        memory = self._recording(request.runtime)
        if memory is None:
            return await handler(request)
        messages = await asyncio.to_thread(self._model_messages, memory, request.state)
        turn = _turn(request.state)
        try:
            response = await handler(request.override(messages=messages))
        except Exception:
            await asyncio.to_thread(self._failed_turns.fail, memory, turn)
            raise
        if self._failed_turns.failed(memory, turn):  # a retry answered: no thread otherwise
            await asyncio.to_thread(self._failed_turns.answered, memory, turn)
        return response

    def after_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        """Store the model's reply; one without tool calls completes the turn."""
        memory = self._recording(runtime)
        if memory is None:
            return None
        messages = state["messages"]
        final = bool(messages) and is_final_answer(messages[-1])
        return self._steps(memory, state, final=final)

    async def aafter_model(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        memory = self._recording(runtime)
        if memory is None:
            return None
        messages = state["messages"]
        final = bool(messages) and is_final_answer(messages[-1])
        return await asyncio.to_thread(self._steps, memory, state, final=final)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Any],
    ) -> Any:
        """Run the tool; a ``RemoveMessage(id=...)`` in the ``Command`` it returns deletes from the log too,
        and an error the tool node does not handle (the run ends with it) marks the turn FAILED.

        An agent the tool runs that resolves to this same session (it inherited the thread
        id through the config) is a sub-agent: its middleware leaves this session alone.
        """
        memory = self._recording(request.runtime)
        if memory is None:
            return handler(request)
        with _running_a_tool_of(memory):
            try:
                result = handler(request)
            except GraphBubbleUp:  # an interrupt, or a command for the parent graph
                raise
            except Exception:  # not handled by the tool node: the run ends with it
                self._failed_turns.fail(memory, _turn(request.state))
                raise
        self._forget_tool_removals(memory, request.state, result)
        return result

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[Any]],
    ) -> Any:
        memory = self._recording(request.runtime)
        if memory is None:
            return await handler(request)
        with _running_a_tool_of(memory):
            try:
                result = await handler(request)
            except GraphBubbleUp:
                raise
            except Exception:
                await asyncio.to_thread(self._failed_turns.fail, memory, _turn(request.state))
                raise
        if _removed_ids(result):
            await asyncio.to_thread(self._forget_tool_removals, memory, request.state, result)
        return result

    def after_agent(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        """The agent finished: its turn is COMPLETED, whatever ended it (a plain answer,
        a structured response, a tool that returns directly)."""
        memory = self._recording(runtime)
        return None if memory is None else self._steps(memory, state, final=True, run_ended=True)

    async def aafter_agent(self, state: AgentState, runtime: Any) -> dict[str, Any] | None:
        memory = self._recording(runtime)
        if memory is None:
            return None
        return await asyncio.to_thread(self._steps, memory, state, final=True, run_ended=True)


def _turn(state: Mapping[str, Any]) -> int | None:
    turn = state.get(_TURN_KEY)
    return turn if isinstance(turn, int) else None


def _removed_ids(result: Any) -> list[str]:
    """The ids a tool's ``Command`` removes one by one (``REMOVE_ALL_MESSAGES`` is not a delete)."""
    if not isinstance(result, Command):
        return []
    update = result.update
    pairs: Iterable[Any] = update.items() if isinstance(update, Mapping) else update or ()
    removed = []
    for pair in pairs:
        if not (isinstance(pair, tuple) and len(pair) == 2 and pair[0] == "messages"):
            continue
        value = pair[1]
        for message in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(message, RemoveMessage) and message.id and message.id != REMOVE_ALL_MESSAGES:
                removed.append(message.id)
    return removed

"""`ConvMemNode`: conversation memory for a LangGraph `StateGraph` chatbot.

A graph with a checkpointer keeps the whole conversation in its ``messages``
state; the model should see the managed context instead (facts, summary,
recall and the recent window within a budget), and convmem should record each
turn with its status. `ConvMemNode.node` wraps the function that calls the
model into a graph node that does both::

    memory = ConvMemNode(path="chat.db")
    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", memory.node(lambda messages: model.invoke(messages)))
    builder.add_edge(START, "chatbot")
    graph = builder.compile(checkpointer=InMemorySaver())
    graph.invoke({"messages": [("user", "Hi, I'm Ana.")]}, {"configurable": {"thread_id": "ana-1"}})

What is new is decided by position: the messages after the last AI message
in state (the previous reply) are stored, as RUNNING (unless the log holds
them already); the reply completes the
turn (or keeps it RUNNING while it asks for tools). A turn left RUNNING when the
next user message arrives is CANCELLED; a model call that raises marks it FAILED.
A message removed from the state (``RemoveMessage(id=...)`` from a node or
``graph.update_state``, or ``REMOVE_ALL_MESSAGES``) is deleted from the memory
at the next model call, so the context never brings it back.

Needs ``langgraph`` only for the graph itself; this module imports nothing from it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig

from convmem import ConversationMemory, InvalidSessionIdError, MemoryConfig, Store, TokenCounter, TurnStatus

from ._convert import context_to_langchain, latest_human_text
from ._history import ConvMemSessions, check_budget, check_options
from ._removals import forget_removed_from_graph
from ._turns import record_new_messages, settle_last_turn

__all__ = ["ConvMemNode"]


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
        self.session_id_key = session_id_key
        self.user_id_key = user_id_key

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

    @staticmethod
    def _new_messages(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        last_reply = max((i for i, m in enumerate(messages) if isinstance(m, AIMessage)), default=-1)
        return list(messages[last_reply + 1 :])

    def model_input(self, state: Mapping[str, Any], config: RunnableConfig | None) -> list[BaseMessage]:
        """Store the state's new messages and return what the model should see now."""
        memory = self.memory(config)
        messages: Sequence[BaseMessage] = state["messages"]
        # RemoveMessage (or REMOVE_ALL_MESSAGES) took messages out of the state: out of the log too.
        new = forget_removed_from_graph(memory, messages, self._new_messages(messages))
        record_new_messages(memory, new, final=False)
        context = memory.build_context(latest_human_text(messages), self.budget, include_query=False)
        return context_to_langchain(context)

    def record_reply(self, reply: BaseMessage, config: RunnableConfig | None) -> None:
        """Store the model's reply; one without tool calls completes the turn."""
        final = not (isinstance(reply, AIMessage) and reply.tool_calls)
        record_new_messages(self.memory(config), [reply], final=final)

    def node(
        self, call_model: Callable[[list[BaseMessage]], BaseMessage]
    ) -> Callable[[Mapping[str, Any], RunnableConfig], dict[str, Any]]:
        """A graph node: managed context in, ``{"messages": [reply]}`` out, the turn recorded."""

        def chatbot(state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
            model_input = self.model_input(state, config)
            try:
                reply = call_model(model_input)
            except Exception:
                settle_last_turn(self.memory(config), TurnStatus.FAILED)
                raise
            self.record_reply(reply, config)
            return {"messages": [reply]}

        return chatbot

    def pre_model_hook(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """For ``create_react_agent(pre_model_hook=...)``: the managed context as ``llm_input_messages``
        (the graph's own messages stay whole). Pair it with `post_model_hook` so turns complete."""
        return {"llm_input_messages": self.model_input(state, config)}

    def post_model_hook(self, state: Mapping[str, Any], config: RunnableConfig) -> dict[str, Any]:
        """For ``create_react_agent(post_model_hook=...)``: record the reply the model just gave."""
        messages: Sequence[BaseMessage] = state["messages"]
        if messages and isinstance(messages[-1], AIMessage):
            self.record_reply(messages[-1], config)
        return {}

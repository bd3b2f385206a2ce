"""``RemoveMessage`` deletes from the memory, in a `create_agent` with `ConvMemMiddleware` and in a
checkpointed `StateGraph` with `ConvMemNode`: the context never brings a removed message back."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from scripted_models import ScriptedToolModel, scripted

from convmem import ConversationMemory
from langchain_convmem import ConvMemMiddleware, ConvMemNode, ConvMemSessions

CARD = "My card number is 4111 1111 1111 1111."


def thread(name: str) -> RunnableConfig:
    return {"configurable": {"thread_id": name}}


def ask(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


def texts(messages: list[BaseMessage] | list[AnyMessage]) -> str:
    return "\n".join(str(m.text) for m in messages)


def logged(memory: ConversationMemory) -> list[str]:
    return [m.text for m in memory.messages()]


def card_id(messages: list[AnyMessage]) -> str:
    [message_id] = [m.id for m in messages if "4111" in m.text]
    assert message_id is not None
    return message_id


# -- create_agent with ConvMemMiddleware ----------------------------------------------------------


def card_agent() -> tuple[Any, ScriptedToolModel, ConvMemSessions]:
    sessions = ConvMemSessions()
    model = scripted("Noted.", "You are welcome.", "I do not know your card.", "Hello again.")
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver())
    agent.invoke(ask(CARD), thread("t"))
    agent.invoke(ask("Thanks!"), thread("t"))
    assert any("4111" in text for text in logged(sessions.memory("t")))
    return agent, model, sessions


def test_a_message_removed_through_update_state_is_deleted_from_the_memory() -> None:
    agent, _, sessions = card_agent()
    state = agent.get_state(thread("t")).values["messages"]
    agent.update_state(thread("t"), {"messages": [RemoveMessage(id=card_id(state))]})
    agent.invoke(ask("What is my card number?"), thread("t"))
    assert not any("4111" in text for text in logged(sessions.memory("t")))


def test_the_model_never_sees_a_removed_message_again() -> None:
    agent, model, _ = card_agent()
    state = agent.get_state(thread("t")).values["messages"]
    agent.update_state(thread("t"), {"messages": [RemoveMessage(id=card_id(state))]})
    result = agent.invoke(ask("What is my card number?"), thread("t"))
    assert "4111" not in texts(model.calls[-1])
    assert "4111" not in texts(result["messages"])


def test_messages_added_after_a_removal_are_stored_once() -> None:
    agent, _, sessions = card_agent()
    state = agent.get_state(thread("t")).values["messages"]
    agent.update_state(thread("t"), {"messages": [RemoveMessage(id=card_id(state))]})
    agent.invoke(ask("What is my card number?"), thread("t"))
    assert logged(sessions.memory("t")) == [
        "Noted.",
        "Thanks!",
        "You are welcome.",
        "What is my card number?",
        "I do not know your card.",
    ]


def test_remove_all_messages_empties_the_agents_state_and_keeps_the_log() -> None:
    agent, _, sessions = card_agent()
    agent.update_state(thread("t"), {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]})
    result = agent.invoke(ask("Hello?"), thread("t"))
    assert [m.text for m in result["messages"]] == ["Hello?", "I do not know your card."]
    assert logged(sessions.memory("t")) == [
        CARD,
        "Noted.",
        "Thanks!",
        "You are welcome.",
        "Hello?",
        "I do not know your card.",
    ]


def test_a_message_edited_through_update_state_is_replaced_in_the_memory() -> None:
    agent, model, sessions = card_agent()
    state = agent.get_state(thread("t")).values["messages"]
    redacted = HumanMessage("My card number is [removed].", id=card_id(state))
    agent.update_state(thread("t"), {"messages": [redacted]})
    agent.invoke(ask("What is my card number?"), thread("t"))
    assert logged(sessions.memory("t"))[0] == "My card number is [removed]."
    assert "4111" not in texts(model.calls[-1])


def test_a_removal_in_one_thread_leaves_other_threads_alone() -> None:
    agent, _, sessions = card_agent()
    agent.invoke(ask(CARD), thread("other"))
    state = agent.get_state(thread("t")).values["messages"]
    agent.update_state(thread("t"), {"messages": [RemoveMessage(id=card_id(state))]})
    agent.invoke(ask("Hi"), thread("t"))
    assert CARD in logged(sessions.memory("other"))


# -- a checkpointed StateGraph with ConvMemNode ---------------------------------------------------


def chatbot_graph(node: ConvMemNode, model: ScriptedToolModel, *, redact: bool = False) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", node.node(model.invoke))
    builder.add_edge(START, "chatbot")
    if redact:

        def drop_card_numbers(state: MessagesState) -> dict[str, Any]:
            return {"messages": [RemoveMessage(id=str(m.id)) for m in state["messages"] if "4111" in m.text]}

        builder.add_node("redact", drop_card_numbers)
        builder.add_edge("chatbot", "redact")
        builder.add_edge("redact", END)
    return builder.compile(checkpointer=InMemorySaver())


def test_a_message_removed_from_a_graphs_state_is_deleted_from_the_memory() -> None:
    sessions = ConvMemSessions()
    model = scripted("Noted.", "Welcome.", "I do not know it.")
    graph = chatbot_graph(ConvMemNode(sessions), model)
    graph.invoke(ask(CARD), thread("g"))
    graph.invoke(ask("Thanks!"), thread("g"))
    state = graph.get_state(thread("g")).values["messages"]
    graph.update_state(thread("g"), {"messages": [RemoveMessage(id=card_id(state))]})
    graph.invoke(ask("What is my card number?"), thread("g"))
    assert logged(sessions.memory("g")) == [
        "Noted.",
        "Thanks!",
        "Welcome.",
        "What is my card number?",
        "I do not know it.",
    ]
    assert "4111" not in texts(model.calls[-1])


def test_a_node_that_returns_remove_message_deletes_from_the_memory() -> None:
    sessions = ConvMemSessions()
    model = scripted("Noted.", "I do not know it.")
    graph = chatbot_graph(ConvMemNode(sessions), model, redact=True)
    graph.invoke(ask(CARD), thread("g"))
    graph.invoke(ask("What is my card number?"), thread("g"))
    assert not any("4111" in text for text in logged(sessions.memory("g")))
    assert "4111" not in texts(model.calls[-1])


def test_remove_all_messages_in_a_graph_empties_its_state_and_keeps_the_log() -> None:
    sessions = ConvMemSessions()
    model = scripted("Noted.", "Hello.")
    graph = chatbot_graph(ConvMemNode(sessions), model)
    graph.invoke(ask(CARD), thread("g"))
    graph.update_state(thread("g"), {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES)]})
    state = graph.invoke(ask("Hi"), thread("g"))
    assert [m.text for m in state["messages"]] == ["Hi", "Hello."]
    assert logged(sessions.memory("g")) == [CARD, "Noted.", "Hi", "Hello."]


def test_a_graph_turn_that_failed_is_not_stored_twice_by_the_next_one() -> None:
    sessions = ConvMemSessions()
    calls = {"n": 0}
    model = scripted("Fine now.")

    def flaky(messages: list[BaseMessage]) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("model down")
        return model.invoke(messages)

    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", ConvMemNode(sessions).node(flaky))
    builder.add_edge(START, "chatbot")
    graph = builder.compile(checkpointer=InMemorySaver())
    with pytest.raises(RuntimeError, match="model down"):
        graph.invoke(ask("first"), thread("g"))
    graph.invoke(ask("second"), thread("g"))
    assert logged(sessions.memory("g")) == ["first", "second", "Fine now."]

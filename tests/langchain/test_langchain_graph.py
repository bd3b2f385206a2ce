"""ConvMemNode in a LangGraph StateGraph chatbot with a checkpointer."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from scripted_models import ScriptedToolModel, scripted

from convmem import InvalidSessionIdError, MemoryConfig, TurnStatus
from langchain_convmem import ConvMemNode, ConvMemSessions


def chatbot_graph(memory: ConvMemNode, model: ScriptedToolModel) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", memory.node(model.invoke))
    builder.add_edge(START, "chatbot")
    return builder.compile(checkpointer=InMemorySaver())


def thread(name: str) -> Any:
    return {"configurable": {"thread_id": name}}


def test_turns_of_a_checkpointed_chatbot_end_completed() -> None:
    sessions = ConvMemSessions()
    graph = chatbot_graph(ConvMemNode(sessions), scripted("Hi Ana.", "You are Ana."))
    graph.invoke({"messages": [HumanMessage("I'm Ana.")]}, thread("t1"))
    graph.invoke({"messages": [HumanMessage("Who am I?")]}, thread("t1"))
    assert [(m.text, m.status) for m in sessions.memory("t1").messages()] == [
        ("I'm Ana.", TurnStatus.COMPLETED),
        ("Hi Ana.", TurnStatus.COMPLETED),
        ("Who am I?", TurnStatus.COMPLETED),
        ("You are Ana.", TurnStatus.COMPLETED),
    ]


def test_the_model_sees_the_managed_context_not_the_whole_state() -> None:
    model = scripted(*[f"answer {i}" for i in range(12)])
    graph = chatbot_graph(ConvMemNode(config=MemoryConfig(budget=120, keep_recent_turns=2)), model)
    for i in range(12):
        state = graph.invoke({"messages": [HumanMessage(f"question {i} " + "words " * 10)]}, thread("t2"))
    assert len(state["messages"]) == 24  # the graph keeps its own history whole
    last_call: list[BaseMessage] = model.calls[-1]
    assert len(last_call) < 24
    assert isinstance(last_call[-1], HumanMessage) and last_call[-1].text.startswith("question 11")
    assert not any(isinstance(m, SystemMessage) and "question 11" in m.text for m in last_call)


def test_a_failing_model_marks_the_turn_failed() -> None:
    sessions = ConvMemSessions()

    def broken(messages: list[BaseMessage]) -> AIMessage:
        raise RuntimeError("model down")

    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", ConvMemNode(sessions).node(broken))
    builder.add_edge(START, "chatbot")
    graph = builder.compile(checkpointer=InMemorySaver())
    with pytest.raises(RuntimeError):
        graph.invoke({"messages": [HumanMessage("hello")]}, thread("t3"))
    assert [(m.text, m.status) for m in sessions.memory("t3").messages()] == [("hello", TurnStatus.FAILED)]


def test_a_graph_run_without_a_thread_id_says_how_to_give_one() -> None:
    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", ConvMemNode().node(scripted("x").invoke))
    builder.add_edge(START, "chatbot")
    with pytest.raises(InvalidSessionIdError, match="thread_id"):
        builder.compile().invoke({"messages": [HumanMessage("hi")]})


# LangGraph 1.0 deprecates its prebuilt create_react_agent for langchain's create_agent; the
# pre/post model hooks tested here are still its documented extension points.
@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_pre_and_post_model_hooks_complete_turns_in_a_react_agent() -> None:
    from langgraph.prebuilt import create_react_agent

    sessions = ConvMemSessions()
    memory = ConvMemNode(sessions)
    agent = create_react_agent(
        scripted("First.", "Second."),
        [],
        pre_model_hook=memory.pre_model_hook,
        post_model_hook=memory.post_model_hook,
        checkpointer=InMemorySaver(),
    )
    agent.invoke({"messages": [HumanMessage("one")]}, thread("t4"))
    agent.invoke({"messages": [HumanMessage("two")]}, thread("t4"))
    assert [(m.text, m.status) for m in sessions.memory("t4").messages()] == [
        ("one", TurnStatus.COMPLETED),
        ("First.", TurnStatus.COMPLETED),
        ("two", TurnStatus.COMPLETED),
        ("Second.", TurnStatus.COMPLETED),
    ]

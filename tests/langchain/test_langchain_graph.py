"""ConvMemNode in a LangGraph StateGraph chatbot with a checkpointer."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import RetryPolicy
from scripted_models import EchoModel, ScriptedToolModel, flaky, scripted

from convmem import ConversationMemory, InvalidSessionIdError, MemoryConfig, TurnStatus
from langchain_convmem import ConvMemChatMessageHistory, ConvMemNode, ConvMemSessions


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


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_a_post_model_hook_that_interrupts_records_the_reply_once_when_resumed() -> None:
    """LangGraph runs a hook node that interrupted again from its start when the run is
    resumed: the reply it recorded stays where it is, also after another writer's note."""
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent
    from langgraph.types import Command, interrupt

    @tool
    def lookup(query: str) -> str:
        """Look it up."""
        return f"found {query}"

    sessions = ConvMemSessions()
    memory = ConvMemNode(sessions)

    def approve_tool_calls(state: Any, config: RunnableConfig) -> dict[str, Any]:
        memory.post_model_hook(state, config)
        if state["messages"][-1].tool_calls:
            interrupt({"approve": [call["name"] for call in state["messages"][-1].tool_calls]})
        return {}

    call = AIMessage("", tool_calls=[{"id": "c1", "name": "lookup", "args": {"query": "x"}}])
    agent = create_react_agent(
        scripted(call, "Final answer."),
        [lookup],
        pre_model_hook=memory.pre_model_hook,
        post_model_hook=approve_tool_calls,
        checkpointer=InMemorySaver(),
        version="v2",
    )
    assert agent.invoke({"messages": [HumanMessage("Q1")]}, thread("t"))["__interrupt__"]
    ConversationMemory("t", sessions.store).add("user", "(a note of the support app)")
    agent.invoke(Command(resume=True), thread("t"))
    log = sessions.memory("t").messages()
    assert [(m.role.value, m.text) for m in log] == [
        ("user", "Q1"),
        ("assistant", ""),
        ("user", "(a note of the support app)"),
        ("tool", "found x"),
        ("assistant", "Final answer."),
    ]
    assert log[1].tool_calls and log[3].tool_call_id == "c1"


# -- async, other writers, requests at once (issue: agents keep their own state) ----------------


def echo_graph(
    node: ConvMemNode, model: EchoModel, *, use_async: bool = False, checkpointer: bool = True
) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", node.node(model.ainvoke if use_async else model.invoke))
    builder.add_edge(START, "chatbot")
    return builder.compile(checkpointer=InMemorySaver() if checkpointer else None)


def logged(sessions: ConvMemSessions, name: str) -> list[str]:
    return [m.text for m in sessions.memory(name).messages()]


def conversation(*questions: str) -> list[str]:
    return [text for question in questions for text in (question, f"answer to {question}")]


def retried_graph(memory: ConvMemNode, call_model: Any) -> Any:
    builder = StateGraph(MessagesState)
    retry = RetryPolicy(initial_interval=0.0, jitter=False, retry_on=ConnectionError)
    builder.add_node("chatbot", memory.node(call_model), retry_policy=retry)
    builder.add_edge(START, "chatbot")
    return builder.compile(checkpointer=InMemorySaver())


def test_a_model_call_the_nodes_retry_policy_repeats_completes_the_turn() -> None:
    sessions = ConvMemSessions()
    graph = retried_graph(ConvMemNode(sessions), flaky("Hello!", failing_calls={1}).invoke)
    graph.invoke({"messages": [HumanMessage("Hi")]}, thread("t"))
    assert [(m.text, m.status) for m in sessions.memory("t").messages()] == [
        ("Hi", TurnStatus.COMPLETED),
        ("Hello!", TurnStatus.COMPLETED),
    ]


async def test_a_model_call_the_nodes_retry_policy_repeats_completes_the_turn_async() -> None:
    sessions = ConvMemSessions()
    graph = retried_graph(ConvMemNode(sessions), flaky("Hello!", failing_calls={1}).ainvoke)
    await graph.ainvoke({"messages": [HumanMessage("Hi")]}, thread("t"))
    assert [(m.text, m.status) for m in sessions.memory("t").messages()] == [
        ("Hi", TurnStatus.COMPLETED),
        ("Hello!", TurnStatus.COMPLETED),
    ]


async def test_an_async_model_call_makes_an_async_node() -> None:
    sessions = ConvMemSessions()
    graph = echo_graph(ConvMemNode(sessions), EchoModel(), use_async=True)
    await graph.ainvoke({"messages": [HumanMessage("Q1")]}, thread("t"))
    state = await graph.ainvoke({"messages": [HumanMessage("Q2")]}, thread("t"))
    assert [m.text for m in state["messages"]] == conversation("Q1", "Q2")
    assert logged(sessions, "t") == conversation("Q1", "Q2")
    assert {m.status for m in sessions.memory("t").messages()} == {TurnStatus.COMPLETED}


async def test_an_async_model_call_that_raises_marks_the_turn_failed() -> None:
    sessions = ConvMemSessions()

    async def broken(messages: list[BaseMessage]) -> AIMessage:
        raise RuntimeError("model down")

    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", ConvMemNode(sessions).node(broken))
    builder.add_edge(START, "chatbot")
    with pytest.raises(RuntimeError, match="model down"):
        await builder.compile().ainvoke({"messages": [HumanMessage("hello")]}, thread("t"))
    assert [(m.text, m.status) for m in sessions.memory("t").messages()] == [("hello", TurnStatus.FAILED)]


def test_a_sync_node_given_a_call_that_returns_a_coroutine_says_to_pass_the_async_function() -> None:
    model = EchoModel()
    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", ConvMemNode().node(lambda messages: model.ainvoke(messages)))
    builder.add_edge(START, "chatbot")
    with pytest.raises(TypeError, match=r"node\(model.ainvoke\)"):
        builder.compile().invoke({"messages": [HumanMessage("hi")]}, thread("t"))


def test_the_graphs_state_is_left_as_the_graph_wrote_it() -> None:
    graph = echo_graph(ConvMemNode(), EchoModel())
    graph.invoke({"messages": [HumanMessage("I'm Ana.", id="client-1")]}, thread("t"))
    state = graph.invoke({"messages": [HumanMessage("Who am I?", id="client-2")]}, thread("t"))
    assert [m.text for m in state["messages"]] == conversation("I'm Ana.", "Who am I?")
    assert [state["messages"][0].id, state["messages"][2].id] == ["client-1", "client-2"]


@pytest.mark.parametrize("shared_node", [True, False], ids=["one-node", "a-node-per-server"])
def test_two_graphs_with_their_own_checkpointers_take_turns_on_a_thread_and_lose_nothing(
    shared_node: bool,
) -> None:
    sessions = ConvMemSessions()
    nodes = [ConvMemNode(sessions)] * 2 if shared_node else [ConvMemNode(sessions), ConvMemNode(sessions)]
    graphs = [echo_graph(node, EchoModel()) for node in nodes]
    questions = [f"Q{n}" for n in range(6)]
    for index, question in enumerate(questions):
        graphs[index % 2].invoke({"messages": [HumanMessage(question)]}, thread("t"))
    assert logged(sessions, "t") == conversation(*questions)


def test_a_chat_history_and_the_core_api_write_the_same_session_and_lose_nothing() -> None:
    sessions = ConvMemSessions()
    graph = echo_graph(ConvMemNode(sessions), EchoModel())
    graph.invoke({"messages": [HumanMessage("Q1")]}, thread("t"))
    ConvMemChatMessageHistory(memory=sessions.memory("t")).add_messages(
        [HumanMessage("from a history"), AIMessage("noted by the history")]
    )
    graph.invoke({"messages": [HumanMessage("Q2")]}, thread("t"))
    sessions.memory("t").add_turn("from the core", "noted by the core")
    graph.invoke({"messages": [HumanMessage("Q3")]}, thread("t"))
    assert logged(sessions, "t") == [
        *conversation("Q1"),
        "from a history",
        "noted by the history",
        *conversation("Q2"),
        "from the core",
        "noted by the core",
        *conversation("Q3"),
    ]


def test_a_graph_without_a_checkpointer_may_be_sent_the_conversation_again() -> None:
    sessions = ConvMemSessions()
    graph = echo_graph(ConvMemNode(sessions), EchoModel(), checkpointer=False)
    state = graph.invoke({"messages": [HumanMessage("Q1")]}, thread("t"))
    state = graph.invoke({"messages": [*state["messages"], HumanMessage("Q2")]}, thread("t"))
    assert logged(sessions, "t") == conversation("Q1", "Q2")


@pytest.mark.parametrize("checkpointer", [False, True])
def test_two_requests_at_once_on_one_thread_each_get_their_own_answer(checkpointer: bool) -> None:
    sessions = ConvMemSessions()
    model = EchoModel(hold={"Q-A": threading.Event()}, started={"Q-A": threading.Event()})
    graph = echo_graph(ConvMemNode(sessions), model, checkpointer=checkpointer)
    first = threading.Thread(target=graph.invoke, args=({"messages": [HumanMessage("Q-A")]}, thread("t")))
    first.start()
    assert model.started["Q-A"].wait(30)
    graph.invoke({"messages": [HumanMessage("Q-B")]}, thread("t"))
    model.hold["Q-A"].set()
    first.join(30)
    log = sessions.memory("t").messages()
    by_text = {m.text: m for m in log}
    assert [m.text for m in log] == ["Q-A", "Q-B", "answer to Q-B", "answer to Q-A"]
    assert by_text["answer to Q-A"].reply_to_seq == by_text["Q-A"].seq
    assert by_text["answer to Q-B"].reply_to_seq == by_text["Q-B"].seq
    assert {m.status for m in log} == {TurnStatus.COMPLETED}


def test_a_turn_left_unfinished_in_the_graphs_state_is_cancelled_by_its_next_question() -> None:
    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    sessions = ConvMemSessions()
    call = AIMessage("", tool_calls=[{"id": "c1", "name": "weather", "args": {"city": "Oslo"}}])
    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", ConvMemNode(sessions).node(scripted(call, "Hello again.").invoke))
    builder.add_node("tools", ToolNode([weather]))
    builder.add_edge(START, "chatbot")
    builder.add_conditional_edges("chatbot", tools_condition)
    builder.add_edge("tools", "chatbot")
    graph = builder.compile(checkpointer=InMemorySaver(), interrupt_before=["tools"])
    graph.invoke({"messages": [HumanMessage("Weather in Oslo?")]}, thread("t"))  # stops before the tool
    graph.invoke({"messages": [HumanMessage("Never mind. Hello!")]}, thread("t"))
    assert [(m.text, m.status) for m in sessions.memory("t").messages()] == [
        ("Weather in Oslo?", TurnStatus.CANCELLED),
        ("", TurnStatus.CANCELLED),
        ("Never mind. Hello!", TurnStatus.COMPLETED),
        ("Hello again.", TurnStatus.COMPLETED),
    ]

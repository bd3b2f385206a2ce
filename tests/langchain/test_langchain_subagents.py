"""An agent run inside a tool of an agent with `ConvMemMiddleware` (a sub-agent) never writes
into the session it inherited the thread id of; with a thread of its own, or as a graph node,
it keeps its memory as any agent does."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from scripted_models import ScriptedToolModel, scripted

from convmem import ConversationMemory, TurnStatus
from langchain_convmem import ConvMemMiddleware, ConvMemSessions

QUESTION = "How many people live in Lisbon?"
PARENT_LOG = [
    ("user", QUESTION),
    ("assistant", ""),
    ("tool", "Lisbon has 545k people."),
    ("assistant", "About 545k."),
]


def thread(name: str) -> RunnableConfig:
    return {"configurable": {"thread_id": name}}


def ask(text: str) -> dict[str, Any]:
    return {"messages": [HumanMessage(text)]}


def research_call() -> AIMessage:
    return AIMessage("", tool_calls=[{"id": "c1", "name": "research", "args": {"topic": "Lisbon"}}])


def logged(memory: ConversationMemory) -> list[tuple[str, str]]:
    return [(m.role.value, m.text) for m in memory.messages()]


def parent_agent(sessions: ConvMemSessions, research: Any, **middleware: Any) -> Any:
    model = scripted(research_call(), "About 545k.")
    return create_agent(
        model,
        [research],
        middleware=[ConvMemMiddleware(sessions, **middleware)],
        checkpointer=InMemorySaver(),
    )


def test_a_sub_agent_that_inherits_the_thread_id_writes_nothing_into_the_users_session() -> None:
    sessions = ConvMemSessions()
    researcher_model = scripted("Lisbon has 545k people.")
    researcher = create_agent(researcher_model, [], middleware=[ConvMemMiddleware(sessions)])

    @tool
    def research(topic: str) -> str:
        """Ask the research sub-agent."""
        return str(researcher.invoke(ask(f"Research: {topic}"))["messages"][-1].content)

    parent_agent(sessions, research).invoke(ask(QUESTION), thread("ana"))

    assert logged(sessions.memory("ana")) == PARENT_LOG
    assert all(m.status is TurnStatus.COMPLETED for m in sessions.memory("ana").messages())
    # The sub-agent's model saw its own conversation, not the user's memory.
    assert [m.content for m in researcher_model.calls[0]] == ["Research: Lisbon"]


async def test_a_sub_agent_that_inherits_the_thread_id_writes_nothing_into_the_users_session_async() -> None:
    sessions = ConvMemSessions()
    researcher_model = scripted("Lisbon has 545k people.")
    researcher = create_agent(researcher_model, [], middleware=[ConvMemMiddleware(sessions)])

    @tool
    async def research(topic: str) -> str:
        """Ask the research sub-agent."""
        result = await researcher.ainvoke(ask(f"Research: {topic}"))
        return str(result["messages"][-1].content)

    await parent_agent(sessions, research).ainvoke(ask(QUESTION), thread("ana"))

    assert logged(sessions.memory("ana")) == PARENT_LOG
    assert [m.content for m in researcher_model.calls[0]] == ["Research: Lisbon"]


def test_the_users_next_turn_does_not_see_the_sub_agents_conversation() -> None:
    sessions = ConvMemSessions()
    researcher = create_agent(
        scripted("Lisbon has 545k people."), [], middleware=[ConvMemMiddleware(sessions)]
    )

    @tool
    def research(topic: str) -> str:
        """Ask the research sub-agent."""
        return str(researcher.invoke(ask(f"Research: {topic}"))["messages"][-1].content)

    parent_agent(sessions, research).invoke(ask(QUESTION), thread("ana"))

    context = sessions.memory("ana").build_context("And Porto?")
    assert not any("Research: Lisbon" in str(m["content"]) for m in context.messages)


def test_a_sub_agent_with_a_thread_of_its_own_keeps_its_own_session() -> None:
    sessions = ConvMemSessions()
    researcher = create_agent(
        scripted("Lisbon has 545k people."),
        [],
        middleware=[ConvMemMiddleware(sessions)],
        checkpointer=InMemorySaver(),
    )

    @tool
    def research(topic: str) -> str:
        """Ask the research sub-agent."""
        result = researcher.invoke(ask(f"Research: {topic}"), thread("ana-research"))
        return str(result["messages"][-1].content)

    parent_agent(sessions, research).invoke(ask(QUESTION), thread("ana"))

    assert logged(sessions.memory("ana")) == PARENT_LOG
    assert logged(sessions.memory("ana-research")) == [
        ("user", "Research: Lisbon"),
        ("assistant", "Lisbon has 545k people."),
    ]
    assert all(m.status is TurnStatus.COMPLETED for m in sessions.memory("ana-research").messages())


def test_a_sub_agent_on_the_parents_fixed_memory_writes_nothing_into_it() -> None:
    memory = ConversationMemory("ana")
    researcher_model = scripted("Lisbon has 545k people.")
    researcher = create_agent(researcher_model, [], middleware=[ConvMemMiddleware(memory=memory)])

    @tool
    def research(topic: str) -> str:
        """Ask the research sub-agent."""
        return str(researcher.invoke(ask(f"Research: {topic}"))["messages"][-1].content)

    model = scripted(research_call(), "About 545k.")
    parent = create_agent(model, [research], middleware=[ConvMemMiddleware(memory=memory)])
    parent.invoke(ask(QUESTION))

    assert logged(memory) == PARENT_LOG
    assert [m.content for m in researcher_model.calls[0]] == ["Research: Lisbon"]


def test_an_agent_as_a_node_of_a_parent_graph_keeps_the_threads_memory() -> None:
    sessions = ConvMemSessions()
    model = ScriptedToolModel(messages=iter(["Hi Ana.", "You are Ana."]), calls=[])
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)])
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    graph = builder.compile(checkpointer=InMemorySaver())

    graph.invoke(ask("I am Ana."), thread("ana"))
    graph.invoke(ask("Who am I?"), thread("ana"))

    assert logged(sessions.memory("ana")) == [
        ("user", "I am Ana."),
        ("assistant", "Hi Ana."),
        ("user", "Who am I?"),
        ("assistant", "You are Ana."),
    ]
    shown = [m for m in model.calls[-1] if not isinstance(m, SystemMessage)]
    assert "Ana" in str(shown[0].content)  # the memory message: the model got the managed context

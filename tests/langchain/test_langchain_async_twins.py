"""Every LangChain wrapper method that does I/O has an async twin, and each twin behaves as
its sync method does: the same scenarios, run once each way on fresh objects, give the
same results, the same errors and the same log."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from async_twins import Pair, Scenario, aoutcome, expected_pairs, outcome
from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain.tools import ToolRuntime
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from langgraph.types import Command
from scripted_models import EchoModel, ScriptedToolModel, scripted

from convmem import ConversationMemory, InMemoryStore
from langchain_convmem import (
    ChatModelTokenCounter,
    ConvMemChatMessageHistory,
    ConvMemMiddleware,
    ConvMemNode,
    ConvMemRunnable,
    ConvMemSessions,
    ConvMemStore,
    LangChainComplete,
    with_convmem,
)

# Methods that wait for nothing: lookups of an in-process registry, builders, pure values.
NO_IO: dict[type, set[str]] = {
    ConvMemChatMessageHistory: {"factory", "refresh", "session_id", "user_id"},
    ConvMemSessions: {"__call__", "history", "memory"},
    ConvMemRunnable: {"config_specs"},
    ConvMemMiddleware: set(),
    ConvMemNode: {"memory", "node"},
    ConvMemStore: {"facts_namespace", "conversations_namespace", "index_config"},
    LangChainComplete: set(),
    ChatModelTokenCounter: {"count_message", "count_text"},
}
RENAMED = {
    (ConvMemChatMessageHistory, "messages"): "aget_messages",
    (ConvMemChatMessageHistory, "full_messages"): "aget_full_messages",
    (ConvMemChatMessageHistory, "context"): "aget_context",
    (LangChainComplete, "__call__"): "acomplete",
}


def pairs(owner: type, *names: str) -> tuple[Pair, ...]:
    return tuple(Pair(owner, name, RENAMED.get((owner, name), f"a{name}")) for name in names)


def said(messages: list[BaseMessage]) -> list[tuple[str, str]]:
    return [(m.type, str(m.text)) for m in messages]


def logged(memory: ConversationMemory) -> list[tuple[str, str, str, int | None]]:
    return [(m.role.value, m.text, m.status.value, m.reply_to_seq) for m in memory.messages()]


def thread(name: str) -> Any:
    return {"configurable": {"thread_id": name}}


# -- the chat history ------------------------------------------------------------------------

GREETING = [HumanMessage("I'm Ana and I live in Lisbon."), AIMessage("Hello Ana.")]


def history_sync() -> Any:
    history = ConvMemChatMessageHistory("s")
    history.add_messages(GREETING)
    seen = (said(history.messages), said(history.full_messages), history.context.explain())
    built = history.build_context("Where do I live?").messages
    history.clear()
    return seen, built, said(history.full_messages)


async def history_async() -> Any:
    history = ConvMemChatMessageHistory("s")
    await history.aadd_messages(GREETING)
    seen = (
        said(await history.aget_messages()),
        said(await history.aget_full_messages()),
        (await history.aget_context()).explain(),
    )
    built = (await history.abuild_context("Where do I live?")).messages
    await history.aclear()
    return seen, built, said(await history.aget_full_messages())


def history_refuses_sync() -> Any:
    return ConvMemChatMessageHistory("s").add_messages([("human", "hi")])  # type: ignore[list-item]


async def history_refuses_async() -> Any:
    return await ConvMemChatMessageHistory("s").aadd_messages([("human", "hi")])  # type: ignore[list-item]


# -- the runnable ----------------------------------------------------------------------------


def chat() -> tuple[ConvMemRunnable, ConvMemSessions]:
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    model = GenericFakeChatModel(messages=itertools.cycle(["Noted.", "Your cat is Miso."]))
    sessions = ConvMemSessions()
    runnable = with_convmem(
        prompt | model, sessions, input_messages_key="question", history_messages_key="history"
    )
    return runnable, sessions


def runnable_sync() -> Any:
    runnable, sessions = chat()
    config = {"configurable": {"session_id": "bo"}}
    first = runnable.invoke({"question": "My cat is Miso."}, config=config).content
    streamed = "".join(c.content for c in runnable.stream({"question": "My cat?"}, config=config))
    return first, streamed, logged(sessions.memory("bo"))


async def runnable_async() -> Any:
    runnable, sessions = chat()
    config = {"configurable": {"session_id": "bo"}}
    first = (await runnable.ainvoke({"question": "My cat is Miso."}, config=config)).content
    streamed = "".join([c.content async for c in runnable.astream({"question": "My cat?"}, config=config)])
    return first, streamed, logged(sessions.memory("bo"))


# -- the middleware ----------------------------------------------------------------------------


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool
def forget_card(runtime: ToolRuntime) -> Command[Any]:
    """Forget the user's card number."""
    [card] = [m for m in runtime.state["messages"] if "4111" in m.text]
    done = ToolMessage("Forgotten.", tool_call_id=runtime.tool_call_id)
    return Command(update={"messages": [RemoveMessage(id=str(card.id)), done]})


def agent_and_sessions() -> tuple[Any, ConvMemSessions]:
    sessions = ConvMemSessions()
    model = scripted(
        "Noted.",
        AIMessage("", tool_calls=[{"id": "f1", "name": "forget_card", "args": {}}]),
        "Done.",
        AIMessage("", tool_calls=[{"id": "w1", "name": "weather", "args": {"city": "Oslo"}}]),
        "Sunny in Oslo.",
    )
    summarization = SummarizationMiddleware(
        GenericFakeChatModel(messages=itertools.cycle(["They talked."])),
        trigger=("messages", 6),
        keep=("messages", 2),
    )
    agent = create_agent(
        model,
        [weather, forget_card],
        middleware=[ConvMemMiddleware(sessions), summarization],
        checkpointer=InMemorySaver(),
    )
    return agent, sessions


QUESTIONS = ["My card is 4111.", "Forget my card.", "Weather in Oslo?"]


def agent_sync() -> Any:
    agent, sessions = agent_and_sessions()
    results = [
        said(agent.invoke({"messages": [HumanMessage(q)]}, thread("t"))["messages"]) for q in QUESTIONS
    ]
    return results, logged(sessions.memory("t"))


async def agent_async() -> Any:
    agent, sessions = agent_and_sessions()
    results = []
    for question in QUESTIONS:
        results.append(
            said((await agent.ainvoke({"messages": [HumanMessage(question)]}, thread("t")))["messages"])
        )
    return results, logged(sessions.memory("t"))


class Broken(ScriptedToolModel):
    def _generate(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("provider down")


def failing_agent() -> tuple[Any, ConvMemSessions]:
    sessions = ConvMemSessions()
    agent = create_agent(Broken(messages=iter([]), calls=[]), [], middleware=[ConvMemMiddleware(sessions)])
    return agent, sessions


def failing_agent_sync() -> Any:
    agent, sessions = failing_agent()
    return outcome(lambda: agent.invoke({"messages": [HumanMessage("Hello?")]}, thread("t"))), logged(
        sessions.memory("t")
    )


async def failing_agent_async() -> Any:
    agent, sessions = failing_agent()
    result = await aoutcome(lambda: agent.ainvoke({"messages": [HumanMessage("Hello?")]}, thread("t")))
    return result, logged(sessions.memory("t"))


# -- the LangGraph node ------------------------------------------------------------------------


def graph_of(call_model: Callable[..., Any], node: ConvMemNode) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("chatbot", node.node(call_model))
    builder.add_edge(START, "chatbot")
    return builder.compile(checkpointer=InMemorySaver())


STATE = {
    "messages": [
        HumanMessage("I'm Ana.", id="q1"),
        AIMessage("Hi Ana.", id="a1"),
        HumanMessage("Who am I?", id="q2"),
    ]
}
REPLY = AIMessage("You are Ana.", id="a2")


def node_sync() -> Any:
    node, model = ConvMemNode(), EchoModel()
    graph = graph_of(model.invoke, node)
    replies = [
        said(graph.invoke({"messages": [HumanMessage(q)]}, thread("g"))["messages"]) for q in ("Q1", "Q2")
    ]
    shown = said(node.model_input(STATE, thread("n")))
    node.record_reply(REPLY, thread("n"), STATE)
    hooked = said(node.pre_model_hook(STATE, thread("h"))["llm_input_messages"])
    node.post_model_hook({"messages": [*STATE["messages"], REPLY]}, thread("h"))
    return replies, shown, hooked, [logged(node.memory(thread(name))) for name in "gnh"]


async def node_async() -> Any:
    node, model = ConvMemNode(), EchoModel()
    graph = graph_of(model.ainvoke, node)
    replies = []
    for question in ("Q1", "Q2"):
        replies.append(
            said((await graph.ainvoke({"messages": [HumanMessage(question)]}, thread("g")))["messages"])
        )
    shown = said(await node.amodel_input(STATE, thread("n")))
    await node.arecord_reply(REPLY, thread("n"), STATE)
    hooked = said((await node.apre_model_hook(STATE, thread("h")))["llm_input_messages"])
    await node.apost_model_hook({"messages": [*STATE["messages"], REPLY]}, thread("h"))
    return replies, shown, hooked, [logged(node.memory(thread(name))) for name in "gnh"]


# -- the LangGraph store -----------------------------------------------------------------------


def store_with_alice() -> ConvMemStore:
    logged_store = InMemoryStore()
    memory = ConversationMemory("alice-1", logged_store, user_id="alice")
    memory.add_turn("My dog is called Duoduo.", "Nice dog.")
    return ConvMemStore(logged_store)


OPS = [
    PutOp(("users", "alice", "notes"), "n1", {"text": "likes tea"}),
    GetOp(("convmem", "alice", "facts"), "pet_name"),
    SearchOp(("convmem", "alice", "conversations"), query="dog"),
    SearchOp(("users", "alice")),
    ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("convmem", "alice")),)),
]


def comparable(results: list[Any]) -> list[Any]:
    def one(result: Any) -> Any:
        if isinstance(result, list):
            return [getattr(item, "key", item) for item in result]
        if result is None:
            return None
        return result.key, {name: value for name, value in result.value.items() if name != "timestamp"}

    return [one(result) for result in results]


def store_sync() -> Any:
    store = store_with_alice()
    batched = comparable(store.batch(OPS))
    refused = outcome(lambda: store.batch([PutOp(("convmem", "alice", "notes"), "n", {"v": 1})]))
    return batched, refused, store.forget_user("alice"), comparable(store.batch(OPS[1:3]))


async def store_async() -> Any:
    store = store_with_alice()
    batched = comparable(await store.abatch(OPS))
    refused = await aoutcome(lambda: store.abatch([PutOp(("convmem", "alice", "notes"), "n", {"v": 1})]))
    return batched, refused, await store.aforget_user("alice"), comparable(await store.abatch(OPS[1:3]))


# -- model adapters ----------------------------------------------------------------------------


def complete() -> LangChainComplete:
    return LangChainComplete(GenericFakeChatModel(messages=itertools.cycle(["A summary."])))


SCENARIOS = [
    Scenario(
        "a history written, read and cleared",
        pairs(
            ConvMemChatMessageHistory,
            "add_messages",
            "messages",
            "full_messages",
            "context",
            "build_context",
            "clear",
        ),
        history_sync,
        history_async,
    ),
    Scenario(
        "a history refusing what is not a message",
        pairs(ConvMemChatMessageHistory, "add_messages"),
        lambda: outcome(history_refuses_sync),
        lambda: aoutcome(history_refuses_async),
    ),
    Scenario(
        "a chain with memory, invoked and streamed",
        pairs(ConvMemRunnable, "invoke", "stream"),
        runnable_sync,
        runnable_async,
    ),
    Scenario(
        "an agent with tools, a tool that removes a message, and summarization",
        pairs(
            ConvMemMiddleware,
            "before_agent",
            "before_model",
            "wrap_model_call",
            "after_model",
            "wrap_tool_call",
            "after_agent",
        ),
        agent_sync,
        agent_async,
    ),
    Scenario(
        "an agent whose model fails",
        pairs(ConvMemMiddleware, "wrap_model_call"),
        failing_agent_sync,
        failing_agent_async,
    ),
    Scenario(
        "a graph node, its model input and hooks",
        pairs(ConvMemNode, "model_input", "record_reply", "pre_model_hook", "post_model_hook"),
        node_sync,
        node_async,
    ),
    Scenario(
        "a store's batches and forgetting a user",
        pairs(ConvMemStore, "batch", "forget_user"),
        store_sync,
        store_async,
    ),
    Scenario(
        "a model as a summarizer's complete function",
        pairs(LangChainComplete, "__call__"),
        lambda: complete()("Sum up."),
        lambda: complete().acomplete("Sum up."),
    ),
]


def test_every_method_that_does_io_has_an_async_twin() -> None:
    _, missing = expected_pairs(NO_IO, RENAMED)
    assert missing == []


def test_the_scenarios_run_every_pair() -> None:
    expected, _ = expected_pairs(NO_IO, RENAMED)
    covered = {pair for scenario in SCENARIOS for pair in scenario.pairs}
    assert sorted(map(str, expected - covered)) == []
    assert sorted(map(str, covered - expected)) == []


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
async def test_a_twin_gives_what_its_sync_method_gives(scenario: Scenario) -> None:
    assert await scenario.run_async() == scenario.run_sync()

"""`ConvMemMiddleware` leaves the agent's state to the user and keeps the log whole: with
``SummarizationMiddleware``, a checkpointer or none, a client that resends its history,
other writers on the session, and requests answered at the same time."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentState, SummarizationMiddleware, after_model
from langchain.tools import ToolRuntime
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from scripted_models import EchoModel, scripted

from convmem import ConversationMemory, TurnStatus
from langchain_convmem import (
    ConvMemChatMessageHistory,
    ConvMemMiddleware,
    ConvMemSessions,
    from_convmem_message,
)

LEFT_OUT = "(Some earlier conversation is not included here.)"


def thread(name: str) -> RunnableConfig:
    return {"configurable": {"thread_id": name}}


def ask(text: str, message_id: str | None = None) -> dict[str, Any]:
    return {"messages": [HumanMessage(text, id=message_id)]}


def logged(memory: ConversationMemory) -> list[str]:
    return [m.text for m in memory.messages()]


def conversation(*questions: str) -> list[str]:
    return [text for question in questions for text in (question, f"answer to {question}")]


def summarizer() -> SummarizationMiddleware:
    model = GenericFakeChatModel(messages=itertools.cycle(["The user asked some questions."]))
    return SummarizationMiddleware(model, trigger=("messages", 4), keep=("messages", 2))


# -- the state is the user's conversation ---------------------------------------------------------


def test_the_agents_state_holds_the_conversation_as_written_with_the_clients_ids() -> None:
    agent = create_agent(EchoModel(), [], middleware=[ConvMemMiddleware()], checkpointer=InMemorySaver())
    agent.invoke(ask("I'm Ana.", "client-1"), thread("t"))
    result = agent.invoke(ask("Who am I?", "client-2"), thread("t"))
    messages = result["messages"]
    assert [m.text for m in messages] == conversation("I'm Ana.", "Who am I?")
    assert [messages[0].id, messages[2].id] == ["client-1", "client-2"]
    assert [type(m) for m in messages] == [HumanMessage, AIMessage] * 2


def test_the_log_keeps_the_clients_ids() -> None:
    sessions = ConvMemSessions()
    agent = create_agent(EchoModel(), [], middleware=[ConvMemMiddleware(sessions)])
    result = agent.invoke(ask("I'm Ana.", "client-1"), thread("t"))
    ids = [from_convmem_message(m).id for m in sessions.memory("t").messages()]
    assert ids == ["client-1", result["messages"][-1].id]


def test_the_model_sees_the_managed_context_and_the_state_never_does() -> None:
    sessions = ConvMemSessions()
    model = EchoModel()
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver())
    agent.invoke(ask("My name is Ana."), thread("t"))
    result = agent.invoke(ask("Who am I?"), thread("t"))
    shown = [m for m in model.calls[-1] if not isinstance(m, SystemMessage)]
    assert "<memory>" in shown[0].text and "Ana" in shown[0].text
    assert not any("<memory>" in m.text for m in result["messages"])


def test_a_message_the_client_removes_by_its_own_id_leaves_state_and_log() -> None:
    sessions = ConvMemSessions()
    model = EchoModel()
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver())
    agent.invoke(ask("My card is 4111.", "client-1"), thread("t"))
    agent.invoke(ask("Thanks.", "client-2"), thread("t"))
    agent.update_state(thread("t"), {"messages": [RemoveMessage(id="client-1")]})
    result = agent.invoke(ask("What is my card?"), thread("t"))
    assert "My card is 4111." not in [m.text for m in result["messages"]]
    assert logged(sessions.memory("t")) == [
        "answer to My card is 4111.",
        *conversation("Thanks.", "What is my card?"),
    ]
    assert "My card is 4111." not in [m.text for m in model.calls[-1]]


# -- SummarizationMiddleware ---------------------------------------------------------------------


@pytest.mark.parametrize("convmem_first", [True, False], ids=["convmem-first", "summarization-first"])
def test_summarization_middleware_changes_the_state_and_never_the_log(convmem_first: bool) -> None:
    sessions = ConvMemSessions()
    model = EchoModel()
    convmem, summarization = ConvMemMiddleware(sessions), summarizer()
    agent = create_agent(
        model,
        [],
        middleware=[convmem, summarization] if convmem_first else [summarization, convmem],
        checkpointer=InMemorySaver(),
    )
    questions = [f"Question {n}?" for n in range(1, 6)]
    for question in questions:
        result = agent.invoke(ask(question), thread("t"))
    assert logged(sessions.memory("t")) == conversation(*questions)
    assert result["messages"][0].additional_kwargs.get("lc_source") == "summarization"
    shown = [m.text for m in model.calls[-1] if isinstance(m, HumanMessage)]
    assert shown == questions


@pytest.mark.parametrize("convmem_first", [True, False], ids=["convmem-first", "summarization-first"])
async def test_summarization_middleware_changes_the_state_and_never_the_log_async(
    convmem_first: bool,
) -> None:
    sessions = ConvMemSessions()
    convmem, summarization = ConvMemMiddleware(sessions), summarizer()
    agent = create_agent(
        EchoModel(),
        [],
        middleware=[convmem, summarization] if convmem_first else [summarization, convmem],
        checkpointer=InMemorySaver(),
    )
    questions = [f"Question {n}?" for n in range(1, 6)]
    for question in questions:
        await agent.ainvoke(ask(question), thread("t"))
    assert logged(sessions.memory("t")) == conversation(*questions)


def test_another_middleware_removing_messages_during_a_run_leaves_the_log_alone() -> None:
    @after_model
    def drop_the_oldest_two(state: AgentState, runtime: Any) -> dict[str, Any] | None:
        messages = state["messages"]
        return {"messages": [RemoveMessage(id=m.id) for m in messages[:2]]} if len(messages) > 2 else None

    sessions = ConvMemSessions()
    agent = create_agent(
        EchoModel(),
        [],
        middleware=[ConvMemMiddleware(sessions), drop_the_oldest_two],
        checkpointer=InMemorySaver(),
    )
    for question in ["One?", "Two?", "Three?"]:
        result = agent.invoke(ask(question), thread("t"))
    assert [m.text for m in result["messages"]] == conversation("Three?")
    assert logged(sessions.memory("t")) == conversation("One?", "Two?", "Three?")


# -- clients that resend, and other writers ------------------------------------------------------


def test_a_client_without_a_checkpointer_may_send_the_conversation_back_with_its_new_question() -> None:
    sessions = ConvMemSessions()
    agent = create_agent(EchoModel(), [], middleware=[ConvMemMiddleware(sessions)])
    result = agent.invoke(ask("Q1"), thread("t"))
    result = agent.invoke({"messages": [*result["messages"], HumanMessage("Q2")]}, thread("t"))
    result = agent.invoke({"messages": [*result["messages"], HumanMessage("Q3")]}, thread("t"))
    assert logged(sessions.memory("t")) == conversation("Q1", "Q2", "Q3")
    assert [m.text for m in result["messages"]] == conversation("Q1", "Q2", "Q3")


def test_a_history_resent_as_plain_dicts_is_not_stored_twice() -> None:
    sessions = ConvMemSessions()
    agent = create_agent(EchoModel(), [], middleware=[ConvMemMiddleware(sessions)])
    history: list[dict[str, str]] = []
    for question in ["Hi", "Hi again", "Bye"]:
        history.append({"role": "user", "content": question})
        result = agent.invoke({"messages": history}, thread("t"))
        history.append({"role": "assistant", "content": result["messages"][-1].text})
    assert logged(sessions.memory("t")) == conversation("Hi", "Hi again", "Bye")


def test_a_user_who_says_the_same_thing_twice_is_heard_twice() -> None:
    sessions = ConvMemSessions()
    agent = create_agent(EchoModel(), [], middleware=[ConvMemMiddleware(sessions)])
    result = agent.invoke(ask("yes"), thread("t"))
    agent.invoke({"messages": [*result["messages"], HumanMessage("yes")]}, thread("t"))
    assert logged(sessions.memory("t")) == conversation("yes", "yes")


def test_a_resent_message_the_log_deleted_does_not_come_back() -> None:
    sessions = ConvMemSessions()
    agent = create_agent(EchoModel(), [], middleware=[ConvMemMiddleware(sessions)])
    result = agent.invoke(ask("My card is 4111."), thread("t"))
    result = agent.invoke({"messages": [*result["messages"], HumanMessage("Thanks.")]}, thread("t"))
    memory = sessions.memory("t")
    memory.delete_messages([memory.messages()[0].seq or 0])
    agent.invoke({"messages": [*result["messages"], HumanMessage("Bye.")]}, thread("t"))
    assert logged(memory) == ["answer to My card is 4111.", *conversation("Thanks.", "Bye.")]


def test_two_servers_with_their_own_checkpointers_take_turns_on_a_thread_and_lose_nothing() -> None:
    sessions = ConvMemSessions()  # one store, as two servers on one database share it
    servers = [
        create_agent(EchoModel(), [], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver())
        for _ in range(2)
    ]
    questions = [f"Q{n}" for n in range(6)]
    for index, question in enumerate(questions):
        servers[index % 2].invoke(ask(question), thread("t"))
    assert logged(sessions.memory("t")) == conversation(*questions)


def test_a_chat_history_and_the_core_api_write_the_same_session_and_lose_nothing() -> None:
    sessions = ConvMemSessions()
    agent = create_agent(
        EchoModel(), [], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver()
    )
    agent.invoke(ask("Q1"), thread("t"))
    ConvMemChatMessageHistory(memory=sessions.memory("t")).add_messages(
        [HumanMessage("from a history"), AIMessage("noted by the history")]
    )
    agent.invoke(ask("Q2"), thread("t"))
    sessions.memory("t").add_turn("from the core", "noted by the core")
    agent.invoke(ask("Q3"), thread("t"))
    assert logged(sessions.memory("t")) == [
        *conversation("Q1"),
        "from a history",
        "noted by the history",
        *conversation("Q2"),
        "from the core",
        "noted by the core",
        *conversation("Q3"),
    ]


# -- deletes by tools, and what is not a delete --------------------------------------------------


@tool
def forget_card(runtime: ToolRuntime) -> Command[Any]:
    """Forget the user's card number."""
    [card] = [m for m in runtime.state["messages"] if "4111" in m.text]
    done = ToolMessage("Forgotten.", tool_call_id=runtime.tool_call_id)
    return Command(update={"messages": [RemoveMessage(id=str(card.id)), done]})


def test_a_tool_that_removes_a_message_deletes_it_from_the_memory() -> None:
    sessions = ConvMemSessions()
    call = AIMessage("", tool_calls=[{"id": "f1", "name": "forget_card", "args": {}}])
    model = scripted("Noted.", call, "Done.", "Which card?")
    agent = create_agent(
        model, [forget_card], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver()
    )
    agent.invoke(ask("My card is 4111."), thread("t"))
    agent.invoke(ask("Forget my card."), thread("t"))
    agent.invoke(ask("What is my card?"), thread("t"))
    assert not any("4111" in text for text in logged(sessions.memory("t")))
    assert "4111" not in "".join(m.text for m in model.calls[-1])


def test_deleting_the_first_turn_does_not_make_the_context_say_history_was_left_out() -> None:
    model = EchoModel()
    agent = create_agent(model, [], middleware=[ConvMemMiddleware()], checkpointer=InMemorySaver())
    first = agent.invoke(ask("Q1"), thread("t"))["messages"]
    agent.invoke(ask("Q2"), thread("t"))
    agent.update_state(thread("t"), {"messages": [RemoveMessage(id=str(m.id)) for m in first]})
    agent.invoke(ask("Q3"), thread("t"))
    assert LEFT_OUT not in "".join(m.text for m in model.calls[-1])


# -- requests answered at the same time -----------------------------------------------------------


@pytest.mark.parametrize("checkpointer", [False, True])
def test_two_requests_at_once_on_one_thread_each_get_their_own_answer(checkpointer: bool) -> None:
    """With a checkpointer, the second request's input state holds the first's unfinished
    turn, which it takes for abandoned (CANCELLED); the first's answer completes it again,
    or its question would never be recalled."""
    sessions = ConvMemSessions()
    model = EchoModel(hold={"Q-A": threading.Event()}, started={"Q-A": threading.Event()})
    agent = create_agent(
        model,
        [],
        middleware=[ConvMemMiddleware(sessions)],
        checkpointer=InMemorySaver() if checkpointer else None,
    )
    first = threading.Thread(target=agent.invoke, args=(ask("Q-A"), thread("t")))
    first.start()
    assert model.started["Q-A"].wait(30)
    agent.invoke(ask("Q-B"), thread("t"))  # asked and answered while Q-A is in flight
    model.hold["Q-A"].set()
    first.join(30)
    log = sessions.memory("t").messages()
    by_text = {m.text: m for m in log}
    assert [m.text for m in log] == ["Q-A", "Q-B", "answer to Q-B", "answer to Q-A"]
    assert by_text["answer to Q-A"].reply_to_seq == by_text["Q-A"].seq
    assert by_text["answer to Q-B"].reply_to_seq == by_text["Q-B"].seq
    assert {m.status for m in log} == {TurnStatus.COMPLETED}


async def test_two_requests_at_once_on_one_thread_each_get_their_own_answer_async() -> None:
    sessions = ConvMemSessions()
    model = EchoModel(hold={"Q-A": asyncio.Event()}, started={"Q-A": asyncio.Event()})
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(sessions)])
    first = asyncio.create_task(agent.ainvoke(ask("Q-A"), thread("t")))
    await asyncio.wait_for(model.started["Q-A"].wait(), 30)
    await agent.ainvoke(ask("Q-B"), thread("t"))
    model.hold["Q-A"].set()
    await asyncio.wait_for(first, 30)
    log = sessions.memory("t").messages()
    by_text = {m.text: m for m in log}
    assert by_text["answer to Q-A"].reply_to_seq == by_text["Q-A"].seq
    assert by_text["answer to Q-B"].reply_to_seq == by_text["Q-B"].seq
    assert {m.status for m in log} == {TurnStatus.COMPLETED}


def test_a_checkpoint_of_an_earlier_release_loses_the_context_it_held_and_nothing_is_stored_twice() -> None:
    sessions = ConvMemSessions()
    memory = sessions.memory("t")
    memory.add_turn("I'm Ana.", "Hi Ana.")
    agent = create_agent(
        EchoModel(), [], middleware=[ConvMemMiddleware(sessions)], checkpointer=InMemorySaver()
    )
    earlier_state = [  # what the middleware used to write into an agent's state
        SystemMessage("Be brief.", id="convmem-context"),
        HumanMessage("<memory>\nKnown facts: name: Ana\n</memory>", id="convmem-memory"),
        HumanMessage("I'm Ana.", id="convmem-seq-1"),
        AIMessage("Hi Ana.", id="convmem-seq-2"),
    ]
    agent.update_state(thread("t"), {"messages": earlier_state})
    result = agent.invoke(ask("Who am I?"), thread("t"))
    assert [m.text for m in result["messages"]] == ["I'm Ana.", "Hi Ana.", *conversation("Who am I?")]
    assert logged(memory) == ["I'm Ana.", "Hi Ana.", *conversation("Who am I?")]

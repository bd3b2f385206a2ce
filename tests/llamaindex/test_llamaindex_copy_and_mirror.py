"""``copy.deepcopy`` of a buffer, and ``chat_store=``: a user's own `BaseChatStore` that
receives a copy of every write, with chat engines and agent workflows."""

from __future__ import annotations

import asyncio
import copy
import pickle
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.storage.chat_store import SimpleChatStore

from convmem import InMemoryStore
from llamaindex_convmem import ConvMemChatMemoryBuffer

pytestmark = pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")

HI = ChatMessage(role="user", content="Good morning.")
HELLO = ChatMessage(role="assistant", content="Good morning to you.")
BYE = ChatMessage(role="user", content="Bye.")


def contents(messages: list[ChatMessage]) -> list[str | None]:
    return [m.content for m in messages]


# -- deepcopy ------------------------------------------------------------------------------------


def test_a_deep_copy_of_an_in_process_buffer_has_its_own_history() -> None:
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_history=[HI, HELLO], token_limit=500)
    clone = copy.deepcopy(buffer)
    clone.put(BYE)
    assert contents(buffer.get_all()) == ["Good morning.", "Good morning to you."]
    assert contents(clone.get_all()) == ["Good morning.", "Good morning to you.", "Bye."]
    assert clone.token_limit == 500 and clone.chat_store_key == buffer.chat_store_key


def test_a_deep_copy_behaves_like_one_of_chat_memory_buffer() -> None:
    native = ChatMemoryBuffer.from_defaults(chat_history=[HI, HELLO], token_limit=500)
    ours = ConvMemChatMemoryBuffer.from_defaults(chat_history=[HI, HELLO], token_limit=500)
    for memory in (native, ours):
        copy.deepcopy(memory).put(BYE)
    assert contents(ours.get_all()) == contents(native.get_all())


COPIES = {"deepcopy": copy.deepcopy, "pickle": lambda buffer: pickle.loads(pickle.dumps(buffer))}


@pytest.mark.parametrize("how", COPIES)
@pytest.mark.parametrize("kind", [ChatMemoryBuffer, ConvMemChatMemoryBuffer])
def test_a_copy_of_an_in_process_buffer_keeps_every_session_it_served(
    kind: type[ChatMemoryBuffer], how: str
) -> None:
    buffer = kind.from_defaults(chat_store_key="alice")
    buffer.put(HI)
    buffer.chat_store_key = "bob"
    buffer.put(BYE)
    clone = COPIES[how](buffer)
    assert contents(clone.get_all()) == ["Bye."]
    clone.chat_store_key = "alice"
    assert contents(clone.get_all()) == ["Good morning."]


def test_a_copy_of_a_users_in_process_buffer_keeps_that_users_sessions() -> None:
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="ana-1", user_id="ana", chat_history=[HI])
    buffer.for_session("ana-2").put(BYE)
    clone = copy.deepcopy(buffer)
    assert contents(clone.for_session("ana-2").get_all()) == ["Bye."]
    assert clone.chat_store.get_keys() == ["ana-1", "ana-2"]


def test_a_deep_copy_shares_the_file_and_store_it_was_given(tmp_path: Path) -> None:
    on_file = ConvMemChatMemoryBuffer.from_defaults(chat_history=[HI], path=tmp_path / "chat.db")
    copy.deepcopy(on_file).put(HELLO)
    assert contents(on_file.get_all()) == ["Good morning.", "Good morning to you."]
    shared = InMemoryStore()
    in_store = ConvMemChatMemoryBuffer.from_defaults(chat_history=[HI], store=shared)
    copy.deepcopy(in_store).put(HELLO)
    assert contents(in_store.get_all()) == ["Good morning.", "Good morning to you."]


def test_a_deep_copy_inside_a_structure_is_copied_once() -> None:
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_history=[HI])
    state = copy.deepcopy({"memory": buffer, "same": buffer})
    assert state["memory"] is state["same"] and state["memory"] is not buffer


async def test_an_agent_workflow_with_a_deep_copied_memory_in_its_initial_state_runs() -> None:
    memory = ConvMemChatMemoryBuffer.from_defaults(chat_history=[HI, HELLO], token_limit=2000)
    agent = FunctionAgent(name="helper", description="Answers.", tools=[], llm=MockFunctionCallingLLM())
    workflow = AgentWorkflow(agents=[agent], initial_state={"memory": memory})  # deep-copied per run
    await workflow.run(user_msg="What is my name?", memory=memory)
    assert contents(memory.get_all())[:3] == ["Good morning.", "Good morning to you.", "What is my name?"]


# -- a user's chat store ---------------------------------------------------------------------------


def test_every_write_reaches_the_users_chat_store() -> None:
    theirs = SimpleChatStore()
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana", chat_history=[HI])
    assert buffer.chat_store is theirs and buffer.mirror is theirs
    buffer.put(HELLO)
    buffer.put_messages([BYE])
    assert contents(theirs.get_messages("ana")) == ["Good morning.", "Good morning to you.", "Bye."]
    buffer.set([HELLO])
    assert contents(theirs.get_messages("ana")) == ["Good morning to you."]
    buffer.reset()
    assert theirs.get_messages("ana") == [] and buffer.get_all() == []


async def test_every_async_write_reaches_the_users_chat_store() -> None:
    theirs = SimpleChatStore()
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana")
    await buffer.aput(HI)
    await buffer.aput_messages([HELLO])
    assert contents(theirs.get_messages("ana")) == ["Good morning.", "Good morning to you."]
    await buffer.aset([BYE])
    assert contents(theirs.get_messages("ana")) == ["Bye."]
    await buffer.areset()
    assert theirs.get_messages("ana") == []


def test_history_the_users_chat_store_holds_is_where_a_new_session_starts() -> None:
    theirs = SimpleChatStore()
    theirs.set_messages("ana", [HI, HELLO])
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana")
    assert buffer.get_all() == [HI, HELLO]
    assert contents(buffer.get()) == ["Good morning.", "Good morning to you."]


def test_the_log_is_what_the_context_is_built_from_not_the_users_chat_store() -> None:
    theirs = SimpleChatStore()
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana", chat_history=[HI])
    theirs.add_message("ana", ChatMessage(role="user", content="written past the buffer"))
    assert contents(buffer.get()) == ["Good morning."]


def test_a_chat_engine_writes_its_turns_to_the_users_chat_store() -> None:
    theirs = SimpleChatStore()
    memory = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana", token_limit=2000)
    engine = SimpleChatEngine.from_defaults(llm=MockLLM(max_tokens=4), memory=memory)
    engine.chat("Good morning.")
    engine.chat("How are you?")
    assert theirs.get_messages("ana") == memory.get_all()
    assert [m.role.value for m in theirs.get_messages("ana")] == ["user", "assistant"] * 2


async def test_an_agent_workflow_writes_its_run_to_the_users_chat_store() -> None:
    theirs = SimpleChatStore()
    memory = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana", token_limit=2000)
    agent = FunctionAgent(name="helper", description="Answers.", tools=[], llm=MockFunctionCallingLLM())
    await AgentWorkflow(agents=[agent]).run(user_msg="Hello there", memory=memory)
    assert theirs.get_messages("ana") == memory.get_all()
    assert contents(theirs.get_messages("ana"))[0] == "Hello there"


def test_a_buffer_for_another_session_mirrors_under_its_key() -> None:
    theirs = SimpleChatStore()
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana")
    buffer.for_session("bo").put(HELLO)
    assert theirs.get_messages("bo") == [HELLO] and theirs.get_messages("ana") == []


def users_chat_store_holding(key: str, history: list[ChatMessage]) -> SimpleChatStore:
    theirs = SimpleChatStore()
    theirs.set_messages(key, history)
    return theirs


def test_a_buffer_for_another_session_starts_from_what_the_users_chat_store_holds_under_its_key() -> None:
    theirs = users_chat_store_holding("bo", [HI, HELLO])
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana")
    other = buffer.for_session("bo")
    assert other.get_all() == [HI, HELLO]
    other.put(BYE)
    assert other.get_all() == theirs.get_messages("bo") == [HI, HELLO, BYE]


def test_switching_chat_store_key_starts_the_new_session_from_the_users_chat_store() -> None:
    theirs = users_chat_store_holding("bo", [HI, HELLO])
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana")
    buffer.chat_store_key = "bo"
    assert contents(buffer.get()) == ["Good morning.", "Good morning to you."]


async def test_an_async_read_after_switching_keys_starts_from_the_users_chat_store() -> None:
    theirs = users_chat_store_holding("bo", [HI, HELLO])
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana")
    buffer.chat_store_key = "bo"
    await buffer.aput(BYE)
    assert await buffer.aget_all() == theirs.get_messages("bo") == [HI, HELLO, BYE]


def test_a_session_convmem_holds_is_not_started_again_from_the_users_chat_store(tmp_path: Path) -> None:
    ConvMemChatMemoryBuffer.from_defaults(path=tmp_path / "chat.db", chat_store_key="bo", chat_history=[BYE])
    theirs = users_chat_store_holding("bo", [HI, HELLO])
    buffer = ConvMemChatMemoryBuffer.from_defaults(
        path=tmp_path / "chat.db", chat_store=theirs, chat_store_key="ana"
    )
    assert buffer.for_session("bo").get_all() == [BYE]


def test_the_users_chat_store_comes_back_through_pickling_and_from_dict() -> None:
    theirs = SimpleChatStore()
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="ana", chat_history=[HI])
    restored = ConvMemChatMemoryBuffer.from_dict(buffer.to_dict(), chat_store=theirs)
    restored.put(HELLO)
    assert contents(theirs.get_messages("ana")) == ["Good morning.", "Good morning to you."]
    unpickled = pickle.loads(pickle.dumps(buffer))
    assert unpickled.mirror is not None and unpickled.get_all() == [HI]


class SlowChatStore(SimpleChatStore):
    """A chat store whose write of "first" is slow, and says when it began."""

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        object.__setattr__(self, "began", threading.Event())

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        if message.content == "first":
            self.began.set()  # type: ignore[attr-defined]
            time.sleep(0.2)
        super().add_message(key, message, idx)


@pytest.mark.parametrize("buffers", ["one", "one per request"])
@pytest.mark.parametrize("use_async", [False, True])
def test_writers_at_once_leave_the_users_chat_store_in_the_logs_order(use_async: bool, buffers: str) -> None:
    """A second write that starts while the first is copied waits for the copy: both keep
    one order (a UI reading the chat store shows the conversation the context is built from)."""
    store, logs = SlowChatStore(), InMemoryStore()

    def buffer_now() -> ConvMemChatMemoryBuffer:
        return ConvMemChatMemoryBuffer.from_defaults(
            store=logs, chat_store=store, chat_store_key="k", token_limit=500
        )

    buffer = buffer_now()

    def put(text: str) -> None:
        message = ChatMessage(role="user", content=text)
        writer = buffer if buffers == "one" else buffer_now()
        asyncio.run(writer.aput(message)) if use_async else writer.put(message)

    first = threading.Thread(target=put, args=("first",))
    first.start()
    assert store.began.wait(10)  # type: ignore[attr-defined]
    put("second")
    first.join(10)
    assert contents(buffer.get_all()) == ["first", "second"]
    assert contents(store.get_messages("k")) == ["first", "second"]

"""Messages keep whatever LangChain lets them carry: Documents, pydantic models, datetimes, bytes."""

from __future__ import annotations

import datetime
import decimal
import uuid
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.documents import Document
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import BaseModel
from scripted_models import scripted

from convmem import ConversationMemory, InvalidMessageError, TurnStatus
from langchain_convmem import (
    ConvMemChatMessageHistory,
    ConvMemMiddleware,
    from_convmem_message,
    to_convmem_message,
)
from langchain_convmem._serialize import allow_model_class, from_storable, to_storable

WHEN = datetime.datetime(2026, 11, 30, 12, 30, tzinfo=datetime.timezone.utc)


class Citation(BaseModel):
    source: str
    page: int
    seen: datetime.datetime


class Unregistered(BaseModel):
    label: str


allow_model_class(Citation)

DOCS = [
    Document(page_content="Convmem keeps a rolling summary.", metadata={"source": "guide.md", "at": WHEN}),
    Document(page_content="Turns have a status.", metadata={"source": "design.md"}, id="doc-2"),
]


@tool(response_format="content_and_artifact")
def retrieve(query: str) -> tuple[str, list[Document]]:
    """Retrieve documents about convmem."""
    return "\n\n".join(d.page_content for d in DOCS), DOCS


def round_trip(message: Any) -> Any:
    return from_convmem_message(to_convmem_message(message))


def test_a_rag_tool_with_document_artifacts_runs_in_an_agent() -> None:
    memory = ConversationMemory("rag")
    call = AIMessage("", tool_calls=[{"id": "c1", "name": "retrieve", "args": {"query": "summary"}}])
    agent = create_agent(
        scripted(call, "It keeps a rolling summary."),
        [retrieve],
        middleware=[ConvMemMiddleware(memory=memory)],
        checkpointer=InMemorySaver(),
    )
    agent.invoke(
        {"messages": [HumanMessage("What does convmem keep?")]}, {"configurable": {"thread_id": "t"}}
    )
    tool_messages = [from_convmem_message(m) for m in memory.messages() if m.role.value == "tool"]
    assert len(tool_messages) == 1
    assert isinstance(tool_messages[0], ToolMessage)
    assert tool_messages[0].artifact == DOCS
    assert memory.messages()[-1].status is TurnStatus.COMPLETED


def test_documents_in_an_artifact_come_back_equal() -> None:
    message = ToolMessage("found", tool_call_id="c1", artifact=DOCS)
    assert round_trip(message) == message


def test_additional_kwargs_keep_datetimes_bytes_and_pydantic_models() -> None:
    extras = {
        "when": WHEN,
        "day": WHEN.date(),
        "raw": b"\x00\xffpng",
        "citation": Citation(source="guide.md", page=3, seen=WHEN),
        "id": uuid.UUID(int=7),
        "price": decimal.Decimal("1.10"),
        "pair": (1, "a"),
    }
    message = AIMessage("answer", additional_kwargs=extras)
    assert round_trip(message) == message


def test_a_history_returns_rich_values_from_its_store(tmp_path: Any) -> None:
    history = ConvMemChatMessageHistory("s", path=tmp_path / "chat.db")
    message = ToolMessage("found", tool_call_id="c1", artifact={"docs": DOCS, "at": WHEN})
    history.add_messages(
        [
            HumanMessage("look it up"),
            AIMessage("", tool_calls=[{"id": "c1", "name": "retrieve", "args": {}}]),
            message,
        ]
    )
    reopened = ConvMemChatMessageHistory("s", path=tmp_path / "chat.db")
    assert reopened.full_messages[-1] == message


def test_a_model_of_a_class_not_allowed_comes_back_as_its_data() -> None:
    message = AIMessage("x", additional_kwargs={"thing": Unregistered(label="a")})
    assert round_trip(message).additional_kwargs == {"thing": {"label": "a"}}


def test_a_stored_payload_cannot_name_another_class() -> None:
    payload = {
        "__convmem_type__": "langchain",
        "id": ["langchain", "chat_models", "openai", "ChatOpenAI"],
        "kwargs": {"base_url": "http://attacker.example"},
    }
    with pytest.raises(ValueError, match="is not allowed"):
        from_storable(payload)


def test_a_users_dict_that_uses_the_tag_stays_a_dict() -> None:
    value = {"__convmem_type__": "bytes", "value": "not base64"}
    assert from_storable(to_storable(value, "x")) == value


def test_an_object_convmem_cannot_store_is_named_in_the_error() -> None:
    with pytest.raises(InvalidMessageError, match=r"ToolMessage\.artifact holds a builtins\.object"):
        to_convmem_message(ToolMessage("x", tool_call_id="c", artifact=object()))

"""Every public method of `ConversationMemory` and its ``a``-twin behave the same: same
results, same errors, the same owner checks, over the same scenarios and stores."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from convmem import (
    BuiltContext,
    ConversationMemory,
    InMemoryStore,
    MemoryConfig,
    Message,
    SessionOwnerError,
    SQLiteStore,
    Store,
    Turn,
)

# Each public method, with arguments that exercise it on the scripted history below.
# Several rows per method: the ordinary call and the calls that must fail.
CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("add", ("user", "I moved to Lisbon last spring."), {}),
    ("add", ("critic", "no such role"), {}),
    ("add", ("assistant", "an answer to nothing"), {"reply_to_seq": 999}),
    ("add_messages", ([{"role": "user", "content": "One."}, {"role": "assistant", "content": "Two."}],), {}),
    ("add_messages", ("not a list",), {}),
    ("add_messages", ([{"role": "user", "content": "x", "colour": "red"}],), {}),
    ("add_turn", ("Where do I live?", "In Lisbon."), {}),
    ("add_turn", ("Still thinking...",), {"status": "running"}),
    ("set_status", (1, "failed"), {}),
    ("set_status", (1, "sleeping"), {}),
    ("delete_messages", ([2],), {}),
    ("delete_messages", ([999],), {}),
    ("delete_messages", ([0],), {}),
    ("replace_message", (1, {"role": "user", "content": "I moved to [redacted]."}), {}),
    ("replace_message", (999, {"role": "user", "content": "x"}), {}),
    ("clear", (), {}),
    ("messages", (), {}),
    ("turns", (), {}),
    ("recent_turns", (2,), {}),
    ("recent_turns", (None,), {"max_tokens": 50}),
    ("tail", (3,), {}),
    ("tail", (0,), {}),
    ("stats", (), {}),
    ("build_context", ("Where do I live?", 400), {}),
    ("build_context", (None,), {}),
    ("build_context", ("q", 0), {}),
    ("build_context", (123,), {}),
    ("render_transcript", (), {}),
    ("render_transcript", ("answer",), {"max_turns": 1}),
    ("check", (), {}),
    ("check", (10,), {}),
    ("check", (-1,), {}),
    ("summary", (), {}),
    ("summarize_now", (), {}),
    ("facts", (), {}),
    ("forget_fact", ("lives_in",), {}),
    ("forget_fact", ("no such fact",), {}),
    ("flush", (), {}),
]

# Methods with no twin by design: `open` makes a memory, `close` is called at shutdown.
WITHOUT_TWIN = {"open", "close"}

HISTORY = [
    ("My name is Ana and I live in Porto.", "Nice to meet you, Ana."),
    ("I have a cat called Miso.", "Miso is a lovely name."),
    ("What's the weather like?", "Sunny."),
]


def sync_methods() -> list[str]:
    names = []
    for name, member in inspect.getmembers(ConversationMemory, callable):
        if name.startswith("_") or inspect.iscoroutinefunction(member):
            continue
        names.append(name)
    return sorted(names)


def normalized(value: Any) -> Any:
    """`value` without what differs between two runs of one call: write times."""
    if isinstance(value, Message):
        return dataclasses.replace(value, timestamp=0.0)
    if isinstance(value, Turn):
        return tuple(normalized(m) for m in value.messages)
    if isinstance(value, BuiltContext):
        return (value.messages, value.token_count, value.sections, value.memory_text)
    if isinstance(value, list | tuple):
        return type(value)(normalized(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {k: v for k, v in fields.items() if k not in ("created_at", "updated_at", "generation")}
    return value


def outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", normalized(call())
    except Exception as exc:
        return type(exc).__name__, str(exc)


async def aoutcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", normalized(await call())
    except Exception as exc:
        return type(exc).__name__, str(exc)


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[str], Store]]:
    made: list[Store] = []

    def make(name: str) -> Store:
        store: Store = InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / f"{name}.db")
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


def scripted(store: Store, user_id: str | None = "ana") -> ConversationMemory:
    config = MemoryConfig(keep_recent_turns=2, summary_trigger="turns", summary_every_turns=1)
    memory = ConversationMemory("chat", store, config, user_id=user_id)
    for question, answer in HISTORY:
        memory.add_turn(question, answer, timestamp=1_700_000_000)
    memory.flush()
    return memory


def test_every_public_method_has_an_async_twin() -> None:
    missing = [
        name
        for name in sync_methods()
        if name not in WITHOUT_TWIN and not hasattr(ConversationMemory, "a" + name)
    ]
    assert missing == []


def test_every_public_method_is_in_the_scenarios() -> None:
    covered = {name for name, _, _ in CALLS}
    assert sorted(set(sync_methods()) - WITHOUT_TWIN - covered) == []


@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS, ids=lambda value: str(value)[:30])
def test_a_method_and_its_twin_give_the_same_result_or_error(
    make_store: Callable[[str], Store], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    sync_memory = scripted(make_store("sync"))
    async_memory = scripted(make_store("async"))
    expected = outcome(lambda: getattr(sync_memory, name)(*args, **kwargs))
    got = asyncio.run(aoutcome(lambda: getattr(async_memory, "a" + name)(*args, **kwargs)))
    assert got == expected
    # And what each left behind is the same log.
    assert normalized(async_memory.messages()) == normalized(sync_memory.messages())


@pytest.mark.parametrize(("name", "args", "kwargs"), CALLS, ids=lambda value: str(value)[:30])
def test_a_twin_checks_the_owner_as_its_method_does(
    make_store: Callable[[str], Store], name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    # bob opened the session before anyone owned it; then ana wrote to it.
    store = make_store("shared")
    bob = ConversationMemory("chat", store, user_id="bob")
    scripted(store, user_id="ana")
    before = normalized(store.messages("chat"))
    expected = outcome(lambda: getattr(bob, name)(*args, **kwargs))
    got = asyncio.run(aoutcome(lambda: getattr(bob, "a" + name)(*args, **kwargs)))
    assert got == expected
    if name not in ("flush",):  # flush only waits; it reads and writes nothing
        # Refused as another user's session, or for a bad argument before anything is read.
        assert got[0] in ("SessionOwnerError", "InvalidMessageError", "BudgetError"), got
    assert normalized(store.messages("chat")) == before  # nothing of ana's changed


def test_the_owner_scenario_refuses_the_destructive_twins() -> None:
    # The reproduction of the break: bob's async delete used to delete ana's message.
    store = InMemoryStore()
    bob = ConversationMemory("chat", store, user_id="bob")
    ana = ConversationMemory("chat", store, user_id="ana")
    ana.add("user", "my secret")
    with pytest.raises(SessionOwnerError):
        asyncio.run(bob.adelete_messages([1]))
    with pytest.raises(SessionOwnerError):
        asyncio.run(bob.areplace_message(1, {"role": "user", "content": "overwritten"}))
    assert [m.text for m in store.messages("chat")] == ["my secret"]

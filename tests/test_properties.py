"""Properties of built contexts over random histories (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem import (
    BudgetError,
    ConversationMemory,
    InMemoryStore,
    MemoryConfig,
    TiktokenCounter,
    count_messages,
)
from convmem._models import Role

WORDS = [
    "dog",
    "柯基",
    "Beijing",
    "杭州",
    "budget",
    "预算",
    "hike",
    "喜欢",
    "ok",
    "谢谢",
    "deadline",
    "数据库",
]
COUNTER = TiktokenCounter()

text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=30).map(" ".join)
turn = st.tuples(
    text,
    st.one_of(st.none(), text),
    st.sampled_from(["completed", "failed", "cancelled", "running"]),
    st.integers(min_value=0, max_value=2),  # tool exchanges inside the turn
)


def fill(memory: ConversationMemory, turns: list[tuple[str, str | None, str, int]], marker: str) -> None:
    for index, (question, answer, status, tools) in enumerate(turns):
        memory.add("user", f"{marker} {question}")
        for call in range(tools):
            call_id = f"{marker}-{index}-{call}"
            memory.add(
                "assistant", "", tool_calls=[{"id": call_id, "name": "lookup", "args": {"q": question}}]
            )
            memory.add("tool", f"{marker} result {call}", tool_call_id=call_id)
        if answer is not None:
            memory.add("assistant", f"{marker} {answer}", status=status)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    turns=st.lists(turn, min_size=0, max_size=25),
    other=st.lists(turn, min_size=1, max_size=5),
    budget=st.integers(min_value=1, max_value=3000),
    keep=st.integers(min_value=1, max_value=12),
    query=st.one_of(st.none(), text),
)
def test_built_context_invariants(
    turns: list[tuple[str, str | None, str, int]],
    other: list[tuple[str, str | None, str, int]],
    budget: int,
    keep: int,
    query: str | None,
) -> None:
    store = InMemoryStore()
    memory = ConversationMemory("A", store, MemoryConfig(keep_recent_turns=keep, system_prompt="Be kind."))
    fill(memory, turns, "alpha")
    fill(ConversationMemory("B", store), other, "bravo")
    try:
        context = memory.build_context(query=query, budget=budget)
    except BudgetError:
        mandatory = count_messages(
            COUNTER,
            [{"role": "system", "content": "Be kind."}]
            + ([{"role": "user", "content": query}] if query is not None else []),
        )
        assert mandatory > budget
        return

    # never over budget, and the reported count is the real one
    assert context.token_count <= budget
    assert count_messages(COUNTER, context.messages) == context.token_count

    window = list(context.window)
    # order preserved
    seqs = [m.seq for m in window]
    assert seqs == sorted(seqs)
    # the window never starts on an assistant or tool message
    if window:
        assert window[0].role in (Role.USER, Role.SYSTEM)
    # no tool exchange is split
    call_ids = {c["id"] for m in window for c in m.tool_calls}
    result_ids = {m.tool_call_id for m in window if m.role is Role.TOOL}
    assert call_ids == result_ids
    # nothing written only to session B reaches session A's context
    assert "bravo" not in str(context.messages)

"""Properties of built contexts over random histories (hypothesis)."""

from __future__ import annotations

import dataclasses

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
from convmem._context.builder import ContextBuilder
from convmem._context.request import ContextRequest
from convmem._derived.records import Summary
from convmem._models import Message, Role, group_turns
from convmem._recall.render import RecalledItem
from convmem._tokens import REPLY_PRIMING_TOKENS, TextTokenCounter

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


# Text whose pieces sit on tokenizer boundaries: line ends after punctuation or spaces,
# lines starting with spaces, slashes, newlines or CJK, section-header look-alikes.
boundary_text = st.text(alphabet="ab Z9.,'s/\n\r\t \u3000-:!?<>中😊", min_size=1, max_size=40)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.lists(boundary_text, min_size=1, max_size=6),
    facts=st.lists(boundary_text, max_size=3),
    summary=st.one_of(st.just(""), boundary_text),
    placement=st.sampled_from(["user", "developer", "system"]),
    system_prompt=st.sampled_from(["", "Be kind.", "Be kind.\n"]),
    budget=st.integers(min_value=60, max_value=1500),
)
def test_every_placement_counts_the_memory_block_as_the_model_is_billed(
    items: list[str], facts: list[str], summary: str, placement: str, system_prompt: str, budget: int
) -> None:
    """The memory block is counted piece by piece; the total is what counting the
    finished messages gives, and the report's sections add up to it."""
    config = MemoryConfig(system_prompt=system_prompt, memory_placement=placement)  # type: ignore[arg-type]
    builder = ContextBuilder(config, COUNTER)
    messages = []
    for seq, (role, content) in enumerate(
        [
            ("user", "Where do I live?"),
            ("assistant", "In Lisbon."),
            ("user", "And my dog?"),
            ("assistant", "Rex."),
        ],
        start=1,
    ):
        message = Message.create(role, content)
        messages.append(dataclasses.replace(message, seq=seq, token_count=COUNTER.count_message(message)))
    turns = group_turns(messages)
    request = ContextRequest(
        budget=budget,
        turns=turns[1:],
        query="Who am I?",
        facts=facts,
        summary=Summary(text=summary, covers_through_seq=0),
        first_log_seq=1,
        log_tokens=100,
        recall_share=0.5,
    )
    try:
        plan = builder.plan(request)
    except BudgetError:
        return
    recalled = [
        RecalledItem((1 + 10 * i,), text, "", 0.0, 1.0 - i / 10, COUNTER.count_text(text))
        for i, text in enumerate(items)
    ]
    context = builder.assemble(plan, recalled)
    billed = sum(
        COUNTER.count_message(
            Message.create("system" if m["role"] == "developer" else m["role"], m["content"])
        )
        - (COUNTER.count_text("system") - COUNTER.count_text("developer") if m["role"] == "developer" else 0)
        for m in context.messages
    )
    assert context.token_count == billed + REPLY_PRIMING_TOKENS <= budget
    assert sum(report.tokens for report in context.sections) == context.token_count


class WholeMessageCounter(TextTokenCounter):
    """Bills a message by the words of its role and text together: not framing plus
    text, so the builder must count each memory message whole."""

    name = "whole-message-words"

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_message(self, message: Message) -> int:
        return 1 + len(f"{message.role.value}:{message.text}".split()) // 2


def test_a_counter_that_bills_messages_its_own_way_is_asked_for_the_whole_memory_message() -> None:
    counter = WholeMessageCounter()
    memory = ConversationMemory("s", InMemoryStore(), MemoryConfig(system_prompt="Be kind."), counter=counter)
    memory.add_turn("My dog is called Rex and he likes the beach.", "Noted.")
    for i in range(40):
        memory.add_turn(f"Question {i}: how do I sort a list in Python?", f"Use sorted(). ({i})")
    context = memory.build_context(query="What is my dog called?", budget=200)
    assert "Rex" in context.memory_text
    billed = sum(counter.count_message(Message.create(m["role"], m["content"])) for m in context.messages)
    assert context.token_count == billed + REPLY_PRIMING_TOKENS <= 200

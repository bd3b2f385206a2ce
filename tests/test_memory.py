from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from convmem import (
    BudgetError,
    ConversationMemory,
    InvalidMessageError,
    InvalidSessionIdError,
    MemoryConfig,
    Message,
    Store,
    TiktokenCounter,
    TokenCounter,
    count_messages,
)
from convmem._context.builder import ContextBuilder
from convmem._context.request import ContextPlan, ContextRequest
from convmem._models import group_turns
from convmem._recall.engine import RecalledItem


def chat(memory: ConversationMemory, turns: int, words: int = 12) -> None:
    for i in range(turns):
        memory.add_turn(f"question {i} " + "about things " * words, f"answer {i} " + "with details " * words)


def test_build_context_stays_within_the_budget_and_counts_exactly(store: Store) -> None:
    memory = ConversationMemory("s", store, MemoryConfig(system_prompt="Be brief."))
    chat(memory, 40)
    for budget in (60, 200, 777, 4096):
        context = memory.build_context(query="what did we discuss?", budget=budget)
        assert context.token_count <= budget
        assert count_messages(TiktokenCounter(), context.messages) == context.token_count


def test_sections_come_in_prompt_order_with_query_last(store: Store) -> None:
    memory = ConversationMemory("s", store, MemoryConfig(system_prompt="Be brief."))
    chat(memory, 3)
    context = memory.build_context(query="next?", budget=2000)
    assert [s.name for s in context.sections][:6] == [
        "system",
        "facts",
        "summary",
        "recall",
        "window",
        "query",
    ]
    assert context.messages[0] == {"role": "system", "content": "Be brief."}
    assert context.messages[-1] == {"role": "user", "content": "next?"}
    assert sum(s.tokens for s in context.sections) == context.token_count


def test_budget_too_small_for_system_prompt_and_query_is_a_clear_error() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(system_prompt="You are a helpful assistant. " * 20))
    with pytest.raises(BudgetError, match="smaller than the mandatory parts"):
        memory.build_context(query="hello", budget=50)


@pytest.mark.parametrize("budget", [0, -5, 1.5, "100", True])
def test_non_positive_or_non_int_budget_is_rejected(budget: object) -> None:
    memory = ConversationMemory("s")
    with pytest.raises(BudgetError, match="positive int"):
        memory.build_context(budget=budget)  # type: ignore[arg-type]


def test_explain_lists_every_section_and_the_reason_for_each_drop() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(keep_recent_turns=3))
    chat(memory, 6)
    text = memory.build_context(query="q", budget=150).explain()
    for name in ("system", "facts", "summary", "recall", "window", "query"):
        assert name in text
    assert "older than keep_recent_turns=3" in text or "over the window's token share" in text


@pytest.mark.parametrize(
    ("role", "content"),
    [("user", None), ("user", {"a": "b"}), ("robot", "hi"), ("user", 42), ("tool", "no id")],
)
def test_rejected_write_leaves_the_store_unchanged(store: Store, role: str, content: object) -> None:
    memory = ConversationMemory("s", store)
    memory.add_turn("keep me", "kept")
    with pytest.raises(InvalidMessageError):
        memory.add_messages([{"role": "user", "content": "valid first"}, {"role": role, "content": content}])
    assert [m.text for m in memory.messages()] == ["keep me", "kept"]


def test_message_over_max_chars_is_rejected_and_nothing_is_stored(store: Store) -> None:
    memory = ConversationMemory("s", store, MemoryConfig(max_message_chars=1000))
    with pytest.raises(InvalidMessageError, match="max_message_chars=1000"):
        memory.add("user", "x" * 1001)
    assert memory.messages() == []


def test_unknown_turn_status_is_rejected(store: Store) -> None:
    memory = ConversationMemory("s", store)
    with pytest.raises(InvalidMessageError, match="status"):
        memory.add_turn("q", "a", status="finished")
    assert memory.messages() == []


@pytest.mark.parametrize("session_id", ["", "   ", "a\x00b", "line\nbreak", "x" * 257, None, 5])
def test_bad_session_ids_are_rejected(session_id: object) -> None:
    with pytest.raises(InvalidSessionIdError):
        ConversationMemory(session_id)  # type: ignore[arg-type]


def test_invalid_session_id_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        ConversationMemory("")


def test_sqlite_session_survives_reopen_with_nothing_lost(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    memory = ConversationMemory.open("s1", path)
    chat(memory, 25)
    memory.add("assistant", "", tool_calls=[{"id": "c", "name": "f", "args": {"x": [1, 2]}}])
    memory.add("tool", "result", tool_call_id="c")
    before = memory.messages()
    memory.store.close()
    reopened = ConversationMemory.open("s1", path)
    assert reopened.messages() == before
    assert reopened.check().total_tokens == sum(m.token_count or 0 for m in before) + 3


def test_token_counts_are_stored_once_on_write(store: Store) -> None:
    memory = ConversationMemory("s", store)
    stored = memory.add("user", "count me once")
    assert stored.token_count == TiktokenCounter().count_message(stored)
    assert memory.messages()[0].token_count == stored.token_count


def test_check_reports_overflow_and_how_much(store: Store) -> None:
    memory = ConversationMemory("s", store)
    chat(memory, 10)
    status = memory.check(budget=100)
    assert not status.ok
    assert status.over_by == status.total_tokens - 100 > 0
    assert memory.check(budget=100_000).ok


def test_sessions_do_not_see_each_other(store: Store) -> None:
    a, b = ConversationMemory("a", store), ConversationMemory("b", store)
    a.add_turn("secret of a: 4711", "noted")
    b.add_turn("hello from b", "hi")
    text = str(b.build_context(query="what is the secret?", budget=1000).messages)
    assert "4711" not in text
    assert [m.text for m in b.messages()] == ["hello from b", "hi"]


def test_clear_deletes_the_session_only(store: Store) -> None:
    a, b = ConversationMemory("a", store), ConversationMemory("b", store)
    a.add("user", "one")
    b.add("user", "two")
    a.clear()
    assert a.messages() == []
    assert [m.text for m in b.messages()] == ["two"]


def test_async_twins_match_the_sync_methods(store: Store) -> None:
    async def scenario() -> None:
        memory = ConversationMemory("s", store)
        await memory.aadd("user", "hello async")
        await memory.aadd_turn("q", "a")
        await memory.aadd_messages([{"role": "user", "content": "more"}])
        context = await memory.abuild_context(query="x", budget=500)
        assert context.token_count <= 500
        assert len(await memory.amessages()) == 4
        assert (await memory.acheck(10)).over_by > 0
        assert "hello async" in await memory.arender_transcript("answer")
        await memory.aclear()
        assert await memory.amessages() == []

    asyncio.run(scenario())


def test_seq_increases_monotonically(store: Store) -> None:
    memory = ConversationMemory("s", store)
    chat(memory, 5)
    seqs = [m.seq for m in memory.messages()]
    assert seqs == list(range(1, 11))


def test_dict_messages_with_unknown_fields_are_rejected() -> None:
    memory = ConversationMemory("s")
    with pytest.raises(InvalidMessageError, match="unknown message fields"):
        memory.add_messages([{"role": "user", "content": "x", "colour": "red"}])


def test_stats_counts_the_session_from_stored_totals(store: Store) -> None:
    memory = ConversationMemory("s", store, user_id="u1")
    stored = memory.add_turn("hello there", "hi!")
    stats = memory.stats()
    assert (stats.message_count, stats.last_seq, stats.user_id) == (2, 2, "u1")
    assert stats.total_tokens == sum(m.token_count or 0 for m in stored.messages)


def test_stats_of_a_session_never_written_has_no_messages(store: Store) -> None:
    assert ConversationMemory("s", store).stats().message_count == 0


def test_tail_returns_the_newest_messages_oldest_first(store: Store) -> None:
    memory = ConversationMemory("s", store)
    chat(memory, 3)
    assert [m.seq for m in memory.tail(3)] == [4, 5, 6]
    assert [m.seq for m in memory.tail(100)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_tail_of_a_non_positive_or_non_int_count_is_rejected(n: object) -> None:
    with pytest.raises(InvalidMessageError, match="n must be a positive int"):
        ConversationMemory("s").tail(n)  # type: ignore[arg-type]


def test_async_stats_and_tail_match_the_sync_ones(store: Store) -> None:
    memory = ConversationMemory("s", store)
    chat(memory, 2)

    async def scenario() -> None:
        assert await memory.astats() == memory.stats()
        assert await memory.atail(2) == memory.tail(2)

    asyncio.run(scenario())


# -- remember by default: the window is bounded by tokens, and nothing leaves silently


def test_a_turn_is_kept_while_the_budget_has_room() -> None:
    memory = ConversationMemory("probe")
    memory.add_turn("My favourite colour is teal.", "Noted!")
    for i in range(13):
        memory.add_turn(f"Question {i}: how do I sort a list in Python?", f"Use sorted(). ({i})")
    context = memory.build_context(query="What is my favourite colour?", budget=4096)
    assert any("teal" in str(m["content"]) for m in context.messages)
    assert context.token_count == count_messages(memory.counter, context.messages) <= 4096


def test_a_turn_is_kept_while_the_budget_has_room_in_chinese() -> None:
    memory = ConversationMemory("probe-zh")
    memory.add_turn("我最喜欢的颜色是青绿色。", "记住了！")
    for i in range(13):
        memory.add_turn(f"问题{i}：Python 里怎么给列表排序？", f"用 sorted()。（{i}）")
    context = memory.build_context(query="我最喜欢什么颜色？", budget=4096)
    assert any("青绿色" in str(m["content"]) for m in context.messages)
    assert context.token_count == count_messages(memory.counter, context.messages) <= 4096


def test_the_turn_cap_is_off_by_default_and_still_available() -> None:
    assert MemoryConfig().keep_recent_turns is None
    memory = ConversationMemory("capped", config=MemoryConfig(keep_recent_turns=2, summary_trigger="never"))
    for i in range(5):
        memory.add_turn(f"Question {i}?", f"Answer {i}.")
    context = memory.build_context(query="next?", budget=4096)
    assert len(context.window) == 4
    assert "keep_recent_turns=2" in context.explain()


@pytest.mark.parametrize(
    ("language", "omitted"),
    [("en", "(Some earlier conversation is not included here.)"), ("zh", "（更早的部分对话未包含在此。）")],
)
def test_left_out_turns_are_announced_without_facts_or_summary(language: str, omitted: str) -> None:
    config = MemoryConfig(language=language, extract_facts=False, summary_trigger="never")  # type: ignore[arg-type]
    memory = ConversationMemory("long", config=config)
    for i in range(30):
        memory.add_turn(f"Question {i}: how do I sort a list in Python?", f"Use sorted(). ({i})")
    context = memory.build_context(query="and now?", budget=200)
    assert context.memory_message is not None and omitted in context.memory_message["content"]
    explained = context.explain()
    assert "earlier turns left out" in explained
    assert "seq 1-2 'Question 0: how do I so…'" in explained and "over the window's token share" in explained
    assert context.token_count == count_messages(memory.counter, context.messages) <= 200


def test_nothing_is_announced_when_every_turn_is_in_the_context() -> None:
    memory = ConversationMemory("short", config=MemoryConfig(extract_facts=False))
    for i in range(3):
        memory.add_turn(f"Question {i}?", f"Answer {i}.")
    context = memory.build_context(query="next?", budget=4096)
    assert context.memory_text == "" and context.memory_message is None
    assert context.messages[0]["role"] == "user"


def test_without_a_turn_cap_the_summary_takes_what_no_longer_fits_the_default_window() -> None:
    config = MemoryConfig(budget=400, extract_facts=False)
    memory = ConversationMemory("evicting", config=config)
    for i in range(40):
        memory.add_turn(f"Fact number {i}: the value of item {i} is {i * 7}.", f"Recorded item {i}.")
    memory.summarize_now()
    summary = memory.summary()
    assert summary.covers_through_seq > 0
    kept = [t for t in memory.turns() if t.first_seq > summary.covers_through_seq]
    assert sum(t.token_count for t in kept) <= config.eviction_window_tokens
    context = memory.build_context(query="what was item 3?")
    assert context.section("summary").tokens > 0 or "not included" in context.memory_text


# -- recall's room: what the window cannot pay or use is recall's, counted before it fills


def planned(budget: int, newest_question: str) -> tuple[ContextBuilder, ContextPlan]:
    """A build with recall at 90%, over forty short turns and then `newest_question`."""
    counter = TiktokenCounter()
    messages = []
    texts = [text for i in range(40) for text in (f"Question {i}?", f"Answer {i}.")]
    for seq, text in enumerate([*texts, newest_question, "Sure."], start=1):
        message = Message.create("user" if seq % 2 else "assistant", text)
        messages.append(dataclasses.replace(message, seq=seq, token_count=counter.count_message(message)))
    builder = ContextBuilder(MemoryConfig(), counter)
    request = ContextRequest(
        budget=budget,
        turns=group_turns(messages),
        query="What did I ask first?",
        first_log_seq=1,
        log_tokens=sum(m.token_count or 0 for m in messages),
        recall_share=0.9,
    )
    return builder, builder.plan(request)


def filling(plan: ContextPlan, counter: TokenCounter) -> list[RecalledItem]:
    """Recalled items of old turns that fill the plan's recall room to the token."""
    items: list[RecalledItem] = []
    used = 0
    for seq in range(1, 80):
        text = f"user: Question {seq}?"
        cost = counter.count_text(text) + 1
        if used + cost > plan.recall_room:
            break
        items.append(RecalledItem((seq,), text, "", 0.0, 1.0 - seq / 100, cost - 1))
        used += cost
    return items


@pytest.mark.parametrize("newest_question", ["Short?", "A long question " + "about many things " * 30])
def test_recall_keeps_every_item_it_fits_when_the_window_cannot_pay_the_memory_framing(
    newest_question: str,
) -> None:
    """The newest turn alone fits the window's part but not beside the memory block's
    framing (or not at all): recall pays the rest and the final fit drops nothing."""
    builder, plan = planned(160, newest_question)
    items = filling(plan, builder.counter)
    context = builder.assemble(plan, items)
    assert context.recalled == tuple(items)
    assert not [d for d in context.dropped if d.reason == "final fit"]
    assert context.token_count == count_messages(builder.counter, context.messages) <= 160


def test_what_the_windows_whole_turns_leave_of_its_part_is_recalls() -> None:
    builder, plan = planned(900, "Short?")
    assert plan.window.messages and plan.caps["window"] == plan.window.tokens
    context = builder.assemble(plan, filling(plan, builder.counter))
    assert context.window[-len(plan.window.messages) :] == plan.window.messages
    assert context.token_count == count_messages(builder.counter, context.messages) <= 900


def _a_tool_exchange(memory: ConversationMemory) -> None:
    memory.add("user", "Weather in Paris?")
    memory.add("assistant", "", tool_calls=[{"id": "c1", "name": "weather", "args": {"city": "Paris"}}])
    memory.add("tool", "sunny", tool_call_id="c1")
    memory.add("assistant", "It is sunny in Paris.")


@pytest.mark.parametrize(
    ("seq", "replacement", "refusal"),
    [
        (4, {"role": "tool", "content": "rain", "tool_call_id": "nope"}, r"tool result for call 'nope'"),
        (3, {"role": "tool", "content": "rain", "tool_call_id": "c2"}, r"tool result for call 'c2'"),
        (2, {"role": "assistant", "content": "Let me check."}, r"drops the tool call 'c1'.*seq 3"),
        (4, {"role": "assistant", "content": "x", "reply_to_seq": 99}, r"reply_to_seq=99 must name"),
        (1, {"role": "assistant", "content": "x", "reply_to_seq": 1}, r"reply_to_seq=1 must name"),
        (
            4,
            {"role": "assistant", "content": "x", "reply_to_seq": 2},
            r"reply_to_seq=2 names no user message",
        ),
    ],
)
@pytest.mark.parametrize("use_async", [False, True])
def test_a_replacement_add_would_refuse_is_refused_and_changes_nothing(
    store: Store, seq: int, replacement: dict[str, object], refusal: str, use_async: bool
) -> None:
    """A tool result for no waiting call, a call dropped while its result stays, an answer
    to no earlier question: refused as `add` refuses them, before the log is touched."""
    memory = ConversationMemory("s", store)
    _a_tool_exchange(memory)
    before = memory.messages()
    with pytest.raises(InvalidMessageError, match=refusal):
        if use_async:
            asyncio.run(memory.areplace_message(seq, replacement))
        else:
            memory.replace_message(seq, replacement)
    assert memory.messages() == before


def test_a_replacement_that_keeps_the_exchange_whole_is_taken(store: Store) -> None:
    memory = ConversationMemory("s", store)
    _a_tool_exchange(memory)
    call = {"id": "c1", "name": "weather", "args": {"city": "[redacted]"}}
    memory.replace_message(2, {"role": "assistant", "content": "", "tool_calls": [call]})
    memory.replace_message(3, {"role": "tool", "content": "[redacted]", "tool_call_id": "c1"})
    memory.replace_message(4, {"role": "assistant", "content": "[redacted]", "reply_to_seq": 1})
    assert [(m.role.value, m.text) for m in memory.messages()] == [
        ("user", "Weather in Paris?"),
        ("assistant", ""),
        ("tool", "[redacted]"),
        ("assistant", "[redacted]"),
    ]
    assert [m["role"] for m in memory.build_context(budget=500).messages][-3:] == [
        "assistant",
        "tool",
        "assistant",
    ]


def test_a_tool_result_an_import_left_without_its_call_can_still_be_redacted(store: Store) -> None:
    """Only a result the edit strands is held against it: a stray one already in the log
    (an import) may be replaced, so a secret in it can be taken out."""
    memory = ConversationMemory("s", store)
    memory.add("user", "look up my account")
    stray = dataclasses.replace(
        Message.create("tool", "account 4111-1111-1111-1111", tool_call_id="call_9"), seq=2
    )
    store.append("s", [dataclasses.replace(stray, token_count=memory.counter.count_message(stray), seq=None)])
    memory.replace_message(2, {"role": "tool", "content": "[redacted]", "tool_call_id": "call_9"})
    assert [m.text for m in memory.messages()] == ["look up my account", "[redacted]"]

from __future__ import annotations

import dataclasses

import pytest

from convmem import Message, TiktokenCounter
from convmem._context import window as window_module
from convmem._context.window import WindowCandidates, select_window, split_units
from convmem._models import Role, Turn, group_turns
from convmem._salience import is_low_information

COUNTER = TiktokenCounter()


def log(*specs: tuple[str, str] | Message) -> list[Message]:
    """Messages with seq and token counts, as a store would return them."""
    out = []
    for seq, spec in enumerate(specs, start=1):
        message = spec if isinstance(spec, Message) else Message.create(*spec)
        out.append(dataclasses.replace(message, seq=seq, token_count=COUNTER.count_message(message)))
    return out


def tool_exchange(call_id: str = "c1") -> list[Message]:
    return [
        Message.create(
            "assistant", "", tool_calls=[{"id": call_id, "name": "weather", "args": {"city": "Paris"}}]
        ),
        Message.create("tool", "sunny, 21 degrees " * 5, tool_call_id=call_id),
    ]


def test_window_keeps_only_the_last_keep_recent_turns() -> None:
    messages = log(*[(r, f"{r} {i}") for i in range(6) for r in ("user", "assistant")])
    window = select_window(group_turns(messages), keep_recent_turns=2, max_tokens=10_000)
    assert [m.text for m in window.messages] == ["user 4", "assistant 4", "user 5", "assistant 5"]
    assert window.turns == 2


def test_window_trims_to_tokens_newest_first_and_reports_what_it_dropped() -> None:
    messages = log(*[(r, f"{r} number {i} " * 10) for i in range(4) for r in ("user", "assistant")])
    one_turn = messages[-2].token_count + messages[-1].token_count  # type: ignore[operator]
    window = select_window(group_turns(messages), keep_recent_turns=10, max_tokens=one_turn + 5)
    assert [m.seq for m in window.messages] == [7, 8]
    assert window.tokens <= one_turn + 5
    assert {d.reason for d in window.dropped} == {"over the window's token share"}
    assert len(window.dropped) == 3


def test_a_window_that_cuts_into_the_log_never_starts_on_an_assistant_or_tool_message() -> None:
    messages = log(
        ("assistant", "Welcome back!"),
        ("user", "hi there, plan my trip " * 20),
        ("assistant", "Sure."),
        ("user", "to Lisbon"),
        ("assistant", "Booked."),
    )
    newest = sum(m.token_count or 0 for m in messages[3:])
    for window in (
        select_window(group_turns(messages), keep_recent_turns=5, max_tokens=newest),
        select_window(group_turns(messages), keep_recent_turns=1, max_tokens=10_000),
        select_window(group_turns(messages[2:]), keep_recent_turns=5, max_tokens=10_000),  # an answer, then
    ):
        assert window.messages[0].role is Role.USER
        assert any(d.reason == "starts without a user message" for d in window.dropped)


def test_the_assistants_opening_is_kept_when_the_whole_conversation_fits() -> None:
    """A chat that opens with a greeting shows it, as the frameworks' own buffers do,
    when nothing after it is left out; it competes for room like any other turn."""
    messages = log(
        ("assistant", "Welcome back! Your booking is XK-42."),
        ("user", "What is it?"),
        ("assistant", "XK-42."),
    )
    whole = sum(m.token_count or 0 for m in messages)
    window = select_window(group_turns(messages), keep_recent_turns=5, max_tokens=whole)
    assert [m.seq for m in window.messages] == [1, 2, 3] and window.tokens == whole and window.dropped == ()
    short = select_window(group_turns(messages), keep_recent_turns=5, max_tokens=whole - 1)
    assert [m.seq for m in short.messages] == [2, 3]
    assert [d.reason for d in short.dropped] == ["starts without a user message"]


def test_tool_call_and_its_results_stay_together() -> None:
    messages = log(("user", "weather in Paris?"), *tool_exchange(), ("assistant", "It is sunny in Paris."))
    turn = group_turns(messages)[0]
    units = split_units(turn)
    assert [len(u) for u in units] == [1, 2, 1]
    assert units[1][0].tool_calls and units[1][1].role is Role.TOOL


def test_oversized_newest_turn_keeps_question_and_newest_whole_units() -> None:
    messages = log(
        ("user", "plan a trip"),
        *tool_exchange("c1"),
        *tool_exchange("c2"),
        ("assistant", "Done: Paris, sunny."),
    )
    question, final = messages[0], messages[-1]
    room = sum(m.token_count or 0 for m in (question, messages[3], messages[4], final))
    window = select_window(group_turns(messages), keep_recent_turns=3, max_tokens=room)
    kept = [m.seq for m in window.messages]
    assert kept == [1, 4, 5, 6]  # the older exchange (2, 3) went, as a whole
    assert window.tokens <= room


def test_a_question_larger_than_the_window_leaves_the_window_empty() -> None:
    messages = log(("user", "long question " * 200), ("assistant", "ok"))
    window = select_window(group_turns(messages), keep_recent_turns=3, max_tokens=50)
    assert window.messages == ()
    assert "alone exceeds" in window.dropped[0].reason


def test_greetings_and_thanks_are_low_information() -> None:
    for question, answer in [
        ("你好！", "你好！有什么可以帮你？"),
        ("thanks!", "You're welcome!"),
        ("好的，谢谢", "不客气"),
    ]:
        assert is_low_information(group_turns(log(("user", question), ("assistant", answer)))[0])
    informative = group_turns(log(("user", "My dog is called Duoduo"), ("assistant", "Nice!")))[0]
    assert not is_low_information(informative)


def test_pruning_drops_content_free_turns_before_older_informative_ones() -> None:
    messages = log(
        ("user", "My dog Duoduo is a corgi"),
        ("assistant", "Lovely!"),
        ("user", "thanks"),
        ("assistant", "You're welcome!"),
        ("user", "ok"),
        ("assistant", "Anything else?"),
        ("user", "What breed is Duoduo?"),
        ("assistant", "A corgi."),
    )
    turns = group_turns(messages)
    room = turns[0].token_count + turns[-1].token_count
    pruned = select_window(turns, keep_recent_turns=10, max_tokens=room)
    assert [m.seq for m in pruned.messages] == [1, 2, 7, 8]
    plain = select_window(turns, keep_recent_turns=10, max_tokens=room, prune_low_information=False)
    assert 1 not in [m.seq for m in plain.messages]


def test_one_set_of_candidates_chooses_as_a_fresh_choice_would_at_every_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A build chooses from the same turns at several sizes; each choice is what a
    choice from scratch would be, and each turn is judged low-information once."""
    specs: list[tuple[str, str] | Message] = []
    for i in range(12):
        if i % 3 == 0:
            specs += [("user", "thanks!"), ("assistant", "You're welcome!")]
        else:
            specs += [("user", f"question {i} about the garden " * 3), ("assistant", f"answer {i} " * 8)]
    specs.insert(0, ("assistant", "Welcome back!"))
    turns = group_turns(log(*specs))
    judged: list[int] = []

    def spy(turn: Turn) -> bool:
        judged.append(turn.first_seq)
        return is_low_information(turn)

    candidates = WindowCandidates(turns, keep_recent_turns=10)
    monkeypatch.setattr(window_module, "is_low_information", spy)
    sizes = [0, 40, 150, 400, 10_000, 150, 40]
    chosen = [candidates.select(size) for size in sizes]
    assert len(judged) == len(set(judged)) > 0
    monkeypatch.undo()
    for size, window in zip(sizes, chosen, strict=True):
        assert window == select_window(turns, keep_recent_turns=10, max_tokens=size)
    reasons = {d.reason for w in chosen for d in w.dropped}
    assert {
        "starts without a user message",
        "older than keep_recent_turns=10",
        "low-information turn pruned",
        "over the window's token share",
        "no room for the window",
    } <= reasons

"""The contract every store keeps: appending and reading the log, refusing malformed messages,
status, stats and the owner of a session."""

from __future__ import annotations

import dataclasses

from .._errors import InvalidMessageError, SessionOwnerError
from .._models import Message, Role, TurnStatus
from .._stores.base import Store, is_store
from ._data import (
    CALL,
    GOOD,
    HOSTILE_IDS,
    MALFORMED,
    assistant,
    fill,
    seqs,
    texts,
    user,
)
from ._registry import check, raises


@check()
def a_store_satisfies_the_store_protocol(store: Store) -> None:
    assert is_store(store)


@check()
def append_assigns_consecutive_seqs_from_one(store: Store) -> None:
    stored = store.append("s", [user("one"), assistant("two"), user("three")])
    assert seqs(stored) == [1, 2, 3]
    assert texts(stored) == ["one", "two", "three"]


@check()
def a_later_append_continues_the_sequence(store: Store) -> None:
    store.append("s", [user("one"), assistant("two")])
    stored = store.append("s", [user("three")])
    assert seqs(stored) == [3]
    assert seqs(store.messages("s")) == [1, 2, 3]


@check()
def an_empty_append_stores_nothing(store: Store) -> None:
    assert store.append("s", []) == []
    assert store.messages("s") == []


@check()
def every_field_survives_a_round_trip(store: Store) -> None:
    call = {"id": "c1", "name": "weather", "args": {"city": "Zürich", "days": [1, 2]}}
    originals = [
        Message.create(
            "user",
            [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "x.png"}}],
            name="ana",
            metadata={"lang": "en", "nested": {"k": [1, 2.5, None, True]}},
            timestamp=1_700_000_000.123456,
        ),
        Message.create("assistant", "", tool_calls=[call], status="running", timestamp=1_700_000_001.5),
        Message.create("tool", "sunny, 23°C — 晴", tool_call_id="c1"),
    ]
    originals = [dataclasses.replace(m, token_count=i + 7) for i, m in enumerate(originals)]
    stored = store.append("s", originals)
    read = store.messages("s")
    assert read == stored
    for original, back in zip(originals, read, strict=True):
        assert dataclasses.replace(back, seq=None) == original


@check()
def messages_respect_after_and_through_seq(store: Store) -> None:
    fill(store, "s", 6)
    assert seqs(store.messages("s", after_seq=2)) == [3, 4, 5, 6]
    assert seqs(store.messages("s", after_seq=2, through_seq=4)) == [3, 4]
    assert seqs(store.messages("s", through_seq=1)) == [1]
    assert store.messages("s", after_seq=6) == []
    assert store.messages("s", after_seq=4, through_seq=4) == []


@check()
def messages_of_an_unknown_session_are_empty(store: Store) -> None:
    assert store.messages("nobody") == []
    assert store.tail("nobody", 5) == []
    assert store.get("nobody", [1, 2]) == []


@check()
def tail_returns_the_newest_messages_oldest_first(store: Store) -> None:
    fill(store, "s", 10)
    assert texts(store.tail("s", 3)) == ["m8", "m9", "m10"]
    assert seqs(store.tail("s", 50)) == list(range(1, 11))


@check()
def tail_before_seq_pages_backwards(store: Store) -> None:
    fill(store, "s", 10)
    assert seqs(store.tail("s", 3, before_seq=8)) == [5, 6, 7]
    assert seqs(store.tail("s", 3, before_seq=2)) == [1]
    assert store.tail("s", 3, before_seq=1) == []


@check()
def tail_with_a_non_positive_limit_is_empty(store: Store) -> None:
    fill(store, "s", 3)
    assert store.tail("s", 0) == []
    assert store.tail("s", -1) == []


@check()
def get_returns_requested_seqs_in_order_and_skips_missing(store: Store) -> None:
    fill(store, "s", 5)
    assert seqs(store.get("s", [4, 2, 99, 2, 0])) == [2, 4]
    assert store.get("s", []) == []


@check(cases=list(MALFORMED.values()), ids=list(MALFORMED))
def a_malformed_message_built_without_create_is_refused_and_nothing_changes(
    store: Store, bad: Message
) -> None:
    store.append("s", [Message.create("user", "before")])
    with raises(InvalidMessageError, match="nothing was stored"):
        store.append("s", [Message.create("user", "fine"), bad])
    assert texts(store.messages("s")) == ["before"]
    assert store.stats("s").message_count == 1
    assert seqs(store.append("s", [Message.create("user", "after")])) == [2]


@check()
def dict_content_never_reaches_the_log_so_later_reads_still_work(store: Store) -> None:
    with raises(InvalidMessageError, match="content of a user message must be a str or a list"):
        store.append("s", [dataclasses.replace(GOOD, content={"a": "b"})])  # type: ignore[arg-type]
    store.append("s", [Message.create("user", "next")])
    assert texts(store.messages("s")) == ["next"]
    assert texts(store.tail("s", 5)) == ["next"]


@check()
def a_refused_first_append_leaves_no_session_behind(store: Store) -> None:
    with raises(InvalidMessageError, match="nothing was stored"):
        store.append("s", [Message.create("user", "fine"), MALFORMED["role as a str"]], user_id="u")
    assert store.sessions() == []
    assert store.sessions(user_id="u") == []
    assert store.stats("s").message_count == 0


@check()
def append_takes_a_list_not_a_single_message(store: Store) -> None:
    with raises(InvalidMessageError, match="list of Message"):
        store.append("s", GOOD)  # type: ignore[arg-type]
    assert store.messages("s") == []


@check()
def a_message_built_directly_and_well_formed_is_stored(store: Store) -> None:
    direct = Message(role=Role.ASSISTANT, content="", tool_calls=(CALL,), status=TurnStatus.COMPLETED)
    [stored] = store.append("s", [direct])
    assert store.messages("s") == [stored]
    assert stored.tool_calls == (CALL,)


@check(cases=["user", "system", "assistant"])
def empty_text_is_stored_for_every_role(store: Store, role: str) -> None:
    store.append("s", [Message.create(role, "")])
    assert [m.content for m in store.messages("s")] == [""]


@check()
def set_status_changes_only_that_message(store: Store) -> None:
    store.append("s", [user("q"), dataclasses.replace(assistant("a"), status=TurnStatus.RUNNING)])
    updated = store.set_status("s", 2, TurnStatus.FAILED)
    assert updated.status is TurnStatus.FAILED
    assert updated.text == "a"
    assert [m.status for m in store.messages("s")] == [TurnStatus.COMPLETED, TurnStatus.FAILED]


@check()
def set_status_of_an_unknown_seq_raises(store: Store) -> None:
    fill(store, "s", 1)
    with raises(InvalidMessageError, match="seq=5"):
        store.set_status("s", 5, TurnStatus.CANCELLED)


@check(cases=[[None], ["c1", "c1"]], ids=["no id", "one id twice"])
def tool_calls_no_chat_api_could_answer_are_refused_and_nothing_stored(
    store: Store, ids: list[str | None]
) -> None:
    calls: list[dict[str, object]] = [{"id": call_id, "name": "f", "args": {}} for call_id in ids]
    with raises(InvalidMessageError, match="nothing was stored"):
        store.append("s", [user("Q"), Message.create("assistant", "", tool_calls=calls)])
    assert store.messages("s") == []


@check()
def the_question_an_answer_belongs_to_is_kept(store: Store) -> None:
    store.append("s", [user("Q1"), user("Q2")])
    answer = dataclasses.replace(Message.create("assistant", "A1", reply_to_seq=1), token_count=2)
    (stored,) = store.append("s", [answer, assistant("plain")])[:1]
    assert stored.reply_to_seq == 1
    assert [m.reply_to_seq for m in store.messages("s")] == [None, None, 1, None]
    assert [m.reply_to_seq for m in store.tail("s", 2)] == [1, None]
    assert store.get("s", [3])[0].reply_to_seq == 1
    assert store.set_status("s", 3, TurnStatus.FAILED).reply_to_seq == 1


@check()
def stats_count_messages_tokens_and_user(store: Store) -> None:
    store.append("s", [user("a", tokens=5), assistant("b", tokens=7)], user_id="ana")
    store.append("s", [user("c")])
    stats = store.stats("s")
    assert (stats.message_count, stats.last_seq, stats.total_tokens) == (3, 3, 12)
    assert stats.user_id == "ana"
    assert stats.created_at is not None and stats.updated_at is not None
    assert stats.created_at <= stats.updated_at


@check()
def stats_of_an_unknown_session_are_zero(store: Store) -> None:
    stats = store.stats("nobody")
    assert (stats.message_count, stats.last_seq, stats.total_tokens, stats.user_id) == (0, 0, 0, None)


@check()
def the_first_user_of_a_session_owns_it(store: Store) -> None:
    store.append("s", [user("a")])
    store.append("s", [user("b")], user_id="ana")
    store.append("s", [user("c")], user_id="ana")
    assert store.stats("s").user_id == "ana"
    assert store.sessions(user_id="ana") == ["s"]


@check()
def an_append_as_another_user_is_refused_and_stores_nothing(store: Store) -> None:
    store.append("s", [user("ana's secret")], user_id="ana")
    with raises(SessionOwnerError):
        store.append("s", [user("bob's question")], user_id="bob")
    assert [m.text for m in store.messages("s")] == ["ana's secret"]
    assert store.stats("s").user_id == "ana"
    assert store.sessions(user_id="bob") == []


@check()
def the_refusal_names_the_session_and_the_refused_user_not_the_owner(store: Store) -> None:
    store.append("shared-1", [user("a")], user_id="owner-ana")
    with raises(SessionOwnerError) as refused:
        store.append("shared-1", [user("b")], user_id="bob")
    assert "'shared-1'" in str(refused.value) and "'bob'" in str(refused.value)
    assert "owner-ana" not in str(refused.value)
    assert refused.value.owner_user_id == "owner-ana"


@check(cases=HOSTILE_IDS[:8])
def every_other_user_id_is_refused(store: Store, other: str) -> None:
    store.append("s", [user("a")], user_id="ana")
    with raises(SessionOwnerError):
        store.append("s", [user("b")], user_id=other)


@check()
def an_append_without_a_user_is_no_claim_on_an_owned_session(store: Store) -> None:
    store.append("s", [user("a")], user_id="ana")
    store.append("s", [assistant("b")])
    assert store.stats("s").user_id == "ana"
    assert store.forget_user("ana") == ["s"]
    assert store.messages("s") == []


@check()
def forget_user_deletes_what_the_user_wrote_and_nothing_of_another_user(store: Store) -> None:
    store.append("1", [user("ana's")], user_id="ana")
    with raises(SessionOwnerError):
        store.append("1", [user("bob's")], user_id="bob")
    store.append("2", [user("bob's")], user_id="bob")
    assert store.forget_user("bob") == ["2"]
    assert [m.text for m in store.messages("1")] == ["ana's"]
    assert store.messages("2") == []

"""The contract every store keeps: log generations, and deleting or replacing single messages."""

from __future__ import annotations

from .._errors import InvalidMessageError
from .._models import Message, TurnStatus
from .._stores.base import MAX_SEQ, Store
from ._data import (
    MALFORMED,
    assistant,
    fill,
    generation,
    seqs,
    texts,
    user,
)
from ._registry import OpenStore, check, raises


@check()
def a_new_log_has_a_generation(store: Store) -> None:
    fill(store, "s", 1)
    assert generation(store)


@check()
def a_session_with_no_log_has_no_generation(store: Store) -> None:
    assert generation(store, "never-written") is None


@check()
def appending_and_status_changes_keep_the_generation(store: Store) -> None:
    fill(store, "s", 2)
    before = generation(store)
    fill(store, "s", 1)
    store.set_status("s", 1, TurnStatus.FAILED)
    store.put_state("s", "k", "v")
    assert generation(store) == before


@check()
def two_sessions_have_different_generations(store: Store) -> None:
    fill(store, "a", 1)
    fill(store, "b", 1)
    assert generation(store, "a") != generation(store, "b")


@check()
def a_cleared_session_written_again_has_a_new_generation(store: Store) -> None:
    fill(store, "s", 2)
    before = generation(store)
    store.clear("s")
    fill(store, "s", 2)
    assert generation(store) not in (None, before)


@check()
def a_session_forgotten_with_its_user_and_written_again_has_a_new_generation(store: Store) -> None:
    store.append("s", [user("card 4111")], user_id="ana")
    before = generation(store)
    store.forget_user("ana")
    store.append("s", [user("hello")], user_id="bob")
    assert generation(store) not in (None, before)


@check()
def deleting_messages_changes_the_generation(store: Store) -> None:
    fill(store, "s", 3)
    before = generation(store)
    store.delete_messages("s", [2])
    assert generation(store) not in (None, before)


@check()
def replacing_a_message_changes_the_generation(store: Store) -> None:
    fill(store, "s", 3)
    before = generation(store)
    store.replace_message("s", 2, user("edited"))
    assert generation(store) not in (None, before)


@check()
def delete_messages_removes_only_those_and_returns_them(store: Store) -> None:
    fill(store, "s", 5)
    deleted = store.delete_messages("s", [4, 2])
    assert seqs(deleted) == [2, 4]
    assert texts(deleted) == ["m2", "m4"]
    assert texts(store.messages("s")) == ["m1", "m3", "m5"]
    assert store.get("s", [1, 2, 3, 4]) == store.messages("s", through_seq=3)


@check()
def delete_messages_updates_counts_and_tokens_but_never_reuses_a_seq(store: Store) -> None:
    store.append("s", [user("a", tokens=5), assistant("b", tokens=7), user("c", tokens=11)])
    store.delete_messages("s", [3])
    stats = store.stats("s")
    assert (stats.message_count, stats.last_seq, stats.total_tokens) == (2, 3, 12)
    assert seqs(store.append("s", [user("d")])) == [4]


@check()
def deleting_an_unknown_seq_deletes_nothing_and_names_it(store: Store) -> None:
    fill(store, "s", 3)
    with raises(InvalidMessageError, match="no message with seq 7"):
        store.delete_messages("s", [1, 7])
    assert texts(store.messages("s")) == ["m1", "m2", "m3"]
    assert store.stats("s").message_count == 3


@check()
def deleting_a_seq_twice_raises_the_second_time(store: Store) -> None:
    fill(store, "s", 2)
    store.delete_messages("s", [1])
    with raises(InvalidMessageError, match="seq 1"):
        store.delete_messages("s", [1])


@check()
def deleting_from_an_unknown_session_raises(store: Store) -> None:
    with raises(InvalidMessageError, match="no message with seq 1"):
        store.delete_messages("nobody", [1])
    assert store.sessions() == []


@check()
def deleting_no_seqs_changes_nothing(store: Store) -> None:
    fill(store, "s", 2)
    before = generation(store)
    assert store.delete_messages("s", []) == []
    assert generation(store) == before


@check(cases=[[0], [-1], [True], ["1"], [1.0], "1", 1])
def delete_messages_refuses_what_is_not_a_list_of_seqs(store: Store, bad: object) -> None:
    fill(store, "s", 2)
    with raises(InvalidMessageError, match="seq"):
        store.delete_messages("s", bad)  # type: ignore[arg-type]
    assert store.stats("s").message_count == 2


@check(cases=[2**53, 2**63, 2**64 + 1])
def a_seq_past_the_largest_is_refused_by_every_call_that_names_one(store: Store, huge: int) -> None:
    fill(store, "s", 2)
    for call in (
        lambda: store.delete_messages("s", [1, huge]),
        lambda: store.replace_message("s", huge, user("x")),
        lambda: store.set_status("s", huge, TurnStatus.FAILED),
    ):
        with raises(InvalidMessageError, match=f"up to {MAX_SEQ}"):
            call()
    assert texts(store.messages("s")) == ["m1", "m2"]


@check(cases=[2**53, 2**63, 2**64 + 1])
def reads_treat_a_seq_past_the_largest_as_absent_or_unbounded(store: Store, huge: int) -> None:
    fill(store, "s", 3)
    assert seqs(store.get("s", [2, huge, -huge])) == [2]
    assert seqs(store.messages("s", after_seq=1, through_seq=huge)) == [2, 3]
    assert store.messages("s", after_seq=huge) == []
    assert seqs(store.messages("s", after_seq=-huge)) == [1, 2, 3]
    assert seqs(store.tail("s", 2, before_seq=huge)) == [2, 3]
    assert store.tail("s", 2, before_seq=-huge) == []


@check()
def the_largest_seq_is_accepted(store: Store) -> None:
    fill(store, "s", 1)
    with raises(InvalidMessageError, match=f"no message with seq {MAX_SEQ}"):
        store.delete_messages("s", [MAX_SEQ])
    assert store.get("s", [MAX_SEQ]) == []


@check()
def tail_skips_deleted_messages_and_still_fills_its_limit(store: Store) -> None:
    fill(store, "s", 10)
    store.delete_messages("s", [7, 8, 9])
    assert texts(store.tail("s", 3)) == ["m5", "m6", "m10"]
    assert texts(store.tail("s", 2, before_seq=9)) == ["m5", "m6"]
    assert texts(store.tail("s", 50)) == ["m1", "m2", "m3", "m4", "m5", "m6", "m10"]


@check()
def tail_of_a_log_whose_newest_messages_were_all_deleted(store: Store) -> None:
    fill(store, "s", 40)
    store.delete_messages("s", list(range(3, 41)))
    assert texts(store.tail("s", 5)) == ["m1", "m2"]
    store.delete_messages("s", [1, 2])
    assert store.tail("s", 5) == []


@check()
def replace_message_keeps_the_seq_and_changes_the_rest(store: Store) -> None:
    store.append("s", [user("q", tokens=3), assistant("my card is 4111", tokens=9), user("next", tokens=2)])
    stored = store.replace_message("s", 2, assistant("my card is [removed]", tokens=6))
    assert stored.seq == 2 and stored.text == "my card is [removed]"
    assert store.messages("s")[1] == stored
    assert texts(store.messages("s")) == ["q", "my card is [removed]", "next"]
    stats = store.stats("s")
    assert (stats.message_count, stats.last_seq, stats.total_tokens) == (3, 3, 11)


@check()
def replacing_an_unknown_seq_raises_and_changes_nothing(store: Store) -> None:
    fill(store, "s", 2)
    with raises(InvalidMessageError, match="no message with seq 5"):
        store.replace_message("s", 5, user("x"))
    assert texts(store.messages("s")) == ["m1", "m2"]


@check(cases=list(MALFORMED.values()), ids=list(MALFORMED))
def a_malformed_replacement_is_refused_like_an_append(store: Store, bad: Message) -> None:
    fill(store, "s", 2)
    before = generation(store)
    with raises(InvalidMessageError):
        store.replace_message("s", 1, bad)
    assert texts(store.messages("s")) == ["m1", "m2"]
    assert generation(store) == before


@check(reopens=True)
def a_generation_is_seen_by_every_store_on_the_same_data(open_store: OpenStore) -> None:
    first, second = open_store(), open_store()
    try:
        fill(first, "s", 1)
        assert generation(second) == generation(first)
        second.delete_messages("s", [1])
        assert generation(first) == generation(second)
    finally:
        first.close()
        second.close()

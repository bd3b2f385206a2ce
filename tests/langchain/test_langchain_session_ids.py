"""A (user, session) pair maps to exactly one stored id, and no other pair reaches it.

``ConvMemSessions`` folds the user into the stored id. It used to escape ``/``
in the user id only, so ``history("alice/x")`` with no user read user alice's
session ``x``.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convmem import InMemoryStore, InvalidSessionIdError
from convmem._stores.base import MAX_ID_LENGTH
from langchain_convmem import ConvMemSessions
from langchain_convmem._history import split_storage_session_id, storage_session_id

# Ids are 1-256 characters without control characters; '/' and '%' are the interesting ones.
_CHARS = st.sampled_from("/%2F5ab ") | st.characters(exclude_categories=("Cc", "Cs"))
ids = st.text(_CHARS, min_size=1, max_size=20).filter(lambda text: text.strip() != "")
users = st.none() | ids


@given(ids, users)
def test_a_stored_id_gives_back_its_session_and_user(session: str, user: str | None) -> None:
    assert split_storage_session_id(storage_session_id(session, user)) == (session, user)


@given(ids, users, ids, users)
def test_two_different_pairs_never_share_a_stored_id(
    session: str, user: str | None, other_session: str, other_user: str | None
) -> None:
    if (session, user) != (other_session, other_user):
        assert storage_session_id(session, user) != storage_session_id(other_session, other_user)


def test_a_session_named_like_a_users_session_does_not_read_it() -> None:
    sessions = ConvMemSessions(store=InMemoryStore())
    sessions.history("x", "alice").add_user_message("alice's secret")
    intruder = sessions.history("alice/x", "")
    assert intruder.full_messages == []
    assert sessions.memory("alice/x", "").session_id != sessions.memory("x", "alice").session_id


def test_ids_without_a_slash_keep_the_stored_names_they_always_had() -> None:
    assert storage_session_id("chat-1") == "chat-1"
    assert storage_session_id("chat-1", "alice") == "alice/chat-1"
    assert storage_session_id("chat/1", "a/b") == "a%2Fb/chat/1"


def test_a_session_with_a_slash_and_no_user_is_stored_after_an_empty_user() -> None:
    assert storage_session_id("alice/x") == "/alice/x"


def test_a_session_id_too_long_once_stored_names_both_limits() -> None:
    with pytest.raises(InvalidSessionIdError, match="stored as '/' \\+ session_id"):
        storage_session_id("a/" + "b" * (MAX_ID_LENGTH - 2))

"""A returning user's chats that say much of learning and playing things and nothing of a
ukulele, and a request in passing about one: what every store must recall for it.

One message of the user holds "learning" and "hard" and is evidence by the share of its
words, but the user has not spoken of the request's subject, and every other message of
theirs that shares "play" or "thinking" with it is chance, not memory. Once they have
spoken of a ukulele, what they said of playing things is memory for it.
"""

from __future__ import annotations

from stored_messages import FILLER

from convmem import ConversationMemory, Store

__all__ = ["UKULELE", "check_unheard_subject"]

UKULELE = "I'm thinking about learning to play the ukulele. Is it hard?"

_SESSIONS = {
    "hindi": [
        ("user", "I've been learning Hindi, but it's hard to find time to practise."),
        ("assistant", "Short daily practice helps more than long weekly sessions."),
    ],
    "games": [
        ("user", "We play board games every Friday, I'm thinking of buying Azul."),
        ("assistant", "Azul is easy to teach and plays well with four."),
        ("user", "My nephew wants to play chess with me."),
        ("assistant", "Start with how each piece moves."),
    ],
    "keyboard": [
        ("user", "I'm thinking about a new keyboard for gaming, I play a lot."),
        ("assistant", "A mechanical keyboard with macro keys would suit you."),
    ],
}


def check_unheard_subject(store: Store) -> None:
    """Store the user's chats in `store`, ask `UKULELE` from a new chat, and assert what is
    recalled before and after the user speaks of a ukulele."""
    for session_id, items in _SESSIONS.items():
        memory = ConversationMemory(session_id, store, user_id="u")
        for role, text in [*items, *FILLER]:
            memory.add(role, text)
    new = ConversationMemory("new", store, user_id="u")

    texts = " ".join(item.text for item in new.build_context(query=UKULELE, budget=2048).recalled)
    assert "learning Hindi" in texts and "Short daily practice" in texts  # evidence, and its answer
    assert "board games" not in texts and "chess" not in texts and "keyboard" not in texts

    memory = ConversationMemory("music", store, user_id="u")
    memory.add_turn("A friend lent me her ukulele, I play it every evening.", "Lovely!")
    texts = " ".join(item.text for item in new.build_context(query=UKULELE, budget=2048).recalled)
    assert "lent me her ukulele" in texts and "board games" in texts and "chess" in texts

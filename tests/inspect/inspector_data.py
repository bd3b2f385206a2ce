"""Conversations the inspector's tests store: two users, hostile text, a session without a user."""

from __future__ import annotations

from convmem import ConversationMemory, MemoryConfig, Store

HOSTILE_TEXT = "<script>document.title='pwned'</script> [bold]not markup[/bold] & <b>bold?</b>"

ANA_PORTO = [
    ("Hi! I adopted a corgi called Pico last week.", "Congratulations! How old is Pico?"),
    ("He is two. We live in Porto, near the river.", "Porto is lovely for dog walks."),
    ("I also started a pottery class on Tuesdays.", "Pottery is a great hobby."),
    ("ok", "Anything else?"),
    ("What should I cook tonight?", "Try a mushroom risotto."),
    ("Thanks!", "You're welcome!"),
]
ANA_LISBON = [
    ("I am moving to Lisbon in June. I work as a ceramics designer.", "Exciting! A new city and a new job."),
    ("Can you suggest a beach near Lisbon?", "Carcavelos is easy to reach by train."),
]


def fill(store: Store) -> Store:
    """ana: two sessions; mallory: one with hostile text; one session without a user."""
    # A short window, so that turns leave it and a rolling summary is written.
    porto = ConversationMemory("ana-porto", store, MemoryConfig(keep_recent_turns=2), user_id="ana")
    for user, assistant in ANA_PORTO:
        porto.add_turn(user, assistant)
    porto.summarize_now()
    porto.close()
    lisbon = ConversationMemory("ana-lisbon", store, user_id="ana")
    for user, assistant in ANA_LISBON:
        lisbon.add_turn(user, assistant)
    lisbon.close()
    hostile = ConversationMemory("mallory-1", store, user_id="mallory")
    hostile.add_turn(HOSTILE_TEXT, "I will not run that.")
    hostile.close()
    anonymous = ConversationMemory("anon", store)
    anonymous.add_turn("Hello there", "Hi!")
    anonymous.close()
    return store

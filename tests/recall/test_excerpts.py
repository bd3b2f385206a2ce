"""How much of a long message recall shows: the passage that matched, and its neighbours
when the room the other candidates left allows."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stored_messages import COUNTER, FILLER, long_answer, store_messages

from convmem import InMemoryStore, Message, Recall, RecallConfig, SQLiteStore, Store
from convmem._recall.passages import LONG_MESSAGE_CHARS, passage_spans
from convmem._recall.rank import Ranked
from convmem._recall.render import render

# Two passages: the question matches the opening one, the answer sits in the other.
BOTTLES = (
    "To make the widest variety of gin cocktails, I recommend these five bottles:\n"
    "1. Sweet vermouth: a fortified wine that goes into the Negroni and the Manhattan. It adds a sweet, "
    "herbal note and keeps for a month in the fridge once opened.\n"
    "2. Dry vermouth: also a fortified wine, for the Martini and the Gibson. It is dry and crisp, and a "
    "half bottle is plenty if you only mix now and then.\n"
    "3. Campari: a bitter aperitif of the Negroni and the Americano. It is bright red and bitter, and it "
    "keeps for years on the shelf.\n\n"
    "4. Elderflower liqueur: sweet and floral, lovely with tonic, sparkling wine and fresh cucumber in "
    "the summer months, and a splash brightens a glass of lemonade for guests who skip alcohol.\n"
    "5. Absinthe: strong and herbal, rinsed through the glass for a Sazerac or a Corpse Reviver; a small "
    "bottle lasts a very long time.\n"
    "With these on the shelf you can make most classics, and you can add more later as your taste grows, "
    "perhaps a maraschino liqueur, an orange curacao or a good dry sherry for lighter drinks. Keep the "
    "vermouths cold, buy small bottles at first, and note which drinks your friends ask for again. A "
    "jigger, a long spoon, a shaker and a strainer are all the tools you need to begin."
)
QUESTION = "Which five bottles did you recommend for the widest variety of gin cocktails? The fifth one?"


def _recall(store: Store, max_tokens: int, query: str = QUESTION, config: RecallConfig | None = None):  # type: ignore[no-untyped-def]
    return Recall(config=config).search("s1", query, store=store, max_tokens=max_tokens, counter=COUNTER)


def _bottles_store(store: Store) -> Store:
    assert len(passage_spans(BOTTLES.strip())) == 2 and len(BOTTLES) > LONG_MESSAGE_CHARS
    store_messages(store, "s1", [("user", "Help me stock a home bar."), ("assistant", BOTTLES), *FILLER])
    return store


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_an_excerpt_is_shown_whole_when_the_room_left_holds_the_rest(kind: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    store = _bottles_store(InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "m.db"))
    roomy = _recall(store, 1000)
    (answer,) = [item for item in roomy.items if "widest variety" in item.text]
    assert "Absinthe" in answer.text and not answer.excerpt
    assert "(excerpt)" not in answer.text
    tight = _recall(store, answer.token_count - 40)
    (part,) = [item for item in tight.items if "widest variety" in item.text]
    assert part.excerpt and "Absinthe" not in part.text and "Assistant (excerpt): " in part.text


def test_an_excerpt_of_many_passages_widens_to_one_passage_on_each_side() -> None:
    answer = long_answer("For your cocktail bar, add a bottle of absinthe for the Sazerac rinse.", 12, 6)
    text = answer.strip()
    spans = passage_spans(text)
    (at,) = [i for i, (start, end) in enumerate(spans) if "absinthe" in text[start:end]]
    assert 1 <= at <= len(spans) - 2  # neighbours on both sides, and more beyond them
    store = InMemoryStore()
    store_messages(store, "s1", [("user", "Help me stock a cocktail bar."), ("assistant", answer), *FILLER])
    result = _recall(store, 3000, "Which bottle did you say the Sazerac rinse needs?")
    (item,) = [item for item in result.items if "absinthe" in item.text]
    assert item.excerpt
    shown = text[spans[at - 1][0] : spans[at + 1][1]].strip()
    assert f"Assistant (excerpt): …{shown}…" in item.text
    outside = [text[s:e].strip() for i, (s, e) in enumerate(spans) if abs(i - at) > 1]
    assert outside and not any(part in item.text for part in outside)


def test_widened_excerpts_keep_the_section_within_its_cap_at_every_size() -> None:
    store = _bottles_store(InMemoryStore())
    store_messages(
        store,
        "s1",
        [("assistant", long_answer("The gin cocktails want a bottle of absinthe for the rinse.", 12, 6))],
    )
    shown_whole = 0
    for max_tokens in range(40, 900, 13):
        result = _recall(store, max_tokens)
        assert result.tokens <= max_tokens
        assert sum(item.token_count + 1 for item in result.items) <= max_tokens
        assert all(COUNTER.count_text(item.text) == item.token_count for item in result.items)
        assert result.tokens == COUNTER.count_text(result.text)
        shown_whole += any("Absinthe" in item.text and not item.excerpt for item in result.items)
    assert shown_whole  # the larger caps show the list whole


def test_widened_excerpts_can_be_turned_off() -> None:
    store = _bottles_store(InMemoryStore())
    result = _recall(store, 1000, config=RecallConfig(widened_excerpts=0))
    (part,) = [item for item in result.items if "widest variety" in item.text]
    assert part.excerpt and "Absinthe" not in part.text
    assert not any(d.reason == "room given to more of the best item" for d in result.dropped)


@pytest.mark.parametrize(
    ("request_", "told"),
    [
        ("Which five bottles give the widest variety of gin cocktails?", []),  # stands on its own
        # speaks of the user in passing, who has spoken of the party before
        (
            "I'm throwing a party tonight, which five bottles give the widest variety of gin cocktails?",
            [("user", "I'm throwing a party tonight for friends who love gin."), ("assistant", "Fun!")],
        ),
    ],
)
def test_a_request_that_does_not_ask_about_the_history_keeps_the_excerpt(
    request_: str, told: list[tuple[str, str]]
) -> None:
    store = _bottles_store(InMemoryStore())
    store_messages(store, "s1", told)
    result = _recall(store, 1000, request_)
    (part,) = [item for item in result.items if "widest variety" in item.text]
    assert part.excerpt and "Absinthe" not in part.text


def test_the_best_item_may_take_the_room_of_the_weakest_to_be_shown_whole() -> None:
    store = _bottles_store(InMemoryStore())
    store_messages(
        store,
        "s1",
        [
            ("user", "I mostly drink gin cocktails with tonic in the summer."),
            ("assistant", "A gin and tonic with cucumber is a lovely summer drink."),
            ("user", "My friend likes bitter gin cocktails best."),
            ("assistant", "Then a Negroni or a Jungle Bird would suit your friend."),
        ],
    )
    evictions = 0
    for max_tokens in range(60, 700, 7):
        result = _recall(store, max_tokens)
        assert result.tokens <= max_tokens
        assert sum(item.token_count + 1 for item in result.items) <= max_tokens
        given = [d for d in result.dropped if d.reason == "room given to more of the best item"]
        best = max(result.items, key=lambda item: item.score)
        if given:
            evictions += 1
            assert "widest variety" in best.text and "Absinthe" in best.text and not best.excerpt
            assert all(d.tokens > 0 for d in given)
    assert evictions  # some caps hold the whole list only by leaving a weaker item out


# -- the section's rules, whatever the candidates ----------------------------------------------

_WORDS = st.sampled_from(["gin", "tonic", "bottle", "the", "Negroni", "lime", "ice", "bar", "5.", "—", "酒"])


@st.composite
def _section_case(
    draw: st.DrawFn,
) -> tuple[dict[int, Message], list[int], dict[int, tuple[int, int]], int, int]:
    count = draw(st.integers(1, 8))
    shown: dict[int, Message] = {}
    excerpts: dict[int, tuple[int, int]] = {}
    for seq in range(1, count + 1):
        words = draw(st.integers(3, 700))
        text = " ".join(draw(st.lists(_WORDS, min_size=words, max_size=words)))
        if draw(st.booleans()):
            text = text.replace(" the ", "\n\n", 3)
        role = draw(st.sampled_from(["user", "assistant"]))
        message = Message.create(role, text, timestamp=1_700_000_000 + seq * 50_000)
        shown[seq] = dataclasses.replace(message, seq=seq)
        spans = passage_spans(text.strip())
        if len(spans) > 1:
            excerpts[seq] = spans[draw(st.integers(0, len(spans) - 1))]
    order = draw(st.permutations(sorted(shown)))
    return shown, list(order), excerpts, draw(st.integers(0, 3)), draw(st.integers(1, 1500))


@settings(max_examples=300, deadline=None)
@given(_section_case())
def test_widened_excerpts_keep_every_rule_of_the_section(case) -> None:  # type: ignore[no-untyped-def]
    shown, order, excerpts, widen, max_tokens = case
    rendered = render(
        [Ranked(seq, 1.0 - at / 100, None) for at, seq in enumerate(order)],
        item_seqs={seq: (seq,) for seq in shown},
        messages=shown,
        vectors={},
        language="en",
        max_tokens=max_tokens,
        counter=COUNTER,
        config=RecallConfig(),
        excerpts=excerpts,
        widen=widen,
    )
    assert rendered.tokens <= max_tokens and rendered.tokens == COUNTER.count_text(rendered.text)
    assert sum(item.token_count + 1 for item in rendered.items) <= max_tokens
    seqs = [item.seqs[0] for item in rendered.items]
    assert seqs == sorted(set(seqs))  # log order, each message once
    for item in rendered.items:
        (seq,) = item.seqs
        assert item.token_count == COUNTER.count_text(item.text)
        text = shown[seq].text.strip()
        if seq not in excerpts:
            assert not item.excerpt and text in item.text
            continue
        start, end = excerpts[seq]
        assert text[start:end].strip() in item.text  # the passage that matched is always shown
        assert item.excerpt == (text not in item.text)
        assert widen or item.excerpt  # nothing widens when nothing may

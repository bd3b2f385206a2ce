"""Filling the recall section encodes only what may fit: a long message ranked below the
last one that fit is left out on a bound of its tokens, with the same result."""

from __future__ import annotations

import dataclasses

from convmem import Message, RecallConfig, TiktokenCounter
from convmem._recall.rank import Ranked
from convmem._recall.render import render


class Spy(TiktokenCounter):
    """Counts as tiktoken does and remembers what it encoded."""

    def __init__(self, *, bound: bool = True) -> None:
        super().__init__()
        self.counted: list[str] = []
        if not bound:
            self.at_least = None  # type: ignore[assignment,method-assign]

    def count_text(self, text: str) -> int:
        self.counted.append(text)
        return super().count_text(text)


LONG = "The committee reviewed every budget line for the new library wing in detail. " * 60


def messages() -> dict[int, Message]:
    texts = ["I moved to Lisbon in May.", LONG, "My sister visits in June.", "We like the tram."]
    return {
        seq: dataclasses.replace(Message.create("user", text, timestamp=1_700_000_000 + seq), seq=seq)
        for seq, text in enumerate(texts, 1)
    }


def fill(counter: TiktokenCounter, max_tokens: int) -> tuple[object, ...]:
    ranked = [Ranked(seq, 1.0 - seq / 10, None) for seq in (1, 2, 3, 4)]
    rendered = render(
        ranked,
        item_seqs={seq: (seq,) for seq in (1, 2, 3, 4)},
        messages=messages(),
        vectors={},
        language="en",
        max_tokens=max_tokens,
        counter=counter,
        config=RecallConfig(),
    )
    return rendered.items, rendered.text, rendered.tokens


def test_a_long_message_over_the_room_is_left_out_without_encoding_it() -> None:
    bounded, exact = Spy(), Spy(bound=False)

    result = fill(bounded, 80)

    assert result == fill(exact, 80)
    assert "Lisbon" in str(result[1]) and "tram" in str(result[1])
    assert "committee" not in str(result[1])
    assert not any("committee" in text for text in bounded.counted)
    assert any("committee" in text for text in exact.counted)


def test_a_long_message_that_fits_is_counted_and_recalled() -> None:
    bounded = Spy()

    items, text, tokens = fill(bounded, 4000)

    assert "committee" in str(text)
    assert tokens == TiktokenCounter().count_text(str(text))
    assert len(items) == 4  # type: ignore[arg-type]


def test_what_is_recalled_does_not_depend_on_what_earlier_searches_counted() -> None:
    # Fifty lines of few words and many tokens, then a short one: whether the section is
    # full is decided on bounds of their tokens, whichever exact counts a cache holds.
    texts = {seq: "/".join(f"path{seq}x{part}" for part in range(6)) for seq in range(1, 51)}
    texts[51] = "We like the tram."
    shown = {
        seq: dataclasses.replace(Message.create("user", text, timestamp=1_700_000_000 + seq), seq=seq)
        for seq, text in texts.items()
    }
    ranked = [Ranked(seq, 1.0 - seq / 100, None) for seq in shown]

    def section(max_tokens: int, cache: dict) -> tuple[object, ...]:  # type: ignore[type-arg]
        rendered = render(
            ranked,
            item_seqs={seq: (seq,) for seq in shown},
            messages=shown,
            vectors={},
            language="en",
            max_tokens=max_tokens,
            counter=TiktokenCounter(),
            config=RecallConfig(),
            line_cache=cache,
        )
        return rendered.items, rendered.text, rendered.tokens

    counted: dict = {}  # type: ignore[type-arg]
    section(100_000, counted)  # an earlier search counted every line exactly
    assert len(counted) == 51
    for max_tokens in range(20, 400, 3):
        assert section(max_tokens, {}) == section(max_tokens, dict(counted)), max_tokens

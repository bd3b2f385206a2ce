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

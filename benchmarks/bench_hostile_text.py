"""Long text of hostile shapes: does reading it cost what reading ordinary text of its length costs?

A query or a message is read by rules (what a query asks, whom it is about; what a
message states about the user). A rule that searches a long run with no end for it
from each of its characters costs the square of the text's length: a 20,000-character
query with a first person and no question mark took about 10 s to build a context for.
This prints, for texts of about 20,000 characters in shapes that reach the rules' worst
cases, the time of one ``build_context(query=text)`` and of one ``add(text)``, each
beside the same for ordinary text of the same length ("word word ..."), measured in the
same run.

Usage::

    python benchmarks/bench_hostile_text.py
    python benchmarks/bench_hostile_text.py --chars 40000
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable, Sequence

from convmem import ConversationMemory, InMemoryStore

SHAPES = {
    "ordinary words": "word ",
    "first person, no question mark": "I word ",
    "my, no question mark": "my word ",
    "Chinese first person": "我 ",
    "commas then a question": "I have a, ",
    "past verbs, no 'the'": "did ",
    "request verbs, no colon": "fix ",
    "a past-pointing phrase": "last time I said ",
    "my name is": "my name is ",
    "I live in": "I live in ",
    "我喜欢": "我喜欢",
    "我叫": "我叫",
    "apostrophes": "I'm it's ",
    "dashes": "I - a ",
}


def _history() -> ConversationMemory:
    memory = ConversationMemory("hostile", InMemoryStore(), user_id="u")
    for index in range(30):
        memory.add_turn(f"I like hiking trip {index} and my dog Rex loves the beach.", f"Noted ({index}).")
    return memory


def _add(text: str) -> None:
    fresh = ConversationMemory("add", InMemoryStore(), user_id="u")
    fresh.add("user", text)
    fresh.flush()


def _median_ms(run: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=20_000, help="length of each text (default 20,000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the median is printed")
    args = parser.parse_args(argv)
    memory = _history()
    rows = []
    for name, unit in SHAPES.items():
        text = unit * (args.chars // len(unit))
        build = _median_ms(
            functools.partial(memory.build_context, query=text, budget=4 * args.chars), args.repeat
        )
        rows.append((name, len(text), build, _median_ms(functools.partial(_add, text), args.repeat)))
    base_build, base_add = rows[0][2], rows[0][3]
    print(
        f"{'text of the shape':<34} {'chars':>7} {'build ms':>9} {'x words':>8} {'add ms':>8} {'x words':>8}"
    )
    for name, chars, build, add_ms in rows:
        print(
            f"{name:<34} {chars:>7} {build:>9.1f} {build / base_build:>8.1f} {add_ms:>8.1f} {add_ms / base_add:>8.1f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

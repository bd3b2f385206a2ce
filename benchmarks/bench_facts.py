"""The offline fact extractor against the statement table: precision, recall, speed.

    python benchmarks/bench_facts.py [--rounds N] [--quiet]

Runs `RuleFactExtractor` over every statement of `tests/fact_statements.py`
(one user message each) and prints precision and recall over all statements
and per language, the table's composition, the mean time per message over N
rounds (default 20), and every wrong or missed fact.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fact_statements import STATEMENTS, outcomes, score

from convmem import Message, RuleFactExtractor


def microseconds_per_message(rounds: int) -> float:
    extractor = RuleFactExtractor()
    messages = [
        dataclasses.replace(Message.create("user", s.text), seq=n) for n, s in enumerate(STATEMENTS, 1)
    ]
    for message in messages:  # warm the regex caches
        extractor.extract([message])
    started = time.perf_counter()
    for _ in range(rounds):
        for message in messages:
            extractor.extract([message])
    return (time.perf_counter() - started) / (rounds * len(messages)) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quiet", action="store_true", help="figures only, not the misses")
    args = parser.parse_args()

    results = outcomes(RuleFactExtractor().extract)
    by_language = {language: [s for s in STATEMENTS if s.language == language] for language in ("en", "zh")}
    silent = [s for s in STATEMENTS if not s.facts]
    negations = [s for s in STATEMENTS if any(negated for *_, negated in s.facts)]
    print(
        f"table: {len(STATEMENTS)} statements ({len(by_language['en'])} English, {len(by_language['zh'])} Chinese); "
        f"{len(silent)} must yield nothing, {len(negations)} state a negation, "
        f"{sum(len(s.facts) for s in STATEMENTS)} expected facts"
    )
    for label, language in (("all", None), ("English", "en"), ("Chinese", "zh")):
        figures = score(results, language)
        print(
            f"{label:>8}: precision {figures.precision:.3f}  recall {figures.recall:.3f}  "
            f"(found {figures.found}, wrong {figures.wrong}, missed {figures.missed})"
        )
    noisy = [r for r in results if not r.statement.facts and r.got]
    print(f"must-yield-nothing statements that yielded something: {len(noisy)} of {len(silent)}")
    print(f"speed: {microseconds_per_message(args.rounds):.1f} µs per message (mean over the table)")
    if args.quiet:
        return
    for result in results:
        if result.wrong or result.missed:
            print(f"\n  {result.statement.text}")
            for fact in sorted(result.wrong):
                print(f"    wrong  {fact}")
            for fact in sorted(result.missed):
                print(f"    missed {fact}")


if __name__ == "__main__":
    main()

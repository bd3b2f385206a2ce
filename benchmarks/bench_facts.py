"""The offline fact extractor against the statement table: precision, recall, speed.

    python benchmarks/bench_facts.py [--rounds N] [--quiet]

Runs `RuleFactExtractor` over every statement of `tests/fact_statements.py`
(one user message each) and prints precision and recall over the table, per
language, and over the held-out statements (never tuned on); the table's
composition; the time per message on the table and on the synthetic chat of
the other benchmarks (CPU time of the fastest of N passes, default 20: on a
shared machine wall time and the slower passes measure the neighbours); and
every wrong or missed fact.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _history import history
from fact_statements import HELD_OUT, STATEMENTS, Outcome, Statement, outcomes, score

from convmem import Message, RuleFactExtractor


def microseconds_per_message(texts: Sequence[str], rounds: int) -> float:
    """CPU time of the fastest of `rounds` passes over `texts`, one user message each."""
    extractor = RuleFactExtractor()
    messages = [dataclasses.replace(Message.create("user", text), seq=n) for n, text in enumerate(texts, 1)]
    for message in messages:  # warm the regex caches
        extractor.extract([message])
    fastest = float("inf")
    for _ in range(rounds):
        started = time.thread_time()
        for message in messages:
            extractor.extract([message])
        fastest = min(fastest, time.thread_time() - started)
    return fastest / len(messages) * 1e6


def print_composition(statements: Sequence[Statement], label: str) -> None:
    english = sum(statement.language == "en" for statement in statements)
    silent = sum(not statement.facts for statement in statements)
    negations = sum(any(negated for *_, negated in statement.facts) for statement in statements)
    print(
        f"{label}: {len(statements)} statements ({english} English, {len(statements) - english} Chinese); "
        f"{silent} must yield nothing, {negations} state a negation, "
        f"{sum(len(statement.facts) for statement in statements)} expected facts"
    )


def print_figures(results: Sequence[Outcome]) -> None:
    for label, language in (("all", None), ("English", "en"), ("Chinese", "zh")):
        figures = score(results, language)
        print(
            f"{label:>10}: precision {figures.precision:.3f}  recall {figures.recall:.3f}  "
            f"(found {figures.found}, wrong {figures.wrong}, missed {figures.missed})"
        )
    silent = [result for result in results if not result.statement.facts]
    noisy = [result for result in silent if result.got]
    print(f"{'':>10}  must-yield-nothing statements that yielded something: {len(noisy)} of {len(silent)}")


def print_misses(results: Sequence[Outcome]) -> None:
    for result in results:
        if result.wrong or result.missed:
            print(f"\n  {result.statement.text}")
            for fact in sorted(result.wrong):
                print(f"    wrong  {fact}")
            for fact in sorted(result.missed):
                print(f"    missed {fact}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--quiet", action="store_true", help="figures only, not the misses")
    args = parser.parse_args()

    extract = RuleFactExtractor().extract
    table, held_out = outcomes(extract), outcomes(extract, HELD_OUT)
    print_composition(STATEMENTS, "table")
    print_figures(table)
    print_composition(HELD_OUT, "held out")
    print_figures(held_out)
    chat = [text for role, text in history(400, seed=11) if role == "user"]
    print(
        f"speed: {microseconds_per_message([s.text for s in STATEMENTS], args.rounds):.1f} µs per message "
        f"on the table, {microseconds_per_message(chat, args.rounds):.1f} µs on the synthetic chat "
        f"(CPU time, fastest of {args.rounds} passes)"
    )
    if not args.quiet:
        print_misses(table)
        print_misses(held_out)


if __name__ == "__main__":
    main()

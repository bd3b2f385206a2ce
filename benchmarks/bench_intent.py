"""Which queries point to the past: precision and recall of `points_to_past` on the labelled table.

    python benchmarks/bench_intent.py [--quiet]

Scores the detector on `tests/past_queries.py` (half English, half Chinese;
30% held out while it was tuned) and prints precision and recall per half and
per language, then every query it gets wrong with the reason it gave. When
LoCoMo is at hand (``../shared/data/locomo-dev.json``, or ``$CONVMEM_LOCOMO``)
it also prints how many of LoCoMo's questions the detector sends to recall, by
category: those questions are about the two friends' conversation, so nearly
all should.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from past_queries import HELD_OUT, KINDS, QUERIES, TUNING, Query, score

from convmem._recall.intent import past_cue, points_to_past


def print_figures(label: str, queries: Sequence[Query]) -> None:
    for language in (None, "en", "zh"):
        figures = score(points_to_past, queries, language)
        count = sum(language in (None, query.language) for query in queries)
        print(
            f"{label:>9} {language or 'all':>3}: {count:3} queries  precision {figures.precision:.3f}  "
            f"recall {figures.recall:.3f}  (wrongly past {len(figures.false_positives)}, "
            f"missed {len(figures.false_negatives)})"
        )


def print_misses(label: str, queries: Sequence[Query]) -> None:
    figures = score(points_to_past, queries)
    for query in figures.false_positives:
        print(f"  {label}: wrongly past  [{query.kind}] {query.text}  ({past_cue(query.text)})")
    for query in figures.false_negatives:
        print(f"  {label}: missed        [{query.kind}] {query.text}")


def locomo_path() -> Path | None:
    configured = os.environ.get("CONVMEM_LOCOMO")
    if configured:
        return Path(configured)
    for parent in Path(__file__).resolve().parents[1:4]:
        candidate = parent / "shared" / "data" / "locomo-dev.json"
        if candidate.is_file():
            return candidate
    return None


def print_locomo(path: Path) -> None:
    flagged: Counter[int] = Counter()
    asked: Counter[int] = Counter()
    for sample in json.loads(path.read_text(encoding="utf-8")):
        for question in sample["qa"]:
            asked[question["category"]] += 1
            flagged[question["category"]] += points_to_past(question["question"])
    answerable = [category for category in asked if category != 5]
    print(
        f"LoCoMo questions sent to recall: categories 1-4 {sum(flagged[c] for c in answerable)} of "
        f"{sum(asked[c] for c in answerable)}; "
        + ", ".join(f"c{category} {flagged[category]}/{asked[category]}" for category in sorted(asked))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quiet", action="store_true", help="figures only, not the misses")
    args = parser.parse_args()

    kinds = Counter(query.kind for query in QUERIES)
    print(
        f"table: {len(QUERIES)} queries ({sum(q.language == 'en' for q in QUERIES)} English), "
        f"{sum(q.past for q in QUERIES)} point to the past; {len(TUNING)} tuned on, {len(HELD_OUT)} held out; "
        + ", ".join(f"{kind} {kinds[kind]}" for kind in KINDS)
    )
    print_figures("tuning", TUNING)
    print_figures("held out", HELD_OUT)
    print_figures("all", QUERIES)
    path = locomo_path()
    if path is not None:
        print_locomo(path)
    if not args.quiet:
        print_misses("tuning", TUNING)
        print_misses("held out", HELD_OUT)


if __name__ == "__main__":
    main()

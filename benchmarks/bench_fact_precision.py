"""The rule fact extractor on real chats: how many of the facts it emits are true, against hand labels.

    python benchmarks/bench_fact_precision.py [--unlabelled] [--data DIR]

Runs `RuleFactExtractor` over the 48 LongMemEval dev histories (each session as
the extractor sees it: user turns as the user, assistant turns as the
assistant) and the LoCoMo conversations (every turn a user message named after
its speaker), from ``../shared/data`` at run time, and scores what it emits
against ``tests/real_chat_fact_labels.jsonl`` (see ``tests/real_chat_facts.py``
for what the verdicts mean). Prints per data set: facts emitted, precision over
the labelled ones, how many facts labelled good it still emits (recall of the
good ones), facts not labelled yet, and preference-like facts whose thing is only
a little word ("loves: it's"). With ``--unlabelled`` it also lists the facts not
labelled yet with the sentence they came from, for a person to label.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from real_chat_facts import SOURCES, data_dir, find_facts, load_labels, names_nothing, score

from convmem import RuleFactExtractor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=None, help="folder holding the two data files")
    parser.add_argument("--unlabelled", action="store_true", help="list the facts not labelled yet")
    args = parser.parse_args()
    folder = args.data or data_dir()
    if folder is None:
        sys.exit(
            "no data: put longmemeval-s-dev.json.gz and locomo-dev.json in ../shared/data or pass --data"
        )

    started = time.perf_counter()
    found = find_facts(folder, RuleFactExtractor().extract)
    seconds = time.perf_counter() - started
    labels = load_labels()
    print(f"{len(labels)} labels; extraction over both data sets took {seconds:.1f} s")
    for source in (*SOURCES, None):
        figures = score(found, labels, source)
        emitted = [item for item in found if source in (None, item.source)]
        print(
            f"{source or 'all':>12}: {len(emitted):4} facts emitted  precision {figures.precision:.3f} "
            f"({figures.good} good, {figures.bad} not)  good ones still emitted {figures.good}/"
            f"{figures.good_labelled} ({figures.recall:.3f})  unlabelled {figures.unlabelled}  "
            f"naming nothing {sum(names_nothing(item.fact) for item in emitted)}"
        )
    if args.unlabelled:
        for item in found:
            if item.label_key not in labels:
                fact = item.fact
                print(
                    f"  {item.source} {item.sample} s{item.session} t{item.turn} "
                    f"{fact.speaker + ' ' if fact.speaker else ''}{fact.key} = {fact.value}"
                    f"{' (negated)' if fact.negated else ''}  << {fact.source}"
                )


if __name__ == "__main__":
    main()

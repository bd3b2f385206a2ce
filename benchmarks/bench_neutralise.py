"""Neutralising stored text by meaning: what it costs per recalled passage.

Every recalled passage, summary and fact line goes through `neutralise_stored_text`
before it enters the memory block. It now looks for memory tags and section headers
in a normalised view of the text (NFKC, case-folded, invisible characters left out)
and splits lines at every Unicode line break. This prints the median time per
passage of that check, uncached and as a cache hit (what a build pays for a passage
recalled before), next to the byte-level check it replaced (an ASCII regex and
``split("\\n")``) measured in the same run, on LoCoMo's turns (English) and on the
same turns with Chinese and full-width text added. Run:

    python benchmarks/bench_neutralise.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from convmem._language import _HEADER_LINES, _neutralise, neutralise_stored_text

_BYTES_TAG = re.compile(r"<(\s*/?\s*memory\b[^>]*)>", re.IGNORECASE)


def by_bytes(text: str) -> str:
    """The check before: an ASCII tag regex, lines split at ``\\n`` only."""
    text = _BYTES_TAG.sub(r"&lt;\1>", text)
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if line.lstrip().casefold().startswith(_HEADER_LINES):
            lines[index] = "> " + line
    return "\n".join(lines)


def data_path() -> Path:
    env = os.environ.get("CONVMEM_LOCOMO")
    if env:
        return Path(env)
    for parent in Path(__file__).resolve().parents[1:4]:
        candidate = parent / "shared" / "data" / "locomo-dev.json"
        if candidate.exists():
            return candidate
    raise SystemExit("locomo-dev.json not found: set CONVMEM_LOCOMO")


def passages(quick: bool) -> list[str]:
    """Recalled passages as recall renders them: ``Speaker: text``, two turns each."""
    samples = json.loads(data_path().read_text(encoding="utf-8"))
    lines = []
    for sample in samples[:1] if quick else samples:
        conversation = sample["conversation"]
        for key in sorted(k for k in conversation if re.fullmatch(r"session_\d+", k)):
            lines += [f"{turn['speaker']}: {turn['text']}" for turn in conversation[key]]
    return ["\n".join(lines[i : i + 2]) for i in range(0, len(lines) - 1, 2)]


def per_passage(check: Callable[[str], str], texts: Sequence[str], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for text in texts:
            check(text)
        samples.append((time.perf_counter() - start) / len(texts))
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one conversation, fewer repeats")
    args = parser.parse_args()
    repeat = 5 if args.quick else 15
    english = passages(args.quick)
    mixed = [f"{text}（我记得，ＯＫ）" for text in english]
    print(f"{len(english)} passages of two LoCoMo turns, median of {repeat} runs, per passage")
    print(f"{'text':<22}{'bytes (before)':>16}{'meaning':>12}{'ratio':>8}{'cache hit':>12}")
    for label, texts in (("English", english), ("with CJK, full-width", mixed)):
        before = per_passage(by_bytes, texts, repeat)
        now = per_passage(_neutralise, texts, repeat)
        for text in texts:  # fill the cache a build keeps
            neutralise_stored_text(text)
        hit = per_passage(neutralise_stored_text, texts, repeat)
        print(
            f"{label:<22}{before * 1e6:>13.2f} µs{now * 1e6:>9.2f} µs{now / before:>7.1f}x{hit * 1e6:>9.2f} µs"
        )


if __name__ == "__main__":
    main()

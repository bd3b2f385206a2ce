"""Turn evidence recall on LongMemEval: a returning user's long history, asked from a new chat.

Each question of ``../shared/data/longmemeval-s-dev.json.gz`` comes with one
user's history of about 50 sessions (about 480 turns, 115k tokens; assistant
answers of 2-5k characters). Every haystack session is stored, in date order,
as its own session of one user in a `SQLiteStore` (the session date as the
messages' timestamps, a minute per turn), through ``ConversationMemory.add``
with the defaults (facts and summary included). The question is then asked
from a new, empty session of that user, and the built context is scored:

- turn evidence recall: the share of the question's ``has_answer`` turns that
  reached the context (the turn's whole text, or a recalled excerpt of it:
  recall shows the matching part of a long message; the "whole" column counts
  whole turns only);
- the same per question type;
- whether the gold answer appears in the context (answers of at most six
  words, case-insensitive: "ans");
- the context's mean tokens, and the memory tokens (facts, summary and recall
  sections) given to five requests that need no memory ("Translate 'good
  morning' into French.", ...), asked from the same new chat, to 590 more
  (`NO_MEMORY_REQUESTS_HELD_OUT`: coding, math, translation, writing, small talk,
  in English and Chinese; written twenty or forty at a time, and recall's rules were
  changed for what it did with some of each set), and to 20 never looked at
  one by one, written after recall's last changes (`NO_MEMORY_REQUESTS_FRESH`);
- the headline figures again for the questions at odd and at even places: a
  rule that holds on one half and not on the other is a fit, not a rule.

Rows, side by side in one run, under the same budgets (1024, 2048, 4096):

  defaults, no model   ``ConversationMemory(session_id, store, user_id=...)``
  defaults + MiniLM    the same with ``embedder=`` all-MiniLM-L6-v2
  BM25 top-k           a pure-Python BM25 over the turns, best first, packed into the budget
  MiniLM top-k         the turns embedded with MiniLM, most similar first, packed
  most recent turns    the newest turns that fit (what ``trim_messages`` keeps)

MiniLM vectors are cached on disk, keyed by (model, sha256(text)), under
``$CONVMEM_BENCH_CACHE`` (default: a folder in the temp directory): the first
run embeds every text (slow on a small machine), later runs read them back.
The output says how many came from the cache.

Usage::

    python benchmarks/longmemeval_recall.py                  # all 48 dev questions
    python benchmarks/longmemeval_recall.py --quick          # 12 (two of each type)
    python benchmarks/longmemeval_recall.py --questions 24 --no-minilm
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _longmemeval import (
    NO_MEMORY_REQUESTS,
    NO_MEMORY_REQUESTS_FRESH,
    NO_MEMORY_REQUESTS_HELD_OUT,
    QUESTION_TYPES,
    SHORT_TYPES,
    PlainBM25,
    Question,
    default_data_path,
    load_questions,
    pick,
    turn_timestamp,
)
from _vector_cache import CachedEmbedder

from convmem import ConversationMemory, SQLiteStore, TiktokenCounter

BUDGETS = (1024, 2048, 4096)
MEMORY_SECTIONS = ("facts", "summary", "recall")


@dataclasses.dataclass
class Scores:
    """One method at one budget."""

    recall: dict[str, list[float]] = dataclasses.field(default_factory=lambda: defaultdict(list))
    whole: list[float] = dataclasses.field(default_factory=list)
    answer_found: list[bool] = dataclasses.field(default_factory=list)
    tokens: list[int] = dataclasses.field(default_factory=list)
    items: list[int] = dataclasses.field(default_factory=list)
    build_ms: list[float] = dataclasses.field(default_factory=list)
    no_memory_tokens: list[int] = dataclasses.field(default_factory=list)
    no_memory_items: list[int] = dataclasses.field(default_factory=list)
    no_memory_recall: list[int] = dataclasses.field(default_factory=list)
    held_out_tokens: list[int] = dataclasses.field(default_factory=list)
    """Memory tokens given to `NO_MEMORY_REQUESTS_HELD_OUT`."""
    held_out_items: list[int] = dataclasses.field(default_factory=list)
    fresh_tokens: list[int] = dataclasses.field(default_factory=list)
    """Memory tokens given to `NO_MEMORY_REQUESTS_FRESH`."""
    halves: dict[int, Scores] = dataclasses.field(default_factory=dict)
    """The same figures for the questions at even (0) and odd (1) places."""

    def record_no_memory(self, request: str, tokens: int, items: int, recall_tokens: int) -> None:
        """What a request that needs no memory got: its memory tokens, recalled items and
        recall's tokens, under the list `request` belongs to."""
        if request in NO_MEMORY_REQUESTS:
            self.no_memory_tokens.append(tokens)
            self.no_memory_items.append(items)
            self.no_memory_recall.append(recall_tokens)
        elif request in NO_MEMORY_REQUESTS_HELD_OUT:
            self.held_out_tokens.append(tokens)
            self.held_out_items.append(items)
        else:
            self.fresh_tokens.append(tokens)

    def and_half(self, place: int) -> tuple[Scores, Scores]:
        """These scores and those of the half the question at `place` belongs to."""
        return self, self.halves.setdefault(place % 2, Scores())

    def headline(self) -> float:
        values = [v for kind in self.recall.values() for v in kind]
        return statistics.fmean(values) if values else float("nan")

    def of_type(self, kind: str) -> float:
        values = self.recall.get(kind, [])
        return statistics.fmean(values) if values else float("nan")


def _short_answer(question: Question) -> str | None:
    answer = question.answer.strip().strip(".")
    return answer.lower() if answer and len(answer.split()) <= 6 else None


def record(
    scores: Scores,
    question: Question,
    text: str,
    present: set[tuple[str, int]],
    tokens: int,
    items: int,
    build_ms: float | None,
) -> None:
    """`present`: evidence turns the method brought whole or as an excerpt."""
    evidence = question.evidence()
    turns = {(s.session_id, i): t for s in question.sessions for i, t in enumerate(s.turns)}
    whole = [turns[e].text.strip() in text for e in evidence]
    found = [w or e in present for w, e in zip(whole, evidence, strict=True)]
    scores.recall[question.question_type].append(sum(found) / len(evidence))
    scores.whole.append(sum(whole) / len(evidence))
    answer = _short_answer(question)
    if answer is not None:
        scores.answer_found.append(answer in text.lower())
    scores.tokens.append(tokens)
    scores.items.append(items)
    if build_ms is not None:
        scores.build_ms.append(build_ms)


def context_text(messages: Sequence[dict[str, Any]]) -> str:
    parts = []
    for message in messages:
        content = message.get("content")
        parts.append(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False))
    return "\n".join(parts)


# -- the memory rows ----------------------------------------------------------------------


def ingest(question: Question, store: SQLiteStore) -> tuple[float, dict[tuple[str, int], tuple[str, int]]]:
    """Store the history, one session of the user per haystack session, with the defaults.

    Returns the ms per turn and each stored message's (session id, seq) -> (session id,
    turn index)."""
    where: dict[tuple[str, int], tuple[str, int]] = {}
    started = time.perf_counter()
    for session in question.sessions:
        memory = ConversationMemory(session.session_id, store, user_id=question.question_id)
        for index, turn in enumerate(session.turns):
            message = memory.add(turn.role, turn.text, timestamp=turn_timestamp(session, index))
            where[(session.session_id, message.seq or 0)] = (session.session_id, index)
        memory.flush()
        memory.close()
    elapsed = (time.perf_counter() - started) * 1000
    return elapsed / question.turn_count, where


MakeMemory = Callable[[str, SQLiteStore, str], ConversationMemory]


def ask(
    make: MakeMemory,
    question: Question,
    place: int,
    store: SQLiteStore,
    where: dict[tuple[str, int], tuple[str, int]],
    results: dict[int, Scores],
) -> None:
    """Ask the question, and the requests that need no memory, from a new chat of the user."""
    memory = make(f"{question.question_id}-new-chat", store, question.question_id)
    for budget in BUDGETS:
        started = time.perf_counter()
        context = memory.build_context(query=question.text, budget=budget)
        elapsed = (time.perf_counter() - started) * 1000
        if context.token_count > budget:
            raise AssertionError(f"context of {context.token_count} tokens over budget {budget}")
        present = {
            where[(item.session_id, seq)]
            for item in context.recalled
            if item.session_id is not None
            for seq in item.seqs
            if (item.session_id, seq) in where
        }
        for scores in results[budget].and_half(place):
            record(
                scores,
                question,
                context_text(context.messages),
                present,
                context.token_count,
                len(context.recalled),
                elapsed,
            )
        for request in NO_MEMORY_REQUESTS + NO_MEMORY_REQUESTS_HELD_OUT + NO_MEMORY_REQUESTS_FRESH:
            other = memory.build_context(query=request, budget=budget)
            tokens = sum(other.section(s).tokens for s in MEMORY_SECTIONS)
            for scores in results[budget].and_half(place):
                scores.record_no_memory(request, tokens, len(other.recalled), other.section("recall").tokens)
    memory.close()


# -- the baselines ------------------------------------------------------------------------


def _turn_lines(question: Question) -> tuple[list[tuple[str, int]], list[str]]:
    keys, lines = [], []
    for session in question.sessions:
        for index, turn in enumerate(session.turns):
            keys.append((session.session_id, index))
            lines.append(f"{turn.role}: {turn.text.strip()}")
    return keys, lines


def packed(order: Sequence[int], lines: Sequence[str], line_tokens: Sequence[int], room: int) -> list[int]:
    chosen = []
    for i in order:
        if line_tokens[i] <= room:
            chosen.append(i)
            room -= line_tokens[i]
    return chosen


def run_baseline(
    question: Question,
    place: int,
    counter: TiktokenCounter,
    results: dict[int, Scores],
    order_for: Callable[[str], Sequence[int]],
    lines: Sequence[str],
    keys: Sequence[tuple[str, int]],
    line_tokens: Sequence[int],
) -> None:
    """Turns in the order `order_for(query)` gives, packed into each budget as one
    memory message beside the query (framing counted as the chat format counts it)."""

    def fill(query: str, budget: int) -> tuple[list[int], str, int]:
        query_tokens = counter.count_text(query) + 3 + 1
        room = budget - 3 - 1 - 3 - query_tokens  # memory message framing, reply priming
        chosen = packed(order_for(query), lines, line_tokens, room)
        chosen.sort()  # shown in log order
        text = "\n".join(lines[i] for i in chosen)
        tokens = (3 + 1 + counter.count_text(text) if chosen else 0) + 3 + query_tokens
        if tokens > budget:
            raise AssertionError(f"baseline context of {tokens} tokens over budget {budget}")
        return chosen, text, tokens

    for budget in BUDGETS:
        started = time.perf_counter()
        chosen, text, tokens = fill(question.text, budget)
        elapsed = (time.perf_counter() - started) * 1000
        for scores in results[budget].and_half(place):
            record(scores, question, text, {keys[i] for i in chosen}, tokens, len(chosen), elapsed)
        for request in NO_MEMORY_REQUESTS + NO_MEMORY_REQUESTS_HELD_OUT + NO_MEMORY_REQUESTS_FRESH:
            chosen, text, _ = fill(request, budget)
            tokens = counter.count_text(text) if chosen else 0
            for scores in results[budget].and_half(place):
                scores.record_no_memory(request, tokens, len(chosen), tokens)


# -- report -------------------------------------------------------------------------------


def print_tables(rows: list[tuple[str, dict[int, Scores]]]) -> None:
    header = (
        f"{'method':<22} {'budget':>6} {'recall':>7} {'whole':>6} {'ans':>5} {'tokens':>6} "
        f"{'items':>6} {'ms/q':>6} {'no-mem tok':>10} {'recall':>6} {'items':>6} {'held-out tok':>12} {'items':>6} {'fresh tok':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, by_budget in rows:
        for budget in BUDGETS:
            s = by_budget[budget]
            ms = f"{statistics.fmean(s.build_ms):>6.1f}" if s.build_ms else f"{'-':>6}"
            answers = f"{statistics.fmean(s.answer_found):>5.2f}" if s.answer_found else f"{'-':>5}"
            print(
                f"{name:<22} {budget:>6} {s.headline():>7.3f} {statistics.fmean(s.whole):>6.3f} "
                f"{answers} {statistics.fmean(s.tokens):>6.0f} {statistics.fmean(s.items):>6.1f} {ms} "
                f"{statistics.fmean(s.no_memory_tokens):>10.0f} {statistics.fmean(s.no_memory_recall):>6.0f} "
                f"{statistics.fmean(s.no_memory_items):>6.1f} {statistics.fmean(s.held_out_tokens):>12.0f} "
                f"{statistics.fmean(s.held_out_items):>6.1f} {statistics.fmean(s.fresh_tokens):>9.0f}"
            )
    print()
    kinds = [k for k in QUESTION_TYPES if rows[0][1][BUDGETS[0]].recall.get(k)]
    header = f"{'by question type':<22} {'budget':>6} " + " ".join(f"{SHORT_TYPES[k]:>9}" for k in kinds)
    print(header)
    print("-" * len(header))
    for name, by_budget in rows:
        for budget in BUDGETS:
            s = by_budget[budget]
            print(f"{name:<22} {budget:>6} " + " ".join(f"{s.of_type(k):>9.3f}" for k in kinds))
    print()
    header = (
        f"{'halves (place in list)':<22} {'budget':>6} {'even recall':>11} {'odd recall':>10} "
        f"{'even no-mem':>11} {'odd no-mem':>10} {'even held-out':>13} {'odd held-out':>12} "
        f"{'even fresh':>10} {'odd fresh':>9}"
    )
    print(header)
    print("-" * len(header))
    for name, by_budget in rows:
        for budget in BUDGETS:
            even, odd = by_budget[budget].halves.get(0, Scores()), by_budget[budget].halves.get(1, Scores())
            print(
                f"{name:<22} {budget:>6} {even.headline():>11.3f} {odd.headline():>10.3f} "
                f"{_mean(even.no_memory_tokens):>11.0f} {_mean(odd.no_memory_tokens):>10.0f} "
                f"{_mean(even.held_out_tokens):>13.0f} {_mean(odd.held_out_tokens):>12.0f} "
                f"{_mean(even.fresh_tokens):>10.0f} {_mean(odd.fresh_tokens):>9.0f}"
            )


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--data", type=Path, default=default_data_path(), help="the LongMemEval .json.gz")
    parser.add_argument("--quick", action="store_true", help="12 questions, two of each type")
    parser.add_argument("--questions", type=int, default=None, help="this many questions, every type in turn")
    parser.add_argument("--no-minilm", action="store_true", help="skip the rows that need MiniLM")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"LongMemEval data not found at {args.data}; pass --data", file=sys.stderr)
        return 2
    questions = pick(
        load_questions(args.data), 12 if args.quick and args.questions is None else args.questions
    )
    turns = sum(q.turn_count for q in questions)
    sessions = sum(len(q.sessions) for q in questions)
    print(f"LongMemEval: {len(questions)} questions, {sessions} sessions, {turns} turns")

    counter = TiktokenCounter()
    embedder: CachedEmbedder | None = None
    if not args.no_minilm:
        from convmem import SentenceTransformerEmbedder

        embedder = CachedEmbedder(SentenceTransformerEmbedder(show_progress=False))
        print(f"MiniLM vectors cached in {embedder.path}")

    def defaults(session_id: str, store: SQLiteStore, user_id: str) -> ConversationMemory:
        return ConversationMemory(session_id, store, user_id=user_id)

    def with_minilm(session_id: str, store: SQLiteStore, user_id: str) -> ConversationMemory:
        return ConversationMemory(session_id, store, user_id=user_id, embedder=embedder)

    memory_rows: list[tuple[str, MakeMemory]] = [("defaults, no model", defaults)]
    if embedder is not None:
        memory_rows.append(("defaults + MiniLM", with_minilm))
    names = [name for name, _ in memory_rows] + ["BM25 top-k"]
    if embedder is not None:
        names.append("MiniLM top-k")
    names.append("most recent turns")
    results = {name: {b: Scores() for b in BUDGETS} for name in names}
    ingest_ms: list[float] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="longmemeval-") as tmp:
        for place, question in enumerate(questions):
            number = place + 1
            store = SQLiteStore(Path(tmp) / f"{question.question_id}.db")
            ms_per_turn, where = ingest(question, store)
            ingest_ms.append(ms_per_turn)
            for name, make in memory_rows:
                ask(make, question, place, store, where, results[name])
            store.close()
            keys, lines = _turn_lines(question)
            line_tokens = [counter.count_text(line) + 1 for line in lines]
            texts = [turn.text.strip() for session in question.sessions for turn in session.turns]
            bm25 = PlainBM25(texts)
            run_baseline(
                question, place, counter, results["BM25 top-k"], bm25.ranked, lines, keys, line_tokens
            )
            if embedder is not None:
                turn_vectors = embedder.embed_documents(texts)

                def by_meaning(query: str, vectors: np.ndarray = turn_vectors) -> list[int]:
                    return np.argsort(-(vectors @ embedder.embed_query(query)), kind="stable").tolist()

                run_baseline(
                    question, place, counter, results["MiniLM top-k"], by_meaning, lines, keys, line_tokens
                )
            newest_first = list(range(len(lines) - 1, -1, -1))
            run_baseline(
                question,
                place,
                counter,
                results["most recent turns"],
                lambda _query, order=newest_first: order,
                lines,
                keys,
                line_tokens,
            )
            print(
                f"  [{number}/{len(questions)}] {question.question_id} {question.question_type}: "
                f"ingest {ms_per_turn:.1f} ms/turn, {time.perf_counter() - started:.0f} s so far",
                flush=True,
            )
    print()
    print_tables([(name, results[name]) for name in names])
    print()
    print(
        f"ingest with the defaults, no model (store, token counts, facts, summary): "
        f"{statistics.fmean(ingest_ms):.1f} ms per turn"
    )
    if embedder is not None:
        print(
            f"MiniLM texts: {embedder.hits} read from the cache, {embedder.misses} embedded in this run "
            f"({embedder.path})"
        )
    print(
        "columns: recall = has_answer turns in the context (whole, or as a recalled excerpt), whole = whole "
        "turns only, ans = short gold answer found in the context, tokens = context tokens, items = recalled "
        "items (baselines: turns), no-mem tok / recall / items = memory tokens (facts, summary, recall), "
        f"of them recall's, and recalled items given to {len(NO_MEMORY_REQUESTS)} requests that need no memory; "
        f"held-out tok / items = memory tokens and items given to {len(NO_MEMORY_REQUESTS_HELD_OUT)} more such "
        f"requests; fresh tok = memory tokens given to {len(NO_MEMORY_REQUESTS_FRESH)} such requests never "
        "looked at one by one"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

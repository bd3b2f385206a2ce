"""Evidence recall on LoCoMo: how much of what a question needs reaches the context.

For each conversation of ``../shared/data/locomo-dev.json`` every turn goes
into a `ConversationMemory` (speaker as the message name, session date as the
timestamp, the first speaker as "user" and the other as "assistant"). For
each question a context is built with ``build_context(query=question,
budget=B)`` and a question's evidence recall is the fraction of its evidence
turns whose text appears in the built messages. Headline: categories 1-4
(category 5 is adversarial and reported apart). The memory runs with the
facts and summary sections off, so the budget is split between the recent
window and recall, as `choose_recall_share` decides for each question; every
context is checked to be within its budget.

Baselines, in the same run and under the same budget and counter:
  last turns     LangChain ``trim_messages(strategy="last")`` with a tiktoken counter
  vector top-k   the same MiniLM model and a FAISS flat index, best turns first,
                 filled to the budget (embedding the text alone, and "Speaker: text")

Usage::

    python benchmarks/locomo_recall.py            # all five conversations
    python benchmarks/locomo_recall.py --quick    # two conversations
    python benchmarks/locomo_recall.py --variant episode_weight=0 --variant speaker_weight=0
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from convmem import (
    ConversationMemory,
    MemoryConfig,
    Recall,
    RecallConfig,
    SentenceTransformerEmbedder,
    SQLiteStore,
    TiktokenCounter,
)

BUDGETS = (1024, 2048)
HEADLINE_CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def default_data_path() -> Path:
    env = os.environ.get("CONVMEM_LOCOMO")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo-dev.json"


# -- data ----------------------------------------------------------------------------


@dataclasses.dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str
    timestamp: float


@dataclasses.dataclass
class Question:
    text: str
    category: int
    evidence: list[str]  # texts of the evidence turns


@dataclasses.dataclass
class Conversation:
    sample_id: str
    speaker_a: str
    turns: list[Turn]
    questions: list[Question]


def _session_time(text: str) -> float:
    moment = datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    return moment.replace(tzinfo=timezone.utc).timestamp()


def load_conversations(path: Path) -> list[Conversation]:
    samples = json.loads(path.read_text("utf-8"))
    conversations = []
    for sample in samples:
        conv = sample["conversation"]
        turns: list[Turn] = []
        number = 1
        while f"session_{number}" in conv:
            when = _session_time(conv[f"session_{number}_date_time"])
            for turn in conv[f"session_{number}"]:
                turns.append(Turn(turn["dia_id"], turn["speaker"], turn["text"], when))
            number += 1
        by_id = {t.dia_id: t for t in turns}
        questions = []
        for qa in sample["qa"]:
            ids = []
            for evidence in qa.get("evidence", []):
                # A few ids in the dataset are malformed ("D8:6; D9:17", "D:11:26").
                for part in re.split(r"[;,]", evidence):
                    ids.append(part.strip().replace("D:", "D"))
            texts = sorted({by_id[i].text for i in ids if i in by_id})
            if texts:
                questions.append(Question(qa["question"], int(qa["category"]), texts))
        conversations.append(Conversation(sample["sample_id"], conv["speaker_a"], turns, questions))
    return conversations


# -- scoring -------------------------------------------------------------------------


class Scores:
    """Evidence recall per category, tokens used and build times of one method at one budget."""

    def __init__(self) -> None:
        self.recall: dict[int, list[float]] = defaultdict(list)
        self.tokens: list[int] = []
        self.build_ms: list[float] = []

    def record(self, question: Question, context_text: str, tokens: int, build_ms: float | None) -> None:
        found = sum(1 for text in question.evidence if text in context_text)
        self.recall[question.category].append(found / len(question.evidence))
        self.tokens.append(tokens)
        if build_ms is not None:
            self.build_ms.append(build_ms)

    def headline(self) -> float:
        values = [v for c in HEADLINE_CATEGORIES for v in self.recall.get(c, [])]
        return statistics.fmean(values) if values else float("nan")

    def category(self, category: int) -> float:
        values = self.recall.get(category, [])
        return statistics.fmean(values) if values else float("nan")


def context_text(messages: Sequence[dict[str, Any]]) -> str:
    parts = []
    for message in messages:
        content = message.get("content")
        parts.append(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False))
    return "\n".join(parts)


# -- runs ----------------------------------------------------------------------------


def lines_for(conversation: Conversation) -> list[str]:
    return [f"{t.speaker}: {t.text}" for t in conversation.turns]


def run_memory(
    conversations: Sequence[Conversation],
    embedder: SentenceTransformerEmbedder,
    counter: TiktokenCounter,
    recall_config: RecallConfig,
    variants: Sequence[dict[str, Any]],
    workdir: Path,
) -> tuple[dict[str, dict[int, Scores]], dict[str, float]]:
    results: dict[str, dict[int, Scores]] = {
        name: {b: Scores() for b in BUDGETS} for name in ["convmem"] + [_variant_name(v) for v in variants]
    }
    ingest_ms: list[float] = []
    bytes_per_vector: list[float] = []
    vectors = 0
    for conversation in conversations:
        db = workdir / f"{conversation.sample_id}.db"
        store = SQLiteStore(db)
        recall = Recall(embedder, config=recall_config, index_dir=Path(f"{db}.vectors"))
        memory = ConversationMemory(
            conversation.sample_id,
            store,
            MemoryConfig(
                budget=BUDGETS[0],
                facts_share=0.0,
                summary_share=0.0,
                recall_share=0.25,
                summary_trigger="never",
                extract_facts=False,
            ),
            counter=counter,
            recall=recall,
        )
        started = time.perf_counter()
        for turn in conversation.turns:
            role = "user" if turn.speaker == conversation.speaker_a else "assistant"
            memory.add(role, turn.text, name=turn.speaker, timestamp=turn.timestamp)
        memory.flush()
        ingest_ms.append((time.perf_counter() - started) * 1000 / len(conversation.turns))
        stats = recall.stats(conversation.sample_id)
        vectors += stats["vectors"]
        bytes_per_vector.append(stats["bytes_per_vector"] or 0.0)
        for name, overrides in [("convmem", {})] + [(_variant_name(v), v) for v in variants]:
            recall.config = recall_config.replace(**overrides)
            for question in conversation.questions:
                for budget in BUDGETS:
                    started = time.perf_counter()
                    context = memory.build_context(query=question.text, budget=budget)
                    elapsed = (time.perf_counter() - started) * 1000
                    if context.token_count > budget:
                        raise AssertionError(f"context of {context.token_count} tokens over budget {budget}")
                    results[name][budget].record(
                        question, context_text(context.messages), context.token_count, elapsed
                    )
        recall.config = recall_config
        recall.close()
        store.close()
    info = {
        "ingest_ms_per_turn": statistics.fmean(ingest_ms),
        "bytes_per_vector": statistics.fmean(bytes_per_vector),
        "vectors": vectors,
    }
    return results, info


def _variant_name(overrides: dict[str, Any]) -> str:
    return ",".join(f"{k}={v}" for k, v in overrides.items())


def run_last_turns(conversations: Sequence[Conversation], counter: TiktokenCounter) -> dict[int, Scores]:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, trim_messages

    cache: dict[int, int] = {}

    def count(messages: Sequence[BaseMessage]) -> int:
        total = 3  # reply priming
        for message in messages:
            key = id(message)
            if key not in cache:
                role = "user" if message.type == "human" else "assistant"
                tokens = 3 + counter.count_text(role) + counter.count_text(str(message.content))
                if message.name:
                    tokens += 1 + counter.count_text(message.name)
                cache[key] = tokens
            total += cache[key]
        return total

    scores = {b: Scores() for b in BUDGETS}
    for conversation in conversations:
        history: list[BaseMessage] = [
            HumanMessage(t.text, name=t.speaker)
            if t.speaker == conversation.speaker_a
            else AIMessage(t.text, name=t.speaker)
            for t in conversation.turns
        ]
        for question in conversation.questions:
            for budget in BUDGETS:
                messages = [*history, HumanMessage(question.text)]
                started = time.perf_counter()
                kept = trim_messages(messages, max_tokens=budget, strategy="last", token_counter=count)
                elapsed = (time.perf_counter() - started) * 1000
                text = "\n".join(str(m.content) for m in kept)
                scores[budget].record(question, text, count(kept), elapsed)
    return scores


def run_vector_topk(
    conversations: Sequence[Conversation],
    embedder: SentenceTransformerEmbedder,
    counter: TiktokenCounter,
    unit: Callable[[Turn], str],
) -> dict[int, Scores]:
    import faiss

    scores = {b: Scores() for b in BUDGETS}
    for conversation in conversations:
        vectors = embedder.embed_documents([unit(t) for t in conversation.turns])
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(vectors)
        lines = lines_for(conversation)
        line_tokens = [counter.count_text(line) + 1 for line in lines]
        for question in conversation.questions:
            query_tokens = counter.count_text(question.text) + 3 + 1  # user message
            for budget in BUDGETS:
                started = time.perf_counter()
                _, order = index.search(embedder.embed_query(question.text)[None, :], len(lines))
                # system message framing (3 + "system") + reply priming + the query message
                room = budget - 3 - 1 - 3 - query_tokens
                chosen = []
                for i in order[0]:
                    if line_tokens[i] <= room:
                        chosen.append(i)
                        room -= line_tokens[i]
                text = "\n".join(lines[i] for i in chosen)
                tokens = (3 + 1 + counter.count_text(text)) + 3 + query_tokens if chosen else 3 + query_tokens
                elapsed = (time.perf_counter() - started) * 1000
                if tokens > budget:
                    raise AssertionError(f"baseline context of {tokens} tokens over budget {budget}")
                scores[budget].record(question, text, tokens, elapsed)
    return scores


# -- report --------------------------------------------------------------------------


def print_table(rows: list[tuple[str, dict[int, Scores]]]) -> None:
    categories = [*HEADLINE_CATEGORIES, 5]
    header = (
        f"{'method':<44} {'budget':>6} {'cat1-4':>7} "
        + " ".join(f"{'c' + str(c):>6}" for c in categories)
        + f" {'tokens':>7} {'ms/q':>6} {'p95':>6}"
    )
    print(header)
    print("-" * len(header))
    for name, by_budget in rows:
        for budget in BUDGETS:
            s = by_budget[budget]
            cats = " ".join(f"{s.category(c):>6.3f}" for c in categories)
            ms = statistics.fmean(s.build_ms) if s.build_ms else float("nan")
            p95 = float(np.percentile(s.build_ms, 95)) if s.build_ms else float("nan")
            print(
                f"{name:<44} {budget:>6} {s.headline():>7.3f} {cats} "
                f"{statistics.fmean(s.tokens):>7.0f} {ms:>6.1f} {p95:>6.1f}"
            )


def parse_variant(text: str) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for part in text.split(","):
        key, _, raw = part.partition("=")
        value: Any
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        overrides[key.strip()] = value
    return overrides


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two conversations instead of five")
    parser.add_argument("--data", type=Path, default=default_data_path(), help="path of locomo-dev.json")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        type=parse_variant,
        help="also rank with these RecallConfig overrides, e.g. episode_weight=0 (repeatable)",
    )
    parser.add_argument(
        "--set", type=parse_variant, default={}, help="RecallConfig overrides for the main run"
    )
    parser.add_argument("--no-baselines", action="store_true")
    args = parser.parse_args(argv)

    if not args.data.exists():
        print(f"LoCoMo data not found at {args.data}; pass --data or set CONVMEM_LOCOMO", file=sys.stderr)
        return 2
    conversations = load_conversations(args.data)
    if args.quick:
        conversations = conversations[:2]
    questions = sum(len(c.questions) for c in conversations)
    turns = sum(len(c.turns) for c in conversations)
    print(f"LoCoMo: {len(conversations)} conversations, {turns} turns, {questions} questions with evidence")

    counter = TiktokenCounter()
    embedder = SentenceTransformerEmbedder(show_progress=False)
    embedder.embed_query("warm up")
    recall_config = RecallConfig().replace(**args.set)

    print(f"RecallConfig overrides: {args.set or 'none'}")

    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        results, info = run_memory(conversations, embedder, counter, recall_config, args.variant, Path(tmp))
    rows: list[tuple[str, dict[int, Scores]]] = [
        ("convmem (ConversationMemory.build_context)", results["convmem"])
    ]
    rows += [(f"  variant {name}", scores) for name, scores in results.items() if name != "convmem"]
    if not args.no_baselines:
        rows.append(("last turns (LangChain trim_messages)", run_last_turns(conversations, counter)))
        rows.append(
            (
                "vector top-k, MiniLM+FAISS (text)",
                run_vector_topk(conversations, embedder, counter, lambda t: t.text),
            )
        )
        rows.append(
            (
                "vector top-k, MiniLM+FAISS (speaker: text)",
                run_vector_topk(conversations, embedder, counter, lambda t: f"{t.speaker}: {t.text}"),
            )
        )
    print()
    print_table(rows)
    print()
    print(
        f"ingest: {info['ingest_ms_per_turn']:.1f} ms per turn (store append, token count, embedding, index); "
        f"{info['vectors']} vectors, {info['bytes_per_vector']:.0f} bytes per vector on disk"
    )
    print("categories: " + ", ".join(f"c{k} {v}" for k, v in CATEGORY_NAMES.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

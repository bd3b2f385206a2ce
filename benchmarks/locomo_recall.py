"""Evidence recall on LoCoMo: how much of what a question needs reaches the context.

For each conversation of ``../shared/data/locomo-dev.json`` every turn goes
into a memory (speaker as the message name, session date as the timestamp,
the first speaker as "user" and the other as "assistant"). For each question
a context is built with ``build_context(query=question, budget=B)`` and a
question's evidence recall is the fraction of its evidence turns whose text
appears in the built messages. Headline: categories 1-4 (category 5 is
adversarial and reported apart). Every context is checked to be within its
budget.

Methods, in one run, under the same budgets:
  defaults, no model    ``ConversationMemory(session_id, store)``: the real defaults
                        (facts, summary, lexical recall, a window bounded by tokens)
  defaults + MiniLM     the same with ``embedder=SentenceTransformerEmbedder()``
  tuned recall-only     facts and summary off, so the budget is split between the
                        window and a MiniLM `Recall` (``--set`` / ``--variant`` tune it)
  last turns            LangChain ``trim_messages(strategy="last")``
  vector top-k          MiniLM and a FAISS flat index, best turns first, filled to
                        the budget (embedding the text alone, and "Speaker: text")

Besides evidence recall, each row reports per question the context's tokens,
the recalled items and their tokens, and precision: the share of recalled items
(vector top-k: chosen turns) that hold evidence; "talk" counts recalled items
that say nothing ("thanks", "ok", "😊"), which should be 0. The MiniLM rows
share one embedding cache, filled for each conversation in one batch before
its memories are built (the vectors are the model's; a call per turn is slow
on a small machine), so their ingest times leave the model out.

With ``--across-sessions`` the memory rows are measured as a chat product with
a "new chat" button uses memory: every LoCoMo session is its own session of
one user (``user_id`` = the conversation), and each question is asked from a
new, empty session of that user, so everything it finds comes from facts and
recall shared across the user's sessions. The rows are printed beside the
single-session rows of the same run.

Usage::

    python benchmarks/locomo_recall.py                 # all five conversations
    python benchmarks/locomo_recall.py --quick         # two conversations
    python benchmarks/locomo_recall.py --no-minilm     # only what needs no model (fast)
    python benchmarks/locomo_recall.py --variant episode_weight=0 --variant speaker_weight=0
    python benchmarks/locomo_recall.py --across-sessions   # also: each session its own, ask from a new one
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
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from _vector_cache import CachedEmbedder

from convmem import (
    ConversationMemory,
    InMemoryStore,
    MemoryConfig,
    Message,
    Recall,
    RecallConfig,
    SentenceTransformerEmbedder,
    SQLiteStore,
    TiktokenCounter,
)
from convmem._recall.embedder import BaseEmbedder
from convmem._recall.engine import RecalledItem
from convmem._salience import says_nothing

BUDGETS = (256, 512, 1024, 2048)
# Requests that need nothing from the conversation, asked of the first three conversations
# at 2048 tokens: what recall gives them is noise (24 requests in all).
OFF_TOPIC = (
    "Explain quicksort.",
    "What is the capital of Peru?",
    "Translate 'good morning' into French.",
    "How many moons does Jupiter have?",
    "Write a haiku about the sea.",
    "What is 17 times 23?",
    "How do I reverse a list in Python?",
    "Give me a synonym for 'happy'.",
)
OFF_TOPIC_CONVERSATIONS = 3
HEADLINE_CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


def default_data_path() -> Path:
    env = os.environ.get("CONVMEM_LOCOMO")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    # ../shared/data beside the repository (or beside the folder holding a git worktree)
    for parent in here.parents[1:4]:
        candidate = parent / "shared" / "data" / "locomo-dev.json"
        if candidate.exists():
            return candidate
    return here.parents[2] / "shared" / "data" / "locomo-dev.json"


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
    evidence: list[str]  # texts of the evidence turns, without surrounding whitespace


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
            # Stripped: a few turns end in a space, and recall renders every line stripped.
            texts = sorted({by_id[i].text.strip() for i in ids if i in by_id})
            if texts:
                questions.append(Question(qa["question"], int(qa["category"]), texts))
        conversations.append(Conversation(sample["sample_id"], conv["speaker_a"], turns, questions))
    return conversations


# -- scoring -------------------------------------------------------------------------


class Scores:
    """Evidence recall per category, tokens, recalled items and build times of one method at one budget."""

    def __init__(self) -> None:
        self.recall: dict[int, list[float]] = defaultdict(list)
        self.tokens: list[int] = []
        self.build_ms: list[float] = []
        self.items: list[int] = []
        self.item_tokens: list[int] = []
        self.evidence_items = 0
        self.small_talk_items = 0

    def record(
        self,
        question: Question,
        context_text: str,
        tokens: int,
        build_ms: float | None,
        items: Sequence[tuple[str, bool]] | None = None,
        item_tokens: int | None = None,
    ) -> None:
        """`items`: the recalled passages (text, whether it says nothing), when the method recalls."""
        found = sum(1 for text in question.evidence if text in context_text)
        self.recall[question.category].append(found / len(question.evidence))
        self.tokens.append(tokens)
        if build_ms is not None:
            self.build_ms.append(build_ms)
        if items is not None and question.category in HEADLINE_CATEGORIES:
            self.items.append(len(items))
            self.item_tokens.append(item_tokens or 0)
            self.evidence_items += sum(1 for text, _ in items if any(e in text for e in question.evidence))
            self.small_talk_items += sum(1 for _, empty in items if empty)

    def headline(self) -> float:
        values = [v for c in HEADLINE_CATEGORIES for v in self.recall.get(c, [])]
        return statistics.fmean(values) if values else float("nan")

    def category(self, category: int) -> float:
        values = self.recall.get(category, [])
        return statistics.fmean(values) if values else float("nan")

    def precision(self) -> float:
        total = sum(self.items)
        return self.evidence_items / total if total else float("nan")


def context_text(messages: Sequence[dict[str, Any]]) -> str:
    parts = []
    for message in messages:
        content = message.get("content")
        parts.append(content if isinstance(content, str) else json.dumps(content, ensure_ascii=False))
    return "\n".join(parts)


# -- the model, embedded once ----------------------------------------------------------


class SharedMiniLM(BaseEmbedder):
    """`SentenceTransformerEmbedder` behind a cache: every MiniLM row embeds a text once.

    `prefetch` embeds what a conversation's recall will ask for in one batch
    (a turn at a time costs a model call per turn, slow on a small machine).
    """

    def __init__(self) -> None:
        # Vectors are kept on disk between runs (see _vector_cache).
        self.model = CachedEmbedder(SentenceTransformerEmbedder(show_progress=False))
        super().__init__(name=self.model.name, dimension=self.model.dimension)
        self._cache: dict[tuple[str, bool], np.ndarray] = {}

    def prefetch(self, documents: Sequence[str], queries: Sequence[str]) -> None:
        for texts, query in ((documents, False), (queries, True)):
            missing = [t for t in dict.fromkeys(texts) if (t, query) not in self._cache]
            if missing:
                # sentence-transformers embeds a query as it embeds a document
                for text, vector in zip(missing, self.model.embed_documents(missing), strict=True):
                    self._cache[(text, query)] = vector

    def _embed(self, texts: list[str], *, query: bool) -> Any:
        missing = [t for t in dict.fromkeys(texts) if (t, query) not in self._cache]
        if missing:
            if query:
                vectors = np.stack([self.model.embed_query(text) for text in missing])
            else:
                vectors = self.model.embed_documents(missing)
            for text, vector in zip(missing, vectors, strict=True):
                self._cache[(text, query)] = vector
        return np.stack([self._cache[(t, query)] for t in texts])


class _RecordingEmbedder(BaseEmbedder):
    """Records what recall asks to embed, answering with throwaway vectors."""

    def __init__(self, dimension: int) -> None:
        super().__init__(name="recording", dimension=dimension)
        self.texts: list[str] = []
        self._random = np.random.default_rng(0)

    def _embed(self, texts: list[str], *, query: bool) -> Any:
        self.texts.extend(texts)
        return self._random.normal(size=(len(texts), self.dimension))


def prefetch(conversation: Conversation, embedder: SharedMiniLM, configs: Sequence[RecallConfig]) -> None:
    """Embed, in one batch, every unit recall will index for `conversation` and every
    question, as it is and as recall embeds it (speakers it names put as "they")."""
    recorder = _RecordingEmbedder(embedder.dimension)
    queries = [q.text for q in conversation.questions]
    counter = TiktokenCounter()
    for config in configs:
        store = InMemoryStore()
        recall = Recall(recorder, config=config)
        for turn in conversation.turns:
            role = "user" if turn.speaker == conversation.speaker_a else "assistant"
            message = Message.create(role, turn.text, name=turn.speaker, timestamp=turn.timestamp)
            recall.add(conversation.sample_id, store.append(conversation.sample_id, [message]))
        documents = len(recorder.texts)
        for question in conversation.questions:
            recall.search(conversation.sample_id, question.text, store=store, max_tokens=0, counter=counter)
        queries.extend(recorder.texts[documents:])
        del recorder.texts[documents:]
    embedder.prefetch(recorder.texts, queries)


# -- runs ----------------------------------------------------------------------------


def lines_for(conversation: Conversation) -> list[str]:
    return [f"{t.speaker}: {t.text}" for t in conversation.turns]


@dataclasses.dataclass
class MemoryRun:
    """One way of building a `ConversationMemory` per conversation, measured under each budget."""

    name: str
    make: Callable[..., ConversationMemory]
    """``make(session_id, store, user_id=None)``."""
    recall_config: RecallConfig | None = None
    """The config of its MiniLM recall (None: no model), for `prefetch`."""


def _recalled_items(
    items: Sequence[RecalledItem], messages: dict[tuple[str | None, int], Message]
) -> list[tuple[str, bool]]:
    """(text, says nothing) per item; `messages` by (session id, None for the asking one; seq)."""
    return [
        (item.text, any(says_nothing(messages[(item.session_id, s)].text) for s in item.seqs))
        for item in items
    ]


def _session_number(turn: Turn) -> int:
    return int(turn.dia_id.split(":")[0].lstrip("D"))


def _ingest(memory: ConversationMemory, conversation: Conversation, turns: Sequence[Turn]) -> None:
    for turn in turns:
        role = "user" if turn.speaker == conversation.speaker_a else "assistant"
        memory.add(role, turn.text, name=turn.speaker, timestamp=turn.timestamp)
    memory.flush()


def _asking_memory(
    run: MemoryRun, conversation: Conversation, store: SQLiteStore, across_sessions: bool
) -> tuple[ConversationMemory, dict[tuple[str | None, int], Message]]:
    """The memory questions are asked from, after the conversation went in, and every
    stored message by (session id, or None for the asking session; seq)."""
    sample = conversation.sample_id
    if not across_sessions:
        memory = run.make(sample, store)
        _ingest(memory, conversation, conversation.turns)
        return memory, {(None, m.seq or 0): m for m in memory.messages()}
    messages: dict[tuple[str | None, int], Message] = {}
    by_session: dict[int, list[Turn]] = defaultdict(list)
    for turn in conversation.turns:
        by_session[_session_number(turn)].append(turn)
    for number, turns in sorted(by_session.items()):
        session = run.make(f"{sample}-session-{number}", store, user_id=sample)
        _ingest(session, conversation, turns)
        messages.update(((session.session_id, m.seq or 0), m) for m in session.messages())
        session.close()
    return run.make(f"{sample}-new-chat", store, user_id=sample), messages


def run_memories(
    conversations: Sequence[Conversation],
    runs: Sequence[MemoryRun],
    variants: Sequence[dict[str, Any]],
    embedder: SharedMiniLM | None,
    workdir: Path,
    across_sessions: bool = False,
) -> tuple[dict[str, dict[int, Scores]], dict[str, float], dict[str, int]]:
    """Each run, and each run again with each variant's RecallConfig overrides (with
    `across_sessions`: each LoCoMo session stored apart, questions from a new session),
    and the items each run recalls for the off-topic requests (`OFF_TOPIC`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[int, Scores]] = {}
    ingest: dict[str, list[float]] = defaultdict(list)
    off_topic: dict[str, int] = defaultdict(int)
    for run in runs:
        for name, _ in _with_variants(run, variants):
            results[name] = {b: Scores() for b in BUDGETS}
    for number_of_conversation, conversation in enumerate(conversations):
        if embedder is not None:
            prefetch(conversation, embedder, [r.recall_config for r in runs if r.recall_config is not None])
        for number, run in enumerate(runs):
            db = workdir / f"{conversation.sample_id}-{number}.db"
            store = SQLiteStore(db)
            started = time.perf_counter()
            memory, messages = _asking_memory(run, conversation, store, across_sessions)
            ingest[run.name].append((time.perf_counter() - started) * 1000 / len(conversation.turns))
            recall = memory.recall
            tuned = recall.config if recall is not None else None
            for name, overrides in _with_variants(run, variants):
                if recall is not None and tuned is not None:
                    recall.config = tuned.replace(**overrides)
                for question in conversation.questions:
                    for budget in BUDGETS:
                        started = time.perf_counter()
                        context = memory.build_context(query=question.text, budget=budget)
                        elapsed = (time.perf_counter() - started) * 1000
                        if context.token_count > budget:
                            raise AssertionError(
                                f"context of {context.token_count} tokens over budget {budget}"
                            )
                        results[name][budget].record(
                            question,
                            context_text(context.messages),
                            context.token_count,
                            elapsed,
                            _recalled_items(context.recalled, messages),
                            context.section("recall").tokens,
                        )
            if recall is not None and tuned is not None:
                recall.config = tuned
            if number_of_conversation < OFF_TOPIC_CONVERSATIONS:
                for request in OFF_TOPIC:
                    off_topic[run.name] += len(memory.build_context(query=request, budget=2048).recalled)
            memory.close()
            store.close()
    info = {name: statistics.fmean(values) for name, values in ingest.items()}
    return results, info, dict(off_topic)


def defaults_run(name: str, embedder: SharedMiniLM | None = None, **config: Any) -> MemoryRun:
    """``ConversationMemory(session_id, store)`` as a user gets it (plus an embedder, if given)."""

    def make(session_id: str, store: SQLiteStore, user_id: str | None = None) -> ConversationMemory:
        memory_config = MemoryConfig(**config) if config else None
        if embedder is None:
            return ConversationMemory(session_id, store, memory_config, user_id=user_id)
        return ConversationMemory(session_id, store, memory_config, user_id=user_id, embedder=embedder)

    return MemoryRun(name, make, None if embedder is None else RecallConfig())


def tuned_run(embedder: SharedMiniLM, counter: TiktokenCounter, recall_config: RecallConfig) -> MemoryRun:
    """Facts and summary off: the budget is split between the window and a tuned MiniLM recall."""

    def make(session_id: str, store: SQLiteStore, user_id: str | None = None) -> ConversationMemory:
        recall = Recall(embedder, config=recall_config, index_dir=Path(f"{store.path}.vectors"))
        config = MemoryConfig(
            budget=BUDGETS[0],
            facts_share=0.0,
            summary_share=0.0,
            recall_share=0.25,
            summary_trigger="never",
            extract_facts=False,
        )
        return ConversationMemory(session_id, store, config, user_id=user_id, counter=counter, recall=recall)

    return MemoryRun("tuned recall-only + MiniLM", make, recall_config)


def _with_variants(run: MemoryRun, variants: Sequence[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(run.name, {}), *((f"  {run.name}, {_variant_name(v)}", v) for v in variants)]


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
    embedder: SharedMiniLM,
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
                items = [(lines[i], says_nothing(conversation.turns[i].text)) for i in chosen]
                item_tokens = sum(line_tokens[i] for i in chosen)
                scores[budget].record(question, text, tokens, elapsed, items, item_tokens)
    return scores


# -- report --------------------------------------------------------------------------


def _rows_of(rows: list[tuple[str, dict[int, Scores]]]) -> Iterator[tuple[str, int, Scores]]:
    for name, by_budget in rows:
        for budget in BUDGETS:
            yield name, budget, by_budget[budget]


def print_table(rows: list[tuple[str, dict[int, Scores]]]) -> None:
    categories = [*HEADLINE_CATEGORIES, 5]
    header = (
        f"{'method':<32} {'budget':>6} {'cat1-4':>7} "
        + " ".join(f"{'c' + str(c):>6}" for c in categories)
        + f" {'tokens':>6} {'items':>6} {'itok':>6} {'prec':>6} {'talk':>5} {'ms/q':>6} {'p95':>6}"
    )
    print(header)
    print("-" * len(header))
    for name, budget, s in _rows_of(rows):
        cats = " ".join(f"{s.category(c):>6.3f}" for c in categories)
        ms = statistics.fmean(s.build_ms) if s.build_ms else float("nan")
        p95 = float(np.percentile(s.build_ms, 95)) if s.build_ms else float("nan")
        if s.items:
            recalled = (
                f"{statistics.fmean(s.items):>6.1f} {statistics.fmean(s.item_tokens):>6.0f} "
                f"{s.precision():>6.3f} {s.small_talk_items:>5}"
            )
        else:
            recalled = f"{'-':>6} {'-':>6} {'-':>6} {'-':>5}"
        print(
            f"{name:<32} {budget:>6} {s.headline():>7.3f} {cats} "
            f"{statistics.fmean(s.tokens):>6.0f} {recalled} {ms:>6.1f} {p95:>6.1f}"
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
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two conversations instead of five")
    parser.add_argument("--data", type=Path, default=default_data_path(), help="path of locomo-dev.json")
    parser.add_argument(
        "--no-minilm", action="store_true", help="skip every row that needs the MiniLM model (fast)"
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        type=parse_variant,
        help="also rank every memory row with these RecallConfig overrides, e.g. episode_weight=0 "
        "(repeatable)",
    )
    parser.add_argument(
        "--set", type=parse_variant, default={}, help="RecallConfig overrides for the tuned row"
    )
    parser.add_argument("--no-baselines", action="store_true", help="skip trim_messages and vector top-k")
    parser.add_argument(
        "--across-sessions",
        action="store_true",
        help="also measure each memory row with every LoCoMo session stored as its own session of "
        "one user and the questions asked from a new session of that user",
    )
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
    runs = [defaults_run("defaults, no model")]
    embedder = None
    if not args.no_minilm:
        embedder = SharedMiniLM()
        embedder.embed_query("warm up")
        recall_config = RecallConfig().replace(**args.set)
        print(f"RecallConfig overrides of the tuned row: {args.set or 'none'}")
        runs.append(defaults_run("defaults + MiniLM", embedder))
        runs.append(tuned_run(embedder, counter, recall_config))

    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        results, ingest, off_topic = run_memories(conversations, runs, args.variant, embedder, Path(tmp))
        rows: list[tuple[str, dict[int, Scores]]] = list(results.items())
        if args.across_sessions:
            across, _, _ = run_memories(
                conversations, runs, args.variant, embedder, Path(tmp) / "across", across_sessions=True
            )
            rows.extend((f"{name}, new session", scores) for name, scores in across.items())
    if not args.no_baselines:
        rows.append(("last turns (trim_messages)", run_last_turns(conversations, counter)))
        if embedder is not None:
            rows.append(
                (
                    "vector top-k MiniLM (text)",
                    run_vector_topk(conversations, embedder, counter, lambda t: t.text),
                )
            )
            rows.append(
                (
                    "vector top-k MiniLM (spk: text)",
                    run_vector_topk(conversations, embedder, counter, lambda t: f"{t.speaker}: {t.text}"),
                )
            )
    print()
    print_table(rows)
    print()
    print(
        "ingest, ms per turn (store append, token count, facts, summary, indexing; the MiniLM rows "
        "read vectors embedded beforehand in one batch): "
        + ", ".join(f"{name} {ms:.1f}" for name, ms in ingest.items())
    )
    requests = len(OFF_TOPIC) * min(OFF_TOPIC_CONVERSATIONS, len(conversations))
    print(
        f"items recalled for {requests} off-topic requests at 2048 ({', '.join(OFF_TOPIC[:2])} ...): "
        + ", ".join(f"{name} {items}" for name, items in off_topic.items())
    )
    print(
        "columns: tokens = context tokens per question; items, itok = recalled items and their tokens "
        "per question; prec = recalled items holding evidence / recalled items; talk = recalled items "
        "that say nothing (categories 1-4)"
    )
    print("categories: " + ", ".join(f"c{k} {v}" for k, v in CATEGORY_NAMES.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

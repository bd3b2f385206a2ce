"""Per-turn overhead of a chat history inside a RunnableWithMessageHistory chain.

Compares, at 10, 1 000 and 10 000 turns of stored history:

- ``convmem``: `ConvMemChatMessageHistory` (in memory, and SQLite), whose
  ``messages`` is the managed context within the budget;
- ``trim_messages``: `InMemoryChatMessageHistory` with LangChain's
  ``trim_messages(strategy="last")`` and a tiktoken (cl100k) counter in the chain,
  the pattern LangChain's docs show for keeping a chat within a token budget;

both around the same prompt and fake chat model, with the same budget. The
overhead of a pipeline is its median time per turn minus that of the same
chain with an empty history; "history ops" times only what the history does per
turn (RunnableWithMessageHistory reads ``messages`` twice, then adds the turn),
or the ``trim_messages`` call alone.

Run: ``python benchmarks/bench_langchain.py`` (about a minute; ``--quick`` for a
smoke run). Figures vary by machine; the ratios are the point.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from operator import itemgetter
from pathlib import Path
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, trim_messages
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import Runnable, RunnableConfig, RunnablePassthrough
from langchain_core.runnables.history import RunnableWithMessageHistory

from convmem import MemoryConfig, SQLiteStore, TiktokenCounter
from langchain_convmem import ConvMemChatMessageHistory

warnings.filterwarnings("ignore", message="RunnableWithMessageHistory is deprecated")
warnings.filterwarnings("ignore", message="The class `InMemoryChatMessageHistory` was deprecated")

BUDGET = 2000
TIKTOKEN = TiktokenCounter()
PROMPT = ChatPromptTemplate.from_messages(
    [("system", "You are a helpful assistant."), MessagesPlaceholder("history"), ("human", "{question}")]
)


def history_turns(count: int) -> list[BaseMessage]:
    topics = ["the trip to Lisbon", "my cat Miso", "the budget", "museum hours", "train tickets", "dinner"]
    messages: list[BaseMessage] = []
    for index in range(count):
        topic = topics[index % len(topics)]
        messages.append(HumanMessage(f"Question {index}: what should I know about {topic} this week?"))
        messages.append(AIMessage(f"Answer {index}: for {topic}, book early and check the opening times."))
    return messages


def tiktoken_counter(messages: Sequence[BaseMessage]) -> int:
    """Chat-API counting with cl100k: 3 tokens per message plus role and text, 3 for priming."""
    return 3 + sum(3 + TIKTOKEN.count_text(m.type) + TIKTOKEN.count_text(str(m.text)) for m in messages)


class NullHistory(BaseChatMessageHistory):
    """No history at all: the baseline cost of the chain and RunnableWithMessageHistory."""

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return []

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        pass

    def clear(self) -> None:
        pass


def fake_model() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=itertools.cycle(["Sure, here is a short answer."]))


def with_history(chain: Runnable[Any, Any], history: BaseChatMessageHistory) -> Runnable[Any, Any]:
    return RunnableWithMessageHistory(
        chain, lambda session_id: history, input_messages_key="question", history_messages_key="history"
    )


def trimmed_chain() -> Runnable[Any, Any]:
    trimmer = trim_messages(
        max_tokens=BUDGET,
        strategy="last",
        token_counter=tiktoken_counter,
        start_on="human",
        include_system=False,
    )
    return RunnablePassthrough.assign(history=itemgetter("history") | trimmer) | PROMPT | fake_model()


def interleaved(
    pipelines: dict[str, Callable[[int], Any]], rounds: dict[str, int], warmup: int = 3
) -> dict[str, list[float]]:
    """Time every pipeline once per round, in turn, so that drift (caches, CPU clock) hits all alike."""
    for index in range(warmup):
        for run in pipelines.values():
            run(-1 - index)
    times: dict[str, list[float]] = {name: [] for name in pipelines}
    for index in range(max(rounds.values())):
        for name, run in pipelines.items():
            if index < rounds[name]:
                start = time.perf_counter()
                run(index)
                times[name].append(time.perf_counter() - start)
    return times


def trim_turn(trimmer: Runnable[Any, Any], turns: list[BaseMessage]) -> Callable[[int], Any]:
    return lambda index: trimmer.invoke(turns)


def chain_turn(chain: Runnable[Any, Any]) -> Callable[[int], Any]:
    config: RunnableConfig = {"configurable": {"session_id": "bench"}}
    return lambda i: chain.invoke({"question": f"New question {i} about the trip?"}, config)


def convmem_history(
    turns: list[BaseMessage], *, path: Path | None, config: MemoryConfig
) -> ConvMemChatMessageHistory:
    store = SQLiteStore(path) if path is not None else None
    history = ConvMemChatMessageHistory("bench", store=store, config=config, budget=BUDGET)
    for start in range(0, len(turns), 2000):
        history.add_messages(turns[start : start + 2000])
    return history


def history_turn(history: BaseChatMessageHistory) -> Callable[[int], Any]:
    """What RunnableWithMessageHistory asks of a history per turn: read twice, then add the turn."""

    def turn(index: int) -> None:
        first = history.messages
        second = history.messages
        assert len(first) == len(second)
        history.add_messages([HumanMessage(f"Extra question {index}?"), AIMessage(f"Extra answer {index}.")])

    return turn


def ms(seconds: float) -> str:
    return f"{seconds * 1000:9.2f}"


CONVMEM_VARIANTS = (
    "convmem, in memory, defaults",
    "convmem, in memory, window only",
    "convmem, SQLite, defaults",
)
TRIM = "InMemory + trim_messages (tiktoken)"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions and sizes, for a smoke run")
    args = parser.parse_args()
    sizes = [10, 1000] if args.quick else [10, 1000, 10_000]
    repeats = 8 if args.quick else 60
    trim_repeats = {10: repeats, 1000: max(4, repeats // 3), 10_000: 5}
    configs = {
        CONVMEM_VARIANTS[0]: MemoryConfig(budget=BUDGET),
        CONVMEM_VARIANTS[1]: MemoryConfig(budget=BUDGET, summary_trigger="never", extract_facts=False),
        CONVMEM_VARIANTS[2]: MemoryConfig(budget=BUDGET),
    }
    print(f"budget {BUDGET} tokens, fake chat model, RunnableWithMessageHistory with history_messages_key")
    print(
        "chain: median ms per turn; overhead: minus the same chain with an empty history, run in the same round (p90 after /)"
    )
    print("history ops: the history's own work per turn (2 reads + add), or the trim_messages call\n")
    header = f"{'turns':>6}  {'pipeline':<36} {'chain':>9} {'overhead':>9} {'/ p90':>9} {'hist ops':>9}"
    print(header)
    print("-" * len(header))
    ratios: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            turns = history_turns(size)
            chains: dict[str, Callable[[int], Any]] = {
                "baseline": chain_turn(with_history(PROMPT | fake_model(), NullHistory()))
            }
            ops: dict[str, Callable[[int], Any]] = {}
            for label in CONVMEM_VARIANTS:
                sqlite = "SQLite" in label
                path = Path(tmp) / f"{size}.db" if sqlite else None
                history = convmem_history(turns, path=path, config=configs[label])
                chains[label] = chain_turn(with_history(PROMPT | fake_model(), history))
                ops_path = Path(tmp) / f"{size}-ops.db" if sqlite else None
                ops[label] = history_turn(convmem_history(turns, path=ops_path, config=configs[label]))
            chains[TRIM] = chain_turn(
                with_history(trimmed_chain(), InMemoryChatMessageHistory(messages=list(turns)))
            )
            trimmer = trim_messages(
                max_tokens=BUDGET, strategy="last", token_counter=tiktoken_counter, start_on="human"
            )
            ops[TRIM] = trim_turn(trimmer, turns)
            # The stored histories make a large heap; freezing it keeps the garbage
            # collector from rescanning it on every collection, which would slow every
            # pipeline (the baseline too) in proportion to the history size.
            gc.collect()
            gc.freeze()
            rounds = {name: repeats for name in chains} | {TRIM: trim_repeats[size]}
            chain_times = interleaved(chains, rounds, warmup=1 if size >= 10_000 else 3)
            op_times = interleaved(
                ops, {name: repeats for name in ops} | {TRIM: trim_repeats[size]}, warmup=1
            )
            baseline_times = chain_times["baseline"]
            print(f"{size:>6}  {'baseline (empty history)':<36} {ms(statistics.median(baseline_times))}")
            overheads: dict[str, float] = {}
            for label in (*CONVMEM_VARIANTS, TRIM):
                times = chain_times[label]
                # Paired with the baseline run of the same round, so load on the machine cancels out.
                extra = sorted(t - b for t, b in zip(times, baseline_times[: len(times)], strict=True))
                overheads[label] = statistics.median(extra)
                p90 = extra[int(0.9 * (len(extra) - 1))]
                print(
                    f"{size:>6}  {label:<36} {ms(statistics.median(times))} {ms(overheads[label])} {ms(p90)} "
                    f"{ms(statistics.median(op_times[label]))}"
                )
            gc.unfreeze()
            theirs_ops = statistics.median(op_times[TRIM])
            for label in CONVMEM_VARIANTS:
                ours_ops = statistics.median(op_times[label])
                chain_ratio = (
                    f"{overheads[TRIM] / overheads[label]:8.1f}x"
                    if overheads[label] > 0.0002
                    else "  (noise)"
                )
                ratios.append(
                    f"{size:>6}  {label:<36} history ops {theirs_ops / ours_ops:8.1f}x   chain overhead {chain_ratio}"
                )
            print()
    print("trim_messages pipeline divided by convmem (how many times more it costs per turn):")
    print("\n".join(ratios))


if __name__ == "__main__":
    main()

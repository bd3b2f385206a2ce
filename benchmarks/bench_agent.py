"""Per-turn cost of `ConvMemMiddleware` in a LangChain v1 agent with a checkpointer.

Compares, with 10, 100 and 1 000 turns already in the thread's checkpoint, the
median time of one ``agent.invoke`` with a new question for:

- ``create_agent`` with an ``InMemorySaver`` and no memory middleware (the model
  gets the whole state);
- the same with ``ConvMemMiddleware`` (the session in memory, and in SQLite),
  which stores the turn and builds the model's context from the log;
- the same with LangChain's ``SummarizationMiddleware`` (fake summarizer model),
  the budget-keeping pattern LangChain's docs show, and with both.

The model is a fake chat model, so the figures are what the agent machinery and
each middleware cost. Rounds interleave the pipelines, so load on the machine
falls on all of them alike. Run: ``python benchmarks/bench_agent.py`` (``--quick``
for a smoke run). Figures vary by machine; the differences are the point.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from convmem import MemoryConfig
from langchain_convmem import ConvMemMiddleware

BUDGET = 2000


def fake_model() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=itertools.cycle(["Sure, here is what I know about that."]))


def earlier_turns(count: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for index in range(count):
        messages.append(HumanMessage(f"Question {index}: what about the museum in town {index}?"))
        messages.append(AIMessage(f"Answer {index}: it opens at nine and closes at six."))
    return messages


def pipeline(middleware: list[Any], turns: list[BaseMessage], name: str) -> Callable[[int], Any]:
    agent = create_agent(fake_model(), [], middleware=middleware, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": name}}
    agent.update_state(config, {"messages": turns})

    def turn(index: int) -> Any:
        return agent.invoke({"messages": [HumanMessage(f"New question {index}?")]}, config)

    turn(-1)  # the first run stores the checkpoint's history in the log: not what a turn costs
    return turn


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repetitions")
    args = parser.parse_args()
    sizes = [10, 100] if args.quick else [10, 100, 1000]
    repeats = 5 if args.quick else 30
    config = MemoryConfig(budget=BUDGET)
    print(f"budget {BUDGET} tokens, fake chat model, InMemorySaver; median ms per agent.invoke\n")
    header = f"{'turns':>6}  {'agent':<44} {'ms':>8} {'vs plain':>9}"
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            turns = earlier_turns(size)

            def summarizer() -> SummarizationMiddleware:
                return SummarizationMiddleware(
                    fake_model(), trigger=("tokens", BUDGET), keep=("tokens", BUDGET // 2)
                )

            pipelines = {
                "create_agent + checkpointer (plain)": pipeline([], turns, "plain"),
                "+ ConvMemMiddleware (in memory)": pipeline([ConvMemMiddleware(config=config)], turns, "mem"),
                "+ ConvMemMiddleware (SQLite)": pipeline(
                    [ConvMemMiddleware(path=Path(tmp) / f"{size}.db", config=config)], turns, "sqlite"
                ),
                "+ SummarizationMiddleware": pipeline([summarizer()], turns, "summary"),
                "+ ConvMemMiddleware + SummarizationMiddleware": pipeline(
                    [ConvMemMiddleware(config=config), summarizer()], turns, "both"
                ),
            }
            times: dict[str, list[float]] = {name: [] for name in pipelines}
            for index in range(repeats):
                for name, turn in pipelines.items():
                    started = time.perf_counter()
                    turn(index)
                    times[name].append(time.perf_counter() - started)
            plain = statistics.median(times["create_agent + checkpointer (plain)"])
            for name, measured in times.items():
                median = statistics.median(measured)
                print(f"{size:>6}  {name:<44} {median * 1000:8.2f} {(median - plain) * 1000:+9.2f}")


if __name__ == "__main__":
    main()

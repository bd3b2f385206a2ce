"""How long `import langchain_convmem` takes next to langchain-core's own chat history.

The target: importing the package (and making a chat history) costs no more
than ``from langchain_core.chat_history import BaseChatMessageHistory`` plus
0.2 s; the agent middleware (``langchain.agents``, ``langgraph``) loads only
when it is used. Each figure is the median of several fresh interpreters, so
nothing is cached in-process.

    python benchmarks/bench_import.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

BASELINE = "from langchain_core.chat_history import BaseChatMessageHistory"
PACKAGE = "import langchain_convmem"
MIDDLEWARE = "from langchain_convmem import ConvMemMiddleware"
# What the core adds on its own, so the package's figure can be split into core and wrapper.
CORE = BASELINE + "\nimport convmem"


def _seconds(statement: str) -> float:
    """Wall time of `statement` in a fresh interpreter, measured inside it (no startup cost)."""
    script = f"import time\nstart = time.perf_counter()\n{statement}\nprint(time.perf_counter() - start)"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return float(result.stdout.strip().splitlines()[-1])


def median_seconds(statement: str, runs: int) -> float:
    _seconds(statement)  # warm the OS file cache before measuring
    return statistics.median(_seconds(statement) for _ in range(runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per figure (median)")
    runs = parser.parse_args().runs
    started = time.perf_counter()
    baseline = median_seconds(BASELINE, runs)
    package = median_seconds(PACKAGE, runs)
    middleware = median_seconds(MIDDLEWARE, runs)
    core = median_seconds(CORE, runs)
    print(f"langchain_core.chat_history      {baseline:6.3f} s")
    print(
        f"import langchain_convmem         {package:6.3f} s  ratio {package / baseline:4.2f}  "
        f"extra {package - baseline:+.3f} s (target <= +0.200 s)"
    )
    print(
        f"  of which the convmem core      {core - baseline:+6.3f} s (langchain_core.chat_history + import convmem)"
    )
    print(f"+ ConvMemMiddleware (lazy)       {middleware:6.3f} s  ratio {middleware / baseline:4.2f}")
    print(f"(median of {runs} runs each, {time.perf_counter() - started:.1f} s in all)")


if __name__ == "__main__":
    main()

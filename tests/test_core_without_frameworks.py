"""The core never imports a framework: `import convmem` works, and every core feature runs,
where LangChain, LangGraph and LlamaIndex cannot be imported at all.

Each check runs in a fresh interpreter, so what this test process already imported does not count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import convmem

# The checked-out packages, ahead of anything installed, so the child runs this tree.
SOURCE_PATH = os.pathsep.join(
    [str(Path(convmem.__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[1])]
)

# Installed before anything is imported: a framework import fails (as if it were not installed)
# and is written down, so an import the core tried and then caught is seen too.
BLOCK_IMPORTS = """
import importlib.abc
import sys

BLOCKED_PREFIXES = {prefixes!r}
blocked = []


class BlockImports(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0].startswith(BLOCKED_PREFIXES):
            blocked.append(name)
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked by the test)", name=name)
        return None


sys.meta_path.insert(0, BlockImports())
"""

FRAMEWORK_PREFIXES = ("langchain", "langgraph", "llama_index")  # langchain* covers langchain_core

# Every core feature, with plain callables where a model would be; prints what it saw as JSON.
USE_EVERY_CORE_FEATURE = """
import json
import runpy
import tempfile
from pathlib import Path

from convmem import ConversationMemory, ExtractiveSummarizer, HashingEmbedder, InMemoryStore, LLMFactExtractor, LLMSummarizer, MemoryConfig, RuleFactExtractor, SQLiteStore, expire_idle, forget_session, forget_user

config = MemoryConfig(budget=400, keep_recent_turns=2, summary_trigger="turns", summary_every_turns=1)
seen = {}


def converse(memory):
    memory.add("user", "My name is Ana and I live in Lisbon.")
    memory.add("assistant", "Nice to meet you, Ana!")
    memory.add_turn("My dog is called Rex.", "What a good name.")
    for topic in ("trains", "weather", "music", "chess"):
        memory.add_turn(f"Tell me about {topic}.", f"Here is something about {topic}.")
    memory.flush()


with tempfile.TemporaryDirectory() as folder:
    for store in (InMemoryStore(), SQLiteStore(Path(folder) / "chat.db")):
        kind = type(store).__name__
        offline = ConversationMemory(
            "offline", store, config, user_id="ana", embedder=HashingEmbedder(),
            summarizer=ExtractiveSummarizer(), fact_extractor=RuleFactExtractor(),
        )
        converse(offline)
        context = offline.build_context(query="What is my dog called?")
        seen[kind + " context"] = {
            "within budget": context.token_count <= 400,
            "recalled": " ".join(item.text for item in context.recalled),
            "explained": "left out" in context.explain(),
            "orchestration": offline.render_transcript("orchestration"),
            "answer": offline.render_transcript("answer"),
            "summary": offline.summary().text,
            "facts": {fact.key: fact.value for fact in offline.facts()},
        }
        offline.close()

        with_models = ConversationMemory(
            "with-models", store, config, user_id="bo",
            summarizer=LLMSummarizer(lambda prompt: "Ana has a dog called Rex."),
            fact_extractor=LLMFactExtractor(lambda prompt: '[{"key": "pet_name", "value": "Rex", "seq": 3}]'),
        )
        converse(with_models)
        seen[kind + " models"] = {
            "summary": with_models.summary().text,
            "facts": {fact.key: fact.value for fact in with_models.facts()},
        }
        with_models.close()

        expired = expire_idle(store, 3600, recall=offline.recall)
        kept = store.stats("offline").last_seq > 0
        forget_session(store, "offline", recall=offline.recall)
        seen[kind + " forget"] = {
            "expired": expired,
            "active kept": kept,
            "session gone": store.stats("offline").last_seq == 0,
            "forgot user": forget_user(store, "bo"),
        }
        store.close()

sys.argv = ["convmem", "demo"]
try:
    runpy.run_module("convmem", run_name="__main__", alter_sys=True)
except SystemExit as exit:
    seen["demo exit code"] = exit.code

seen["blocked"] = blocked
seen["loaded"] = sorted({name.partition(".")[0] for name in sys.modules})
print(json.dumps(seen))
"""


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SOURCE_PATH, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def blocking(prefixes: tuple[str, ...], code: str) -> str:
    return BLOCK_IMPORTS.format(prefixes=prefixes) + code


def test_importing_convmem_loads_no_framework_and_no_model_library() -> None:
    result = run_python(
        "import sys, convmem\n"
        "heavy = ('langchain', 'langchain_core', 'llama_index', 'torch', 'faiss', 'sentence_transformers')\n"
        "print('\\n'.join(sorted(m for m in sys.modules if m.partition('.')[0].startswith(heavy))))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == []


def test_numpy_loads_with_recall_not_with_convmem() -> None:
    # numpy takes longer to import than the rest of convmem: importing the package
    # (a type annotation, a CLI, a worker that only forgets users) must not pay for it.
    result = run_python(
        "import sys, convmem\nprint('numpy' in sys.modules)\nconvmem.Recall\nprint('numpy' in sys.modules)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True"]


def test_the_server_stores_load_when_named_not_with_convmem() -> None:
    # A SQLite user must not pay for the PostgreSQL and Redis backends' modules.
    result = run_python(
        "import sys, convmem\n"
        "backends = lambda: sorted({m.split('.')[2] for m in sys.modules if m.startswith('convmem._stores.')"
        " and m.split('.')[2] in ('postgres', 'redis')})\n"
        "print(backends())\n"
        "convmem.PostgresStore, convmem.AsyncRedisStore\n"
        "print(backends())\n"
        "print('PostgresStore' in dir(convmem) and 'RedisStore' in convmem.__all__)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["[]", "['postgres', 'redis']", "True"]


def test_the_fact_rules_compile_with_the_first_extraction_not_with_convmem(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Over a hundred patterns: compiling them was most of what `import convmem` cost, and
    # then a quarter of a new process's first memory. A returning user's first context,
    # built before anything is added, extracts nothing: it does not wait for them.
    path = str(tmp_path / "m.db")
    result = run_python(
        "import sys, convmem\n"
        "loaded = lambda: 'convmem._derived.fact_rules' in sys.modules\n"
        "print(loaded())\n"
        "extractor = convmem.RuleFactExtractor()\n"
        f"memory = convmem.ConversationMemory('new-chat', convmem.SQLiteStore({path!r}), user_id='u')\n"
        "memory.build_context(query='Which bike do I ride to work?', budget=500)\n"
        "print(loaded())\n"
        "print([f.value for f in extractor.extract([convmem.Message.create('user', 'My name is Alice.')])])\n"
        "print(loaded())"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["False", "False", "['Alice']", "True"]


@pytest.mark.parametrize("lexical_index", ["store", "process"])
def test_a_first_search_loads_no_module_it_does_not_use(lexical_index: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # `np.unique` asks whether its array is masked, which imports numpy.ma: about 7 ms of a
    # returning user's first message in every new process, for nothing recall uses.
    path = str(tmp_path / "m.db")
    result = run_python(
        "import sys\n"
        "from convmem import ConversationMemory, SQLiteStore\n"
        f"store = SQLiteStore({path!r}, lexical_index={lexical_index!r})\n"
        "for n in range(3):\n"
        "    old = ConversationMemory(f'old-{n}', store, user_id='u')\n"
        "    old.add('user', f'My bike number {n} is a red road bike I ride to work.')\n"
        "    old.add('assistant', 'A road bike is quick on the way to work.')\n"
        "    old.flush()\n"
        "new = ConversationMemory('new', store, user_id='u')\n"
        "before = set(sys.modules)\n"
        "context = new.build_context(query='Which bikes do I ride to work?', budget=1000)\n"
        "print(len(context.recalled) > 0)\n"
        "print(sorted(m for m in set(sys.modules) - before if m.startswith('numpy')))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["True", "[]"]


@pytest.fixture(scope="module")
def core_without_frameworks() -> dict[str, Any]:
    result = run_python(blocking(FRAMEWORK_PREFIXES, USE_EVERY_CORE_FEATURE))
    assert result.returncode == 0, result.stderr[-3000:]
    seen: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


def test_no_core_feature_even_tries_to_import_a_framework(core_without_frameworks: dict[str, Any]) -> None:
    assert core_without_frameworks["blocked"] == []
    loaded = set(core_without_frameworks["loaded"])
    assert not {"torch", "sentence_transformers", "transformers"} & loaded


@pytest.mark.parametrize("kind", ["InMemoryStore", "SQLiteStore"])
def test_offline_memory_builds_recalls_summarizes_and_extracts_without_frameworks(
    core_without_frameworks: dict[str, Any], kind: str
) -> None:
    seen = core_without_frameworks[f"{kind} context"]
    assert seen["within budget"]
    assert "Rex" in seen["recalled"]
    assert seen["explained"]
    assert "Assistant: Here is something about chess." in seen["orchestration"]
    assert "Assistant:" not in seen["answer"]
    assert "My name is Ana" in seen["summary"]
    assert seen["facts"]["name"] == "Ana"
    assert seen["facts"]["pet_name"] == "Rex"


@pytest.mark.parametrize("kind", ["InMemoryStore", "SQLiteStore"])
def test_llm_summarizer_and_fact_extractor_take_a_plain_callable_without_frameworks(
    core_without_frameworks: dict[str, Any], kind: str
) -> None:
    seen = core_without_frameworks[f"{kind} models"]
    assert seen["summary"] == "Ana has a dog called Rex."
    assert seen["facts"] == {"pet_name": "Rex"}


@pytest.mark.parametrize("kind", ["InMemoryStore", "SQLiteStore"])
def test_forgetting_and_expiry_work_without_frameworks(
    core_without_frameworks: dict[str, Any], kind: str
) -> None:
    seen = core_without_frameworks[f"{kind} forget"]
    assert seen["expired"] == []
    assert seen["active kept"]
    assert seen["session gone"]
    assert seen["forgot user"] == ["with-models"]


def test_the_cli_demo_runs_without_frameworks(core_without_frameworks: dict[str, Any]) -> None:
    assert core_without_frameworks["demo exit code"] == 0


@pytest.mark.parametrize(
    ("package", "missing", "extra"),
    [
        ("langchain_convmem", "langchain_core", "langchain"),
        ("llamaindex_convmem", "llama_index", "llamaindex"),
    ],
)
def test_a_wrapper_without_its_framework_says_which_extra_to_install(
    package: str, missing: str, extra: str
) -> None:
    result = run_python(
        blocking(
            (missing,),
            f"try:\n    import {package}\n"
            "except ModuleNotFoundError as error:\n    print(error.name, '|', error)\n",
        )
    )
    assert result.returncode == 0, result.stderr
    name, message = result.stdout.strip().split(" | ", 1)
    assert name.startswith(missing)
    assert f'pip install "convmem[{extra}]"' in message


def test_the_framework_adapters_come_from_the_wrappers_not_the_core() -> None:
    langchain_convmem = pytest.importorskip("langchain_convmem")
    llamaindex_convmem = pytest.importorskip("llamaindex_convmem")
    moved = {
        langchain_convmem: ("LangChainEmbedder", "LangChainVectorIndex", "PrecomputedEmbeddings"),
        llamaindex_convmem: ("LlamaIndexEmbedder", "LlamaIndexVectorIndex"),
    }
    for package, names in moved.items():
        for name in names:
            assert name in package.__all__
            assert not hasattr(convmem, name)
            assert name not in convmem.__all__

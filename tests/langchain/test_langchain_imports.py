"""Importing langchain_convmem for the chat history loads no agent framework."""

from __future__ import annotations

import json
import subprocess
import sys

import langchain_convmem

HEAVY = ("langchain.agents", "langgraph", "langchain_core.tracers")


def _loaded_after(script: str) -> dict[str, bool]:
    probe = script + f"\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))\n"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded: dict[str, bool] = json.loads(result.stdout.splitlines()[-1])
    return loaded


def test_the_chat_history_imports_neither_langchain_agents_nor_langgraph() -> None:
    loaded = _loaded_after("import langchain_convmem\nlangchain_convmem.ConvMemChatMessageHistory()")
    assert loaded == dict.fromkeys(HEAVY, False)


def test_the_middleware_loads_its_frameworks_on_first_use() -> None:
    loaded = _loaded_after("from langchain_convmem import ConvMemMiddleware")
    assert loaded["langchain.agents"] and loaded["langgraph"]


def test_every_exported_name_resolves() -> None:
    for name in langchain_convmem.__all__:
        assert getattr(langchain_convmem, name) is not None


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    try:
        langchain_convmem.ConvMemMidleware  # noqa: B018
    except AttributeError as exc:
        assert "ConvMemMidleware" in str(exc)
    else:
        raise AssertionError("expected AttributeError")

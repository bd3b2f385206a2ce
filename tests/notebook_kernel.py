"""Running the notebooks of notebooks/ in tests: a kernel on this very interpreter.

A pytest plugin (see tests/conftest.py): the fixture `kernel_on_this_interpreter` is
available to every test module that executes a notebook.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
KERNEL_NAME = "convmem-tests"


@pytest.fixture
def kernel_on_this_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A kernelspec that runs ``sys.executable`` itself, found before any installed ``python3``.

    The suite may run as ``/path/to/venv/bin/python -m pytest`` without the venv
    activated; naming the interpreter keeps the notebook on the same packages.
    """
    jupyter = tmp_path / "jupyter"
    spec_dir = jupyter / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "convmem tests",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    # Connection files and IPython's profile go to the test's directory, not $HOME.
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(jupyter / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    return KERNEL_NAME

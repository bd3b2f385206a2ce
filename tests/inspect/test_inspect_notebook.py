"""notebooks/memory_inspector.ipynb runs top to bottom and draws its contexts as HTML."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from notebook_kernel import NOTEBOOKS  # noqa: E402

NAME = "memory_inspector.ipynb"


def run(
    workdir: Path, kernel: str, locomo: str | None, monkeypatch: pytest.MonkeyPatch
) -> list[dict[str, object]]:
    """Execute the notebook; return the outputs of its code cells, in order."""
    if locomo is None:
        monkeypatch.delenv("CONVMEM_LOCOMO", raising=False)
    else:
        monkeypatch.setenv("CONVMEM_LOCOMO", locomo)
    notebook = nbformat.read(NOTEBOOKS / NAME, as_version=4)
    nbclient.NotebookClient(
        notebook, kernel_name=kernel, timeout=300, resources={"metadata": {"path": str(workdir)}}
    ).execute()
    return [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]


def printed(outputs: list[dict[str, object]]) -> str:
    return "".join(str(output.get("text", "")) for output in outputs)


def drawings(outputs: list[dict[str, object]]) -> list[str]:
    return [str(output["data"]["text/html"]) for output in outputs if "text/html" in output.get("data", {})]  # type: ignore[operator, index]


@pytest.mark.slow
def test_the_notebook_walks_the_built_in_conversation_without_the_data(
    tmp_path: Path, kernel_on_this_interpreter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = run(tmp_path, kernel_on_this_interpreter, str(tmp_path / "absent.json"), monkeypatch)
    text = printed(outputs)
    assert "not found: using the built-in conversation" in text
    assert "between Ana and Ben" in text
    pictures = drawings(outputs)
    assert len(pictures) == 2 and all('class="cm-bar"' in picture for picture in pictures)
    assert "Pico" in pictures[0], "the first build recalls the turn that names the dog"
    assert "section    tokens" in text, "explain() is printed beside the picture"


@pytest.mark.slow
def test_the_notebook_walks_a_locomo_conversation(
    tmp_path: Path, kernel_on_this_interpreter: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # shared/data beside the repository, or beside the folder that holds its worktree
    here = Path(__file__).resolve()
    places = [folder / "shared" / "data" / "locomo-dev.json" for folder in here.parents[3:5]]
    if not any(place.exists() for place in places):
        pytest.skip(f"LoCoMo is read from one of {places}, which this checkout does not have")
    outputs = run(tmp_path, kernel_on_this_interpreter, None, monkeypatch)
    text = printed(outputs)
    assert "LoCoMo data:" in text and "not found" not in text
    assert "messages in 19 sessions" in text
    pictures = drawings(outputs)
    assert len(pictures) == 2 and all("cm-recalled" in picture for picture in pictures)

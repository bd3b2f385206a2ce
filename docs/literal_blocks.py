"""A griffe extension for the API reference: reST literal-block markers in docstrings.

convmem's docstrings introduce an indented example with ``::`` (as pydoc and
reST readers expect: "Use it like this::"). Markdown has no such marker: the
indented block already renders as code, and the ``::`` would show as written.
This turns "this::" into "this:" and drops a ``::`` alone on its line, only
where an indented block follows; the docstrings themselves stay as they are.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_MARKER = re.compile(r"(?<=\S)::$|^\s*::$")


def without_literal_markers(text: str) -> str:
    """The docstring `text` with each ``::`` that opens an indented block removed."""
    lines = text.split("\n")
    for index, line in enumerate(lines):
        if not _MARKER.search(line) or not _opens_indented_block(lines, index):
            continue
        lines[index] = "" if line.strip() == "::" else line[:-1]
    return "\n".join(lines)


def _opens_indented_block(lines: list[str], index: int) -> bool:
    indent = len(lines[index]) - len(lines[index].lstrip())
    following = [line for line in lines[index + 1 :] if line.strip()]
    return bool(following) and len(following[0]) - len(following[0].lstrip()) > indent


class LiteralBlocks(griffe.Extension):
    """Removes reST ``::`` markers from every docstring griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = without_literal_markers(obj.docstring.value)

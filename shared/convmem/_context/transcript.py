"""Transcript views: the recent conversation as text for other prompts.

``orchestration`` (for query rewriting and routing): questions and only the
answers that COMPLETED, so a failed or cancelled answer never steers the next
step. ``answer`` (for answer generation): questions only, so the model answers
from retrieved evidence rather than echoing earlier answers. Both skip RUNNING
turns (the question being handled now is passed separately), clip each message
and keep the newest turns that fit the whole view.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from .._config import TranscriptTemplate
from .._errors import ConfigError
from .._models import Turn, TurnStatus

__all__ = ["TranscriptView", "clip", "render_transcript"]

TranscriptView = Literal["orchestration", "answer"]
VIEWS = ("orchestration", "answer")
_ELLIPSIS = "…"


def clip(text: str, max_chars: int) -> str:
    """`text` with whitespace runs collapsed, cut to `max_chars` with a trailing ellipsis."""
    flat = " ".join(text.split())
    if len(flat) <= max_chars:
        return flat
    return flat[: max(0, max_chars - 1)] + _ELLIPSIS


def render_transcript(
    turns: Sequence[Turn],
    *,
    view: str,
    template: TranscriptTemplate,
    max_message_chars: int,
    max_chars: int,
) -> str:
    """Render `turns` (oldest first) as a transcript; empty string when nothing qualifies."""
    if view not in VIEWS:
        raise ConfigError(f"view must be one of {VIEWS}, got {view!r}")
    blocks: list[str] = []
    for turn in turns:
        question = turn.question
        if question is None or turn.status is TurnStatus.RUNNING:
            continue
        lines = [template.user_label + clip(question.text, max_message_chars)]
        answer = turn.answer
        if view == "orchestration" and turn.status is TurnStatus.COMPLETED and answer and answer.text.strip():
            lines.append(template.assistant_label + clip(answer.text, max_message_chars))
        blocks.append("\n".join(lines))
    if not blocks:
        return ""
    room = max_chars - len(template.header) - 1
    kept: list[str] = []
    for block in reversed(blocks):
        cost = len(block) + 1
        if cost <= room:
            kept.append(block)
            room -= cost
        elif not kept and room > len(template.user_label) + 1:
            kept.append(clip(block.split("\n")[0], room - 1))
            break
        else:
            break
    if not kept:
        return ""
    kept.reverse()
    return template.header + "\n" + "\n".join(kept)

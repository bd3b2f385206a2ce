"""What each part of a context costs in tokens, each distinct text counted once.

The same summary, fact lines, headers and system text come back on every build of a
session, so `Costs` keeps what it counted. A message costs its framing plus its text;
where the counter counts it that way (`TextTokenCounter` unless a subclass counts
messages its own way), a message made of pieces is counted piece by piece
(`count_pieces`) instead of joining and counting the whole text again.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from .._config import MemoryConfig
from .._language import MEMORY_CLOSE, MEMORY_OPEN
from .._models import Message, Role
from .._tokens import TextTokenCounter, TokenCounter, count_pieces, process_kept_chars

if TYPE_CHECKING:
    from .._recall.render import RecalledItem

__all__ = ["SEPARATOR", "Costs"]

SEPARATOR = "\n\n"
"""Between the sections of the memory block, and between a section's header and text."""

# What one session's `Costs` keeps: the texts that come back build after build (headers,
# fact lines, the summary, the latest recalled lines) and the last few whole messages. A
# server keeps a `Costs` for each memory it caches, and recalled lines differ with each
# question: kept up to 2,048, they were 706 texts, about half a megabyte, after 1,300
# builds of one memory. Texts the counter keeps for the whole process (tiktoken's short
# ones) are not kept again: with 64 per memory, they were 15 MB of a server caching 1,024
# memories of 100 users.
TEXTS_KEPT = 64
MESSAGES_KEPT = 8


class Costs:
    """Token costs of a build's texts under one `MemoryConfig` and `TokenCounter`."""

    def __init__(self, config: MemoryConfig, counter: TokenCounter) -> None:
        self.config = config
        self.counter = counter
        self._kept: Callable[[str], int] = functools.lru_cache(maxsize=TEXTS_KEPT)(counter.count_text)
        shared = process_kept_chars(counter)
        self.text: Callable[[str], int] = (
            (lambda text: counter.count_text(text) if len(text) <= shared else self._kept(text))
            if shared
            else self._kept
        )
        """Tokens of a text on its own (cached here, or by the counter for the process)."""
        kind = type(counter)
        self._framing_plus_text = isinstance(counter, TextTokenCounter) and all(
            getattr(kind, name) is getattr(TextTokenCounter, name)
            for name in ("count_message", "count_fields", "count_content")
        )
        self._system: Callable[[str], int] = functools.lru_cache(maxsize=MESSAGES_KEPT)(
            lambda text: counter.count_message(Message(role=Role.SYSTEM, content=text))
        )
        self._user: Callable[[str], int] = functools.lru_cache(maxsize=MESSAGES_KEPT)(
            lambda text: counter.count_message(Message(role=Role.USER, content=text))
        )

    def system_message(self, text: str) -> int:
        """A system message holding `text` (0 for no text: no message is sent)."""
        return self._system(text) if text else 0

    def memory_message(self, text: str) -> int:
        """The memory block as a message of its own (user or developer)."""
        if not text:
            return 0
        if self.config.memory_placement == "developer":
            return self._system(text) - self.text("system") + self.text("developer")
        return self._user(text)

    def pieces(self, pieces: Sequence[str], message: Callable[[str], int]) -> int:
        """A message whose content is ``"".join(pieces)``, `message` counting such a
        message from its text."""
        if not self._framing_plus_text:
            return message("".join(pieces))
        return message(" ") - self.text(" ") + count_pieces(self.counter, pieces, count=self.text)

    def framing(self, headers: Mapping[str, str], system_prompt: str) -> int:
        """What the memory block costs beyond its sections: tags, note, message framing."""
        tags = (
            self.text(f"{MEMORY_OPEN}\n{headers['memory_note']}")
            + self.text(SEPARATOR)
            + self.text(f"\n{MEMORY_CLOSE}")
        )
        if self.config.memory_placement != "system":
            return tags + self.memory_message(" ") - self.text(" ")
        if system_prompt:
            return tags + self.text(SEPARATOR)
        return tags + self.system_message(" ") - self.text(" ")

    def section(self, text: str) -> int:
        """A section's text followed by the separator."""
        return self.text(text) + self.text(SEPARATOR)

    def summary(self, text: str, headers: Mapping[str, str]) -> int:
        """The summary section: header and text (0 without a summary)."""
        return self.section(headers["summary"]) + self.section(text) if text else 0

    def recall(self, items: Sequence[RecalledItem], headers: Mapping[str, str]) -> int:
        """The recall section holding `items` (their stored counts; 0 without items)."""
        if not items:
            return 0
        return self.section(headers["recall"]) + sum(item.token_count + 1 for item in items)

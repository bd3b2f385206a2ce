"""The checks every option goes through, wherever it is given: one wording for one
mistake, naming the option, the value received and what is allowed.

    check_int("budget", budget)                                   # 1 .. MAX_INT_OPTION
    check_number("recall_share", share, low=0, high=1, allowed="a fraction in [0, 1)", high_open=True)
    check_choice("memory_placement", placement, ("user", "system", "developer"))
    check_bool("background", background)
    check_component("summarizer", summarizer)                     # has summarize() and asummarize()
"""

from __future__ import annotations

import inspect
import math

from ._errors import ConfigError

__all__ = [
    "MAX_INT_OPTION",
    "check_bool",
    "check_choice",
    "check_component",
    "check_int",
    "check_number",
    "check_timeout",
    "is_component",
]

# Integer options are counts and sizes; beyond 32 bits they are typos, and they
# would overflow the float arithmetic that shares out a budget.
MAX_INT_OPTION = 2**31 - 1


def check_int(name: str, value: object, *, low: int = 1, or_none: bool = False) -> None:
    """Refuse anything but an int from `low` to `MAX_INT_OPTION` (or None, with `or_none`)."""
    if or_none and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_INT_OPTION:
        allowed = "None or an int" if or_none else "an int"
        raise ConfigError(f"{name} must be {allowed} from {low} to {MAX_INT_OPTION}, got {value!r:.60}")


def check_number(
    name: str,
    value: object,
    *,
    low: float,
    high: float,
    allowed: str,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Refuse anything but a finite int or float within [low, high] (ends excluded when open)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be {allowed}, got {type(value).__name__}: {value!r:.60}")
    if (
        not math.isfinite(value)
        or value < low
        or value > high
        or (low_open and value == low)
        or (high_open and value == high)
    ):
        raise ConfigError(f"{name} must be {allowed}, got {value!r}")


def check_choice(name: str, value: object, allowed: tuple[str, ...]) -> None:
    """Refuse anything but one of `allowed`."""
    if value not in allowed:
        raise ConfigError(f"{name} must be one of {allowed}, got {value!r:.60}")


def check_bool(name: str, value: object) -> None:
    """Refuse anything but True or False (1, "yes" and None are mistakes, not switches)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r:.60}")


def check_timeout(timeout: object) -> None:
    """Refuse a `timeout` that is not None (wait as long as it takes) or seconds >= 0."""
    if timeout is not None:
        check_number("timeout", timeout, low=0, high=math.inf, allowed="None or seconds (a number >= 0)")


# What a component is called by (each group: one of its methods at least; the memory's sync
# calls use the first, its async twins the second), and what a mistake's message offers.
_COMPONENTS: dict[str, tuple[tuple[tuple[str, ...], ...], str]] = {
    "counter": (
        (("count_text",), ("count_message",)),
        "a TokenCounter with count_text() and count_message(), e.g. TiktokenCounter() or ApproximateCounter()",
    ),
    "summarizer": (
        (("summarize", "asummarize"),),
        "a Summarizer with summarize() and asummarize(): ExtractiveSummarizer(), or LLMSummarizer(complete) "
        "for any LLM",
    ),
    "fact_extractor": (
        (("extract", "aextract"),),
        "a FactExtractor with extract() and aextract(): RuleFactExtractor(), or LLMFactExtractor(complete) "
        "for any LLM",
    ),
    "embedder": (
        (("embed_documents", "aembed_documents"), ("embed_query", "aembed_query")),
        "an Embedder with embed_documents() and embed_query(), e.g. SentenceTransformerEmbedder() or a "
        "framework's adapter of its embeddings",
    ),
}


def is_component(name: str, value: object) -> bool:
    """Whether `value` has the methods a `name` (``counter``, ``summarizer``,
    ``fact_extractor`` or ``embedder``) is called by, looked up without reading a
    property (a model's ``dimension`` is not probed)."""
    return not _missing(name, value)


def check_component(name: str, value: object) -> None:
    """Refuse a `name` without the methods it is called by: a model's name, a plain
    function or another library's object, refused when given instead of failing at the
    first message. Looked up on the class first, so that a property that loads a model is
    not run for the check; a proxy that makes its methods on demand (``__getattr__``) is
    asked. A component with only the sync (or only the async) method of a pair is taken."""
    missing = _missing(name, value)
    if missing:
        raise ConfigError(
            f"{name} must be {_COMPONENTS[name][1]}; got {type(value).__name__} {value!r:.60}, "
            f"which has no {' and no '.join(missing)} method"
        )


def _missing(name: str, value: object) -> list[str]:
    groups, _ = _COMPONENTS[name]
    return [
        " or ".join(f"{method}()" for method in group)
        for group in groups
        if not any(_has_method(value, method) for method in group)
    ]


def _has_method(value: object, method: str) -> bool:
    if callable(inspect.getattr_static(value, method, None)):
        return True
    try:
        return callable(getattr(value, method, None))
    except Exception:  # a proxy that fails to make it has no such method either
        return False

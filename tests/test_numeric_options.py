"""Numeric options are checked when they are given, not when a worker first trips on them.

`MemoryConfig(background_timeout=nan)` used to be accepted, after which the
background worker died and `flush()` never returned; `SQLiteStore(timeout="5")`
failed only on its first connection. Each bad value now raises `ConfigError`
naming the option, the value and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from convmem import ConfigError, MemoryConfig, SQLiteStore

NAN, INF = float("nan"), float("inf")

INT_OPTIONS = [
    "budget",
    "max_message_chars",
    "max_message_bytes",
    "transcript_turns",
    "transcript_message_chars",
    "transcript_max_chars",
    "summary_every_turns",
]
BAD_INTS = [NAN, INF, -INF, -1, 0, 2.0, "5", True, None, 2**64]

FRACTION_OPTIONS = ["facts_share", "summary_share", "recall_share"]
BAD_FRACTIONS = [NAN, INF, -INF, -0.1, 1.0, 1.5, "0.1", True, None]

BAD_THRESHOLDS = [NAN, INF, -INF, 0, -0.5, 1.01, "0.7", True, None]
BAD_TIMEOUTS = [NAN, INF, -INF, 0, -1, 1e300, "60", True, None]


def assert_refused(match_option: str, value: object, **options: object) -> None:
    with pytest.raises(ConfigError, match=re.escape(match_option)) as raised:
        MemoryConfig(**options)  # type: ignore[arg-type]
    message = str(raised.value)
    assert repr(value)[:20] in message or type(value).__name__ in message, message


@pytest.mark.parametrize("value", BAD_INTS, ids=repr)
@pytest.mark.parametrize("option", INT_OPTIONS)
def test_int_options_refuse_anything_but_a_positive_32_bit_int(option: str, value: object) -> None:
    assert_refused(f"{option} must be an int from 1 to", value, **{option: value})


@pytest.mark.parametrize("value", [v for v in BAD_INTS if v is not None], ids=repr)
def test_turn_cap_is_none_or_a_positive_32_bit_int(value: object) -> None:
    assert_refused("keep_recent_turns must be None or an int from 1 to", value, keep_recent_turns=value)
    assert MemoryConfig(keep_recent_turns=None).keep_recent_turns is None


@pytest.mark.parametrize("value", BAD_FRACTIONS, ids=repr)
@pytest.mark.parametrize("option", FRACTION_OPTIONS)
def test_shares_refuse_anything_but_a_finite_fraction(option: str, value: object) -> None:
    assert_refused(f"{option} must be a fraction in [0, 1)", value, **{option: value})


@pytest.mark.parametrize("value", BAD_THRESHOLDS, ids=repr)
def test_summary_threshold_refuses_anything_outside_zero_to_one(value: object) -> None:
    assert_refused("summary_threshold must be a number in (0, 1]", value, summary_threshold=value)


@pytest.mark.parametrize("value", BAD_TIMEOUTS, ids=repr)
def test_background_timeout_refuses_nan_infinity_and_absurd_values(value: object) -> None:
    assert_refused(
        "background_timeout must be a number of seconds in (0, 86400]", value, background_timeout=value
    )


@pytest.mark.parametrize("option", ["background", "extract_facts", "prune_low_information"])
def test_switches_must_be_booleans(option: str) -> None:
    assert_refused(f"{option} must be True or False", 1, **{option: 1})


def test_the_limits_themselves_are_accepted() -> None:
    config = MemoryConfig(
        budget=2**31 - 1,
        background_timeout=86_400,
        summary_threshold=1,
        facts_share=0,
        summary_share=0.0,
        recall_share=0.5,
        max_message_bytes=1,
    )
    assert config.background_timeout == 86_400


def test_replace_and_from_dict_validate_too() -> None:
    with pytest.raises(ConfigError, match="background_timeout"):
        MemoryConfig().replace(background_timeout=NAN)
    with pytest.raises(ConfigError, match="max_message_bytes"):
        MemoryConfig.from_dict({"max_message_bytes": -1})


# -- SQLiteStore -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [NAN, INF, -INF, -1, 86_401, "5", True, None], ids=repr)
def test_sqlite_timeout_is_checked_when_the_store_is_created(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match=r"SQLiteStore timeout must be") as raised:
        SQLiteStore(tmp_path / "m.db", timeout=value)  # type: ignore[arg-type]
    assert "86400" in str(raised.value) and repr(value)[:8] in str(raised.value)
    assert not (tmp_path / "m.db").exists()


@pytest.mark.parametrize("value", [1, 2.0, None, True, b"FULL", "fast"], ids=repr)
def test_sqlite_synchronous_must_be_one_of_the_pragma_names(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match=r"SQLiteStore synchronous must be one of \('OFF', 'NORMAL'"):
        SQLiteStore(tmp_path / "m.db", synchronous=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -1, 257, 2.0, NAN, INF, "4", True, None], ids=repr)
def test_sqlite_pool_size_must_be_a_small_positive_int(tmp_path: Path, value: object) -> None:
    with pytest.raises(ConfigError, match=r"SQLiteStore pool_size must be an int from 1 to 256"):
        SQLiteStore(tmp_path / "m.db", pool_size=value)  # type: ignore[arg-type]


def test_sqlite_accepts_its_limits_and_any_case(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "a.db", timeout=0, synchronous="full", pool_size=1).close()
    SQLiteStore(tmp_path / "b.db", timeout=86_400, synchronous="Extra", pool_size=256).close()

"""Numeric options are checked when they are given, not when a worker first trips on them.

`MemoryConfig(background_timeout=nan)` used to be accepted, after which the
background worker died and `flush()` never returned; `SQLiteStore(timeout="5")`
failed only on its first connection; `RecallConfig(speaker_weight=nan)` made
recall return nothing, and `RedisStore(socket_timeout=-1)` failed on its first
call. Each bad value now raises `ConfigError`
naming the option, the value and what is allowed.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from convmem import (
    ApproximateCounter,
    AsyncPostgresStore,
    AsyncRedisStore,
    BudgetError,
    ConfigError,
    ConversationMemory,
    HashingEmbedder,
    InMemoryStore,
    InvalidMessageError,
    MemoryConfig,
    PostgresStore,
    Recall,
    RecallConfig,
    RedisStore,
    SessionRegistry,
    SQLiteStore,
)

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

FRACTION_OPTIONS = ["facts_share", "summary_share", "recall_share", "past_summary_share"]
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


# -- RecallConfig ----------------------------------------------------------------------------------------

RECALL_FRACTIONS = [
    "dense_weight",
    "feedback_weight",
    "exchange_weight",
    "mmr_lambda",
    "duplicate_similarity",
    "min_lexical",
    "past_share",
    "followup_share",
    "min_coverage_self",
    "min_coverage_general",
]
RECALL_WEIGHTS = ["speaker_weight", "episode_weight", "neighbour_weight", "recency_weight"]
RECALL_DURATIONS = ["episode_gap_seconds", "recency_half_life_days"]
RECALL_COUNTS = ["rrf_k", "candidates", "max_unit_chars", "hnsw_threshold", "persist_every"]


def assert_recall_refuses(option: str, value: object, allowed: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{option} must be {allowed}")) as raised:
        RecallConfig(**{option: value})
    assert repr(value)[:20] in str(raised.value) or type(value).__name__ in str(raised.value)


@pytest.mark.parametrize("value", [NAN, INF, -INF, -0.1, 1.5, "0.5", True, None], ids=repr)
@pytest.mark.parametrize("option", RECALL_FRACTIONS)
def test_recall_fractions_refuse_anything_outside_zero_to_one(option: str, value: object) -> None:
    assert_recall_refuses(option, value, "a number in [0, 1]")


@pytest.mark.parametrize("value", [NAN, INF, -INF, -0.1, "0.2", True, None], ids=repr)
@pytest.mark.parametrize("option", RECALL_WEIGHTS)
def test_recall_weights_refuse_nan_infinity_and_negatives(option: str, value: object) -> None:
    assert_recall_refuses(option, value, "a finite number >= 0")


@pytest.mark.parametrize("value", [NAN, INF, 0, -1, "60", True, None], ids=repr)
@pytest.mark.parametrize("option", RECALL_DURATIONS)
def test_recall_durations_must_be_finite_and_positive(option: str, value: object) -> None:
    assert_recall_refuses(option, value, "a finite number > 0")


@pytest.mark.parametrize("value", [NAN, 0, -1, 2.0, "5", True, None, 2**64], ids=repr)
@pytest.mark.parametrize("option", RECALL_COUNTS)
def test_recall_counts_must_be_positive_32_bit_ints(option: str, value: object) -> None:
    assert_recall_refuses(option, value, "an int from 1 to 2147483647")


@pytest.mark.parametrize("value", [NAN, -1, 1.5, "1", True, None, 2**64], ids=repr)
@pytest.mark.parametrize("option", ["neighbour_radius", "widened_excerpts"])
def test_recall_counts_from_zero_must_be_ints_from_zero(option: str, value: object) -> None:
    assert_recall_refuses(option, value, "an int from 0 to 2147483647")


@pytest.mark.parametrize("value", [NAN, INF, -1.5, 1.5, "0.1", True, None], ids=repr)
def test_recall_min_score_must_be_a_cosine_similarity(value: object) -> None:
    assert_recall_refuses("min_score", value, "a cosine similarity in [-1, 1]")


def test_recall_config_accepts_its_limits() -> None:
    config = RecallConfig(
        dense_weight=0,
        feedback_weight=1,
        mmr_lambda=1,
        speaker_weight=0,
        episode_gap_seconds=1e-3,
        neighbour_radius=0,
        candidates=2**31 - 1,
        min_score=-1,
    )
    assert config.candidates == 2**31 - 1


def test_recall_takes_only_a_recall_config() -> None:
    with pytest.raises(ConfigError, match="config must be a RecallConfig, got dict"):
        Recall(HashingEmbedder(), config={"min_score": 0.5})  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, 2.5, NAN, True], ids=repr)
def test_recall_search_refuses_a_bad_token_budget(value: object) -> None:
    with pytest.raises(BudgetError, match="max_tokens must be an int >= 0"):
        Recall(HashingEmbedder()).search(
            "s",
            "q",
            store=InMemoryStore(),
            max_tokens=value,
            counter=ApproximateCounter(),  # type: ignore[arg-type]
        )


# -- RedisStore and PostgresStore (refused before any connection is made) --------------------------------

REDIS_URL = "redis://127.0.0.1:9"  # nothing listens there; a refused option never gets that far
POSTGRES_URL = "postgresql://nobody@127.0.0.1:9/none"


@pytest.mark.parametrize("store_class", [RedisStore, AsyncRedisStore])
@pytest.mark.parametrize("value", [NAN, INF, -1, 0, 86_401, "5", True], ids=repr)
def test_redis_socket_timeout_is_checked_when_the_store_is_created(store_class: type, value: object) -> None:
    with pytest.raises(
        ConfigError, match=re.escape("socket_timeout must be None or a number of seconds in (0, 86400]")
    ):
        store_class(REDIS_URL, socket_timeout=value)


@pytest.mark.parametrize("store_class", [RedisStore, AsyncRedisStore])
@pytest.mark.parametrize("value", [NAN, INF, -1, 0, 1e300, "60", True], ids=repr)
def test_redis_ttl_must_be_a_positive_finite_number_of_seconds(store_class: type, value: object) -> None:
    with pytest.raises(ConfigError, match=r"ttl_seconds must be None or a positive number of seconds up to"):
        store_class(REDIS_URL, ttl_seconds=value)


@pytest.mark.parametrize("store_class", [RedisStore, AsyncRedisStore])
@pytest.mark.parametrize("value", [0, -1, 100_001, 2.0, NAN, "64", True, None], ids=repr)
def test_redis_max_connections_must_be_a_bounded_positive_int(store_class: type, value: object) -> None:
    with pytest.raises(ConfigError, match=r"max_connections must be an int from 1 to 100000"):
        store_class(REDIS_URL, max_connections=value)


@pytest.mark.parametrize("store_class", [PostgresStore, AsyncPostgresStore])
@pytest.mark.parametrize("value", [NAN, INF, -1, 0, 86_401, "10", True, None], ids=repr)
def test_postgres_timeout_is_checked_when_the_store_is_created(store_class: type, value: object) -> None:
    with pytest.raises(ConfigError, match=re.escape("timeout must be a number of seconds in (0, 86400]")):
        store_class(POSTGRES_URL, timeout=value)


@pytest.mark.parametrize("store_class", [PostgresStore, AsyncPostgresStore])
@pytest.mark.parametrize("value", [0, -1, 10_001, 2.0, NAN, "10", True, None], ids=repr)
def test_postgres_max_connections_must_be_a_bounded_positive_int(store_class: type, value: object) -> None:
    with pytest.raises(ConfigError, match=r"max_connections must be an int from 1 to 10000"):
        store_class(POSTGRES_URL, max_connections=value)


# -- SessionRegistry and the wrappers ----------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 2**31, 2.0, NAN, "8", True, None], ids=repr)
def test_session_registry_bound_must_be_a_positive_32_bit_int(value: object) -> None:
    with pytest.raises(ConfigError, match=r"max_cached_sessions must be an int from 1 to 2147483647"):
        SessionRegistry(max_cached_sessions=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, -1, 2**31, 2.0, NAN, "100", True], ids=repr)
def test_langchain_budget_must_be_a_positive_32_bit_int(value: object) -> None:
    from langchain_convmem import ConvMemSessions

    with pytest.raises(BudgetError, match=r"budget must be a positive int \(1 to 2147483647\) or None"):
        ConvMemSessions(budget=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, 2**31, 2.0, NAN, "85", True], ids=repr)
def test_langchain_media_part_tokens_must_be_a_non_negative_int(value: object) -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from langchain_convmem import ChatModelTokenCounter

    with pytest.raises(
        ConfigError, match=r"media_part_tokens must be a non-negative int \(0 to 2147483647\)"
    ):
        ChatModelTokenCounter(FakeListChatModel(responses=["x"]), media_part_tokens=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("option", ["dimension", "batch_size"])
@pytest.mark.parametrize("value", [0, -1, 2**31, 2.0, "64", True], ids=repr)
def test_embedder_sizes_must_be_positive_32_bit_ints(option: str, value: object) -> None:
    from langchain_core.embeddings import DeterministicFakeEmbedding

    from langchain_convmem import LangChainEmbedder

    with pytest.raises(ConfigError, match=rf"{option} must be None or an int from 1 to 2147483647"):
        LangChainEmbedder(DeterministicFakeEmbedding(size=4), **{option: value})


@pytest.mark.parametrize(
    ("method", "args", "kwargs", "error", "message"),
    [
        ("tail", (10**20,), {}, InvalidMessageError, r"n must be a positive int \(1 to 2147483647\)"),
        (
            "recent_turns",
            (2,),
            {"max_tokens": "x"},
            InvalidMessageError,
            r"max_tokens must be None or a positive",
        ),
        (
            "recent_turns",
            (2,),
            {"max_tokens": -5},
            InvalidMessageError,
            r"max_tokens must be None or a positive",
        ),
        ("recent_turns", (10**20,), {}, InvalidMessageError, r"max_turns must be None or a positive int"),
        ("render_transcript", ("answer",), {"max_turns": 0}, InvalidMessageError, r"max_turns must be None"),
        (
            "build_context",
            ("q", 10**20),
            {},
            BudgetError,
            r"budget must be a positive int \(1 to 2147483647\)",
        ),
        (
            "build_context",
            ("q", 400),
            {"include_query": "no"},
            ConfigError,
            r"include_query must be True or False",
        ),
        ("flush", (-1,), {}, ConfigError, r"timeout must be None or seconds \(a number >= 0\), got -1"),
        ("flush", ("soon",), {}, ConfigError, r"timeout must be None or seconds"),
        ("flush", (float("nan"),), {}, ConfigError, r"timeout must be None or seconds"),
        (
            "forget_fact",
            (None,),
            {},
            InvalidMessageError,
            r"key must be a fact's key \(a str\), got NoneType",
        ),
        ("delete_messages", (None,), {}, InvalidMessageError, r"seqs must be a list of message seqs"),
        (
            "delete_messages",
            ({1: 2},),
            {},
            InvalidMessageError,
            r"seqs must be a list of message seqs .* got dict",
        ),
        (
            "add_messages",
            (None,),
            {},
            InvalidMessageError,
            r"add_messages takes a list of messages, got NoneType",
        ),
    ],
)
@pytest.mark.parametrize("use_async", [False, True])
def test_a_call_with_an_argument_out_of_its_range_is_refused_naming_it(
    method: str,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    error: type[Exception],
    message: str,
    use_async: bool,
    tmp_path: Path,
) -> None:
    """Each argument of the memory's calls is checked as the options are: a value no store
    can take (10**20 overflows SQLite's integers) or of the wrong type is refused with its
    name, not as an OverflowError, TypeError or AttributeError, and changes nothing."""
    memory = ConversationMemory("s", SQLiteStore(tmp_path / "chat.db"))
    memory.add_turn("My name is Ana.", "Hello Ana.")
    before = memory.messages()
    with pytest.raises(error, match=message):
        if use_async:
            asyncio.run(getattr(memory, "a" + method)(*args, **kwargs))
        else:
            getattr(memory, method)(*args, **kwargs)
    assert memory.messages() == before and [f.value for f in memory.facts()] == ["Ana"]

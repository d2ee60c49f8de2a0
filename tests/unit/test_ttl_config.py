"""TtlConfig: builder, defaults, validation, durations, byte layouts of the TTL codec."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from spark_state.errors import ConfigError
from spark_state.keys import system as syskeys
from spark_state.ttl import (
    ManualClock,
    StateVisibility,
    SystemClock,
    TimeCharacteristic,
    TtlConfig,
    UpdateType,
    parse_duration_ms,
)
from spark_state.ttl import codec


def test_builder_defaults_follow_flink() -> None:
    cfg = TtlConfig.builder(timedelta(seconds=10)).build()
    assert cfg.ttl_ms == 10_000
    assert cfg.update_type is UpdateType.ON_CREATE_AND_WRITE
    assert cfg.visibility is StateVisibility.NEVER_RETURN_EXPIRED
    assert cfg.time_characteristic is TimeCharacteristic.PROCESSING_TIME
    assert cfg.cleanup_in_background and not cfg.cleanup_full_snapshot and cfg.cleanup_size > 0
    assert isinstance(cfg.clock, SystemClock) and cfg.enabled


def test_builder_sets_every_option_and_config_is_immutable() -> None:
    clock = ManualClock(5)
    cfg = (TtlConfig.builder("2 min").update_ttl_on_read_and_write().return_expired_if_not_cleaned_up()
           .cleanup_incrementally(7).cleanup_full_snapshot().disable_cleanup_in_background().clock(clock).build())
    assert (cfg.ttl_ms, cfg.update_type, cfg.visibility) == (
        120_000, UpdateType.ON_READ_AND_WRITE, StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP)
    assert (cfg.cleanup_size, cfg.cleanup_full_snapshot, cfg.cleanup_in_background) == (7, True, False)
    assert cfg.now_ms() == 5 and cfg.refresh_on_read and cfg.return_expired
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.ttl_ms = 1  # type: ignore[misc]


def test_enum_options_accept_flink_names() -> None:
    cfg = TtlConfig.builder(1000).update_type("OnReadAndWrite").visibility("ReturnExpiredIfNotCleanedUp").build()
    assert cfg.update_type is UpdateType.ON_READ_AND_WRITE
    assert cfg.visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
    assert not TtlConfig.builder(1000).update_type(UpdateType.DISABLED).build().enabled
    assert not TtlConfig.DISABLED.enabled


@pytest.mark.parametrize("text, ms", [
    ("250ms", 250), ("90s", 90_000), ("10 minutes", 600_000), ("2h", 7_200_000), ("1 day", 86_400_000),
    ("1.5s", 1500), ("42", 42), (timedelta(minutes=1), 60_000), (3000, 3000),
])
def test_durations(text: object, ms: int) -> None:
    assert parse_duration_ms(text) == ms  # type: ignore[arg-type]


@pytest.mark.parametrize("bad, message", [
    (0, "positive"), (-5, "positive"), ("0s", "positive"), ("ten minutes", "not a duration"),
    ("5 parsecs", "not a duration"), (True, "duration"), (None, "duration"), (timedelta(0), "positive"),
    (0.5, "at least 1 ms"),
])
def test_bad_durations_are_clear(bad: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TtlConfig.builder(bad)  # type: ignore[arg-type]


def test_bad_options_are_clear() -> None:
    with pytest.raises(ConfigError, match="update type must be one of Disabled, OnCreateAndWrite, OnReadAndWrite"):
        TtlConfig.builder("1s").update_type("sometimes")
    with pytest.raises(ConfigError, match="visibility"):
        TtlConfig.builder("1s").visibility("maybe")
    with pytest.raises(ConfigError, match="event time is not supported"):
        TtlConfig.builder("1s").time_characteristic("EventTime")
    with pytest.raises(ConfigError, match="positive integer"):
        TtlConfig.builder("1s").cleanup_incrementally(0)
    with pytest.raises(ConfigError, match="now_ms"):
        TtlConfig.builder("1s").clock(object()).build()  # type: ignore[arg-type]


def test_manual_clock_moves_only_forward() -> None:
    clock = ManualClock(100)
    assert clock.advance(50) == 150
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_stamp_layout_is_timestamp_first_big_endian() -> None:
    raw = codec.stamp(b"value", 0x0102030405060708)
    assert raw == bytes.fromhex("0102030405060708") + b"value"
    assert codec.unstamp(raw) == (0x0102030405060708, b"value")
    with pytest.raises(ValueError):
        codec.stamp_of(b"short")


def test_expiry_rule_is_flinks_and_overflow_safe() -> None:
    assert not codec.is_expired(1000, 500, 1499)
    assert codec.is_expired(1000, 500, 1500)  # expiration time <= now
    assert codec.expiration_time(codec.MAX_TIMESTAMP - 1, 10) == codec.MAX_TIMESTAMP
    assert not codec.is_expired(codec.MAX_TIMESTAMP - 1, 1 << 62, codec.MAX_TIMESTAMP - 1)


def test_index_is_bucketed_and_the_sweep_range_covers_whole_expired_buckets() -> None:
    assert codec.index_granularity(16_000) == 1000
    assert codec.index_granularity(10) == 1 and codec.index_granularity(1 << 40) == codec.MAX_GRANULARITY_MS
    assert codec.bucket_start(12_345, 1000) == 12_000
    keys = sorted(syskeys.index_key(b"ns", codec.bucket_start(t, 10), b"k%d" % t) for t in (5, 100, 20, 7, 29))
    assert [syskeys.decode_index_key(b"ns", k) for k in keys] == [
        (0, b"k5"), (0, b"k7"), (20, b"k20"), (20, b"k29"), (100, b"k100")]
    # now 40, ttl 10: accesses <= 30 expired; bucket [20, 30) is wholly expired, [30, 40) is not.
    start, end = codec.expired_index_range(b"ns", 10, 10, 40)
    assert [syskeys.decode_index_key(b"ns", k)[1] for k in keys if start <= k < end] == [b"k5", b"k7", b"k20", b"k29"]
    start, end = codec.expired_index_range(b"ns", 10, 10, 38)   # bucket [20, 30) not wholly expired yet
    assert [syskeys.decode_index_key(b"ns", k)[1] for k in keys if start <= k < end] == [b"k5", b"k7"]
    start, end = codec.expired_index_range(b"ns", 10, 10, 38, whole_buckets=False)
    assert [syskeys.decode_index_key(b"ns", k)[1] for k in keys if start <= k < end] == [b"k5", b"k7", b"k20", b"k29"]
    assert codec.expired_index_range(b"ns", 100, 10, 30) is None
    assert syskeys.is_system_key(keys[0]) and not syskeys.is_system_key(b"\x7f\xff")

"""The provider's TTL confs: parsing, validation errors that name the conf, per-operator
resolution, and joins."""

from __future__ import annotations

import logging
import sys

import pytest

from spark_state.errors import ConfigError
from spark_state.provider import ttl_policy
from spark_state.provider.service import engine_config, store_ttl
from spark_state.ttl import StateVisibility, UpdateType

P = "spark.sql.streaming.stateStore.sparkState."


def resolve(options, operator=0, store="default"):
    return ttl_policy.resolve(options, operator, store)


def test_ttl_is_off_by_default():
    assert not resolve({}).enabled
    assert not resolve({"ttl": "none"}).enabled
    assert not resolve({"ttl.updateType": "OnReadAndWrite"}).enabled  # options alone enable nothing


def test_default_ttl_and_its_options():
    ttl = resolve({"ttl": "10 minutes", "ttl.updateType": "OnReadAndWrite",
                   "ttl.visibility": "ReturnExpiredIfNotCleanedUp", "ttl.cleanupSize": "500",
                   "ttl.fullSnapshotCleanup": "true", "ttl.backgroundCleanup": "false"})
    config = ttl.config
    assert config.ttl_ms == 600_000
    assert config.update_type is UpdateType.ON_READ_AND_WRITE
    assert config.visibility is StateVisibility.RETURN_EXPIRED_IF_NOT_CLEANED_UP
    assert (config.cleanup_size, config.cleanup_full_snapshot, config.cleanup_in_background) == (500, True, False)
    defaults = resolve({"ttl": "90s"}).config
    assert defaults.update_type is UpdateType.ON_CREATE_AND_WRITE
    assert defaults.visibility is StateVisibility.NEVER_RETURN_EXPIRED
    assert (defaults.cleanup_size, defaults.cleanup_full_snapshot, defaults.cleanup_in_background) == (100_000, False, True)


def test_per_operator_overrides():
    options = {"ttl": "1h", "ttl.operator.2": "5 min", "ttl.operator.3": "none"}
    assert resolve(options, 0).config.ttl_ms == 3_600_000
    assert resolve(options, 2).config.ttl_ms == 300_000
    assert not resolve(options, 3).enabled
    only = {"ttl.operator.1": "2s"}
    assert not resolve(only, 0).enabled and resolve(only, 1).config.ttl_ms == 2000


def test_join_stores_are_skipped_by_the_default_and_rejected_by_an_override(caplog):
    caplog.set_level(logging.INFO)
    for store in ("left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue"):
        ttl = resolve({"ttl": "1h"}, 7, store)
        assert not ttl.enabled and "stream-stream join" in ttl.exempt_reason
    assert "TTL not applied to store 'left-keyToNumValues' of operator 7" in caplog.text
    assert not resolve({"ttl": "1h", "ttl.operator.7": "none"}, 7, "left-keyToNumValues").enabled
    with pytest.raises(ConfigError) as excinfo:
        resolve({"ttl.operator.7": "1h"}, 7, "right-keyWithIndexToValue")
    message = str(excinfo.value)
    assert f"{P}ttl.operator.7 sets a TTL for operator 7, a stream-stream join" in message
    assert "watermarks" in message and "set it to 'none'" in message


@pytest.mark.parametrize("options, names", [
    ({"ttl": "10 parsecs"}, [f"option '{P}ttl'", "not a duration"]),
    ({"ttl": "0s"}, [f"option '{P}ttl'", "positive"]),
    ({"ttl": "1h", "ttl.updateType": "Sometimes"}, [f"'{P}ttl.updateType'", "OnCreateAndWrite, OnReadAndWrite"]),
    ({"ttl": "1h", "ttl.visibility": "Maybe"}, [f"'{P}ttl.visibility'", "NeverReturnExpired"]),
    ({"ttl": "1h", "ttl.cleanupSize": "-1"}, [f"'{P}ttl.cleanupSize'", "non-negative integer"]),
    ({"ttl": "1h", "ttl.cleanupSize": "lots"}, [f"'{P}ttl.cleanupSize'"]),
    ({"ttl": "1h", "ttl.fullSnapshotCleanup": "sure"}, [f"'{P}ttl.fullSnapshotCleanup'", "true or false"]),
    ({"ttl": "1h", "ttl.backgroundCleanup": "2"}, [f"'{P}ttl.backgroundCleanup'"]),
    ({"ttl.operator.x": "1h"}, [f"'{P}ttl.operator.x'", "not an operator id", "state-metadata"]),
    ({"ttl.operator.1": "soon"}, [f"'{P}ttl.operator.1'", "not a duration"]),
    ({"ttl.cleanupSise": "5"}, [f"unknown spark-state TTL option '{P}ttl.cleanupSise'", f"{P}ttl.cleanupSize"]),
    ({"ttl.testing.clock": "batch:0"}, [f"'{P}ttl.testing.clock'", "testing only"]),
])
def test_bad_values_name_the_conf(options, names):
    with pytest.raises(ConfigError) as excinfo:
        resolve(options)
    for name in names:
        assert name in str(excinfo.value)


def test_options_are_validated_even_for_exempt_stores():
    with pytest.raises(ConfigError):
        resolve({"ttl": "1h", "ttl.updateType": "Sometimes"}, 0, "left-keyToNumValues")


def test_testing_clock_is_loaded_version_times_step():
    ttl = resolve({"ttl": "5s", "ttl.testing.clock": "batch:250"})
    assert ttl.now_ms(0) == 0 and ttl.now_ms(8) == 2000
    real = resolve({"ttl": "5s", "ttl.testing.clock": "system"})
    assert abs(real.now_ms(8) - resolve({"ttl": "5s"}).now_ms(0)) < 60_000


def test_engine_options_and_ttl_options_are_split():
    options = {"engine": {"ttl": "1h", "ttl.operator.1": "none", "snapshotInterval": "3"},
               "operatorId": 1, "storeName": "default"}
    assert engine_config(options).snapshot_interval == 3
    assert not store_ttl(options).enabled
    assert store_ttl(dict(options, operatorId=0)).config.ttl_ms == 3_600_000
    with pytest.raises(ConfigError) as excinfo:
        engine_config({"engine": {"tll": "1h"}})
    assert f"unknown spark-state option '{P}tll'" in str(excinfo.value)
    assert f"TTL options: {P}ttl and {P}ttl.*" in str(excinfo.value)


def test_configure_accepts_and_validates_ttl_options(monkeypatch):
    from pyspark.sql import SparkSession

    import spark_state
    from spark_state.spark import jvm

    monkeypatch.setattr(jvm, "jar_path", lambda build=True: "/nonexistent/spark-state-shim.jar")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)  # configure() sets it when unset
    builder = spark_state.configure(SparkSession.builder, options={"ttl": "10 minutes", "ttl.operator.1": "none"})
    assert builder._options[P + "ttl"] == "10 minutes"
    with pytest.raises(ConfigError) as excinfo:
        spark_state.configure(SparkSession.builder, options={"ttl": "1h", "ttl.visibility": "Sometimes"})
    assert f"'{P}ttl.visibility'" in str(excinfo.value)

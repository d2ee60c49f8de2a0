"""The provider's own options (``workersPerExecutor``, ``testing.crashOnCommit``) pass
``configure`` and the worker's engine config, and bad values name the conf; engine writes of
the wrong type fail at once, naming the problem."""

from __future__ import annotations

import pytest
from support import RecordingBuilder

import spark_state
from spark_state import EngineConfig, VersionedStore
from spark_state.errors import ConfigError
from spark_state.provider.service import engine_config


def test_configure_accepts_workers_per_executor_as_documented():
    builder = spark_state.configure(RecordingBuilder(), options={"workersPerExecutor": 2, "snapshotInterval": "5"})
    assert builder._options["spark.sql.streaming.stateStore.sparkState.workersPerExecutor"] == "2"


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1.5", "65"])
def test_configure_rejects_a_bad_workers_per_executor_naming_the_conf(value):
    with pytest.raises(ConfigError, match=r"sparkState\.workersPerExecutor must be a whole number .*got"):
        spark_state.configure(RecordingBuilder(), options={"workersPerExecutor": value})


def test_configure_checks_prestart_workers_naming_the_conf():
    builder = spark_state.configure(RecordingBuilder(), options={"prestartWorkers": "false"})
    assert builder._options["spark.sql.streaming.stateStore.sparkState.prestartWorkers"] == "false"
    with pytest.raises(ConfigError, match=r"sparkState\.prestartWorkers must be true or false, got 'sometimes'"):
        spark_state.configure(RecordingBuilder(), options={"prestartWorkers": "sometimes"})
    spark_state.configure(RecordingBuilder(), options={"prestartWorkers": "Yes"})  # a boolean word, any case


def test_the_worker_ignores_provider_only_options_and_checks_them():
    config = engine_config({"engine": {"workersPerExecutor": "3", "testing.crashOnCommit": "3:/tmp/x:once"}})
    assert isinstance(config, EngineConfig)
    with pytest.raises(ConfigError, match="testing.crashOnCommit"):
        engine_config({"engine": {"testing.crashOnCommit": "soon"}})


@pytest.mark.parametrize("key,value,fragment", [
    (b"k", 5, "store values must be bytes, got int 5"),
    ("k", b"v", "store keys must be bytes, got str 'k' (encode text"),
    (b"k", None, "value must be bytes; use delete()"),
    (b"k", bytearray(b"v"), "pass bytes(...)"),
])
def test_engine_writes_of_the_wrong_type_fail_at_once(tmp_path, key, value, fragment):
    with VersionedStore(str(tmp_path / "ckpt")) as store:
        store.load(0)
        with pytest.raises(TypeError) as err:
            store.put(key, value)
        assert fragment in str(err.value)
        with pytest.raises(TypeError):
            store.put_many([key], [value])
        store.put(b"ok", b"1")       # nothing bad was staged: the commit goes through
        assert store.commit() == 1
        with pytest.raises(TypeError, match="store keys must be bytes"):
            store.delete("k")

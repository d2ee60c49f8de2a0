"""The shipped conf/spark-defaults.conf must be valid spark-state configuration."""

from __future__ import annotations

import os

from spark_state import EngineConfig
from spark_state.constants import CONF_PREFIX
from spark_state.spark.jvm import EXTENSIONS_CLASS, PLUGIN_CLASS, PROVIDER_CLASS

CONF_FILE = os.path.join(os.path.dirname(__file__), "..", "..", "conf", "spark-defaults.conf")


def test_shipped_spark_defaults_are_valid_engine_options():
    confs = {}
    for line in open(CONF_FILE):
        line = line.strip()
        if line and not line.startswith("#"):
            key, value = line.split(None, 1)
            confs[key] = value
    assert any(k.startswith(CONF_PREFIX) for k in confs)
    assert confs["spark.sql.streaming.stateStore.providerClass"] == PROVIDER_CLASS
    assert confs["spark.plugins"] == PLUGIN_CLASS
    assert confs["spark.sql.extensions"] == EXTENSIONS_CLASS
    config = EngineConfig.from_options(confs, prefix=CONF_PREFIX)
    assert config.backend == "rocksdb" and config.snapshot_interval == 10

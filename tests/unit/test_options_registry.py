"""The option table (:mod:`spark_state.options`, source of docs/configuration.md) agrees with every
reader of the options: names, defaults and limits. A change on either side fails here."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from spark_state import EngineConfig, constants as C, options as O
from spark_state.errors import ConfigError
from spark_state.memory import parse_size

ROOT = Path(__file__).resolve().parents[2]


def _default(key: str) -> str:
    """The default as shown: the whole text without backticks, or its first backticked value when
    the text goes on (a default that other settings change, such as the memory budget's parts)."""
    shown = O.spec(key).default
    first = re.match(r"^`([^`]*)`", shown)
    return first.group(1) if first else shown.strip("`")


def test_keys_are_unique_and_groups_known():
    keys = [o.key for o in O.OPTIONS]
    assert len(keys) == len(set(keys))
    assert {o.group for o in O.OPTIONS} <= {g.name for g in O.GROUPS}


def test_engine_options_match_engine_config():
    from spark_state.config import _OPTIONS

    fields = {f.name: f for f in dataclasses.fields(EngineConfig)}
    assert set(_OPTIONS) == {o.key for o in O.by_group("engine")}
    for spec in O.by_group("engine"):
        assert spec.field in fields, spec.key
        default = fields[spec.field].default
        if default is None:
            continue
        shown = str(default).lower() if isinstance(default, bool) else str(default)
        given = _default(spec.key)
        assert (str(parse_size(given)) if spec.kind == "size" else given) == shown, spec.key


def test_storage_options_match_storage():
    from spark_state.storage.factory import HDFS_PREFIX, S3_CLIENT_CONFIG, S3_OPTIONS
    from spark_state.storage.retry import RETRY_OPTIONS, RetryPolicy

    keys = {o.storage_key for o in O.by_group("storage")}
    assert set(S3_OPTIONS) | set(RETRY_OPTIONS) | {HDFS_PREFIX + "<hadoop key>"} == keys
    policy = RetryPolicy()
    assert int(_default("storage.retry.attempts")) == policy.attempts
    assert int(_default("storage.retry.baseDelayMs")) == policy.base_delay_ms
    assert int(_default("storage.retry.maxDelayMs")) == policy.max_delay_ms
    assert int(_default("storage.retry.timeoutMs")) == policy.timeout_ms
    assert int(_default("storage.s3.connect_timeout")) == S3_CLIENT_CONFIG["connect_timeout"]
    assert int(_default("storage.s3.read_timeout")) == S3_CLIENT_CONFIG["read_timeout"]


def test_ttl_options_match_the_ttl_policy():
    from spark_state.provider import ttl_policy as P
    from spark_state.ttl.config import DEFAULT_CLEANUP_SIZE

    table = {o.key for o in O.by_group("ttl")}
    assert table == set(P.KNOWN) | {P.OPERATOR_PREFIX + "<operatorId>"}
    settings = P.parse_settings({})
    assert settings.default_ttl_ms is None and _default("ttl") == "off"
    assert _default("ttl.updateType") == settings.update_type.value
    assert _default("ttl.visibility") == settings.visibility.value
    assert int(_default("ttl.cleanupSize")) == settings.cleanup_size == DEFAULT_CLEANUP_SIZE
    assert _default("ttl.fullSnapshotCleanup") == str(settings.full_snapshot_cleanup).lower()
    assert _default("ttl.backgroundCleanup") == str(settings.background_cleanup).lower()
    assert settings.batch_clock is None and _default("ttl.testing.clock") == "system"


def test_provider_options_match_provider_and_shim():
    from spark_state.provider import options as P

    assert {o.key for o in O.by_group("provider")} == set(P.PROVIDER_ONLY)
    assert f"1 to {P.MAX_WORKERS_PER_EXECUTOR}" in O.spec(P.WORKERS_PER_EXECUTOR).meaning
    scala = (ROOT / "jvm-shim/src/main/scala/org/apache/spark/sql/execution/streaming/state/sparkstate/"
             "PythonWorker.scala").read_text()
    assert f'"{O.spec(P.WORKERS_PER_EXECUTOR).conf}"' in scala
    assert re.search(rf"MaxConfiguredWorkers = {P.MAX_WORKERS_PER_EXECUTOR}\b", scala)
    assert re.search(r"MaxDefaultWorkers = 4\b", scala) and "at most 4" in O.spec(P.WORKERS_PER_EXECUTOR).default
    plugin = (ROOT / "jvm-shim/src/main/scala/org/apache/spark/sql/execution/streaming/state/sparkstate/"
              "SparkStatePlugin.scala").read_text()
    assert f'ConfPrefix + "{P.PRESTART_WORKERS}"' in plugin and '"true")' in plugin
    assert _default(P.PRESTART_WORKERS) == "true"


def test_process_options_match_the_python_api():
    from spark_state.process.location import CHECKPOINT_DIR, ROOT_CONF

    assert {o.conf for o in O.by_group("process")} == {ROOT_CONF}
    assert "beside the query's checkpoint" in O.spec("process.root").default
    assert f"<checkpoint>/{CHECKPOINT_DIR}/<name>" in O.spec("process.root").meaning


def test_a_python_api_conf_is_no_engine_error():
    """process.root is a session conf: the provider (which sees every conf under the prefix) and
    configure() must not call it unknown."""
    config = EngineConfig.from_options({C.CONF_PREFIX + "process.root": "/tmp/x", C.CONF_PREFIX + "backend": "hashmap"},
                                       prefix=C.CONF_PREFIX)
    assert config.backend == "hashmap"
    from spark_state.provider.service import engine_config

    assert engine_config({"engine": {"process.root": "/tmp/x"}}).backend == "rocksdb"
    with pytest.raises(ConfigError, match="unknown spark-state option"):
        EngineConfig.from_options({"process.rooot": "/tmp/x"})


def test_environment_variables_match_their_readers():
    from spark_state.spark import spark_jars
    from spark_state.ops.resplit import CRASH_AFTER_STORES_ENV
    from spark_state.testing.crashpoints import ENV_VAR

    names = {v.name for v in O.ENV_VARS}
    assert {spark_jars.CACHE_DIR_ENV, ENV_VAR, CRASH_AFTER_STORES_ENV, "SPARK_STATE_LOG_LEVEL", "PYSPARK_PYTHON"} == names
    worker = (ROOT / "spark_state/provider/worker.py").read_text()
    assert 'os.environ.get("SPARK_STATE_LOG_LEVEL", "INFO")' in worker


# --- who reads what: the keyed functions' share of the session's confs ------------------------------
P = C.CONF_PREFIX


def test_find_and_groups_cover_patterns_and_namespaces():
    assert O.find("storage.hdfs.dfs.nameservices").key == "storage.hdfs.<hadoop key>"
    assert O.find("ttl.operator.3").key == "ttl.operator.<operatorId>"
    assert O.find("storage.hdfs.") is None and O.find("snapshotIntervall") is None
    assert O.group_of("ttl.updateTyp").name == "ttl"  # the TTL policy owns ttl.* and names its typos
    assert O.group_of("backend").readers == O.READERS
    assert {g.name for g in O.GROUPS if O.KEYED not in g.readers} == {"ttl", "provider"}
    assert {g.name for g in O.GROUPS if O.PROVIDER not in g.readers} == {"process"}


def test_keyed_functions_read_engine_storage_and_unknown_confs_only():
    confs = {P + "backend": "hashmap", P + "storage.s3.region": "eu", P + "storage.hdfs.dfs.x": "1",
             P + "ttl": "1h", P + "ttl.operator.2": "none", P + "workersPerExecutor": "2",
             P + "heap.maxBytes": "1g", P + "process.root": "/r", P + "snapshotIntervall": "3",
             "spark.sql.shuffle.partitions": "4"}
    assert O.keyed_session_options(confs) == {P + "backend": "hashmap", P + "storage.s3.region": "eu",
                                              P + "storage.hdfs.dfs.x": "1", P + "snapshotIntervall": "3"}


def test_backend_choices_are_the_engines():
    assert O.spec("backend").choices == C.BACKENDS
    with pytest.raises(ConfigError, match=rf"^option '{re.escape(P)}backend' must be one of rocksdb, hashmap, "
                                          r"got 'HashMap'$"):
        EngineConfig.from_options({P + "backend": "HashMap"}, prefix=P)
    with pytest.raises(ConfigError, match=rf"^option '{re.escape(P)}snapshotInterval' must be >= 0, got -1$"):
        EngineConfig.from_options({P + "snapshotInterval": "-1"}, prefix=P)


def test_the_shim_checks_backend_with_the_same_rule():
    scala = (ROOT / "jvm-shim/src/main/scala/org/apache/spark/sql/execution/streaming/state/sparkstate/"
             "StateView.scala").read_text()
    assert "must be \" +\n      s\"one of $RocksDB, $HashMap, got '$other'\"" in scala
    assert tuple(re.findall(r'val (?:RocksDB|HashMap) = "(\w+)"', scala)) == C.BACKENDS
    core = (ROOT / "jvm-shim/src/main/scala/org/apache/spark/sql/execution/streaming/state/sparkstate/"
            "ProviderCore.scala").read_text()
    assert "toLowerCase" not in core.split('conf(confs, "backend")')[1].split("\n")[0]


def test_keyed_engine_resolution_session_then_arguments():
    from spark_state.process.errors import ProcessDefinitionError
    from spark_state.process.options import _engine

    confs = {P + "backend": "hashmap", P + "snapshotInterval": "3", P + "ttl": "1h", P + "workersPerExecutor": "2",
             P + "storage.s3.region": "eu", P + "storage.s3.endpoint_url": "http://a"}
    config = _engine(confs, None, None)
    assert (config.backend, config.snapshot_interval) == ("hashmap", 3)
    assert config.storage_options == {"s3.region": "eu", "s3.endpoint_url": "http://a"}
    config = _engine(confs, {"snapshotInterval": "5", "storage.s3.region": "us"}, {"s3.endpoint_url": "http://b"})
    assert (config.backend, config.snapshot_interval) == ("hashmap", 5)
    assert config.storage_options == {"s3.region": "us", "s3.endpoint_url": "http://b"}
    whole = _engine(confs, EngineConfig(snapshot_interval=7), None)  # an EngineConfig replaces the engine options
    assert (whole.backend, whole.snapshot_interval, whole.storage_options["s3.region"]) == ("rocksdb", 7, "eu")
    with pytest.raises(ProcessDefinitionError, match=rf"'{re.escape(P)}backend' must be one of .*got 'heap'"):
        _engine({P + "backend": "heap"}, {"backend": "rocksdb"}, None)
    with pytest.raises(ProcessDefinitionError, match=r"^engine=.*'snapshotInterval' must be an integer, got 'x'"):
        _engine(confs, {"snapshotInterval": "x"}, None)
    with pytest.raises(ProcessDefinitionError, match=r"^storage_options=.*retry.attempts"):
        _engine(confs, None, {"retry.attempts": "0"})


def test_every_reader_of_a_boolean_option_takes_the_same_words():
    """One rule: the words of spark_state.options, in any case, for the engine, storage, the TTL
    policy, the provider's own options and the data sources, and the same words in the shim."""
    from spark_state.provider import options as P
    from spark_state.provider import ttl_policy as TP
    from spark_state.state_data.datasource.options import plan_from_options
    from spark_state.state_data.errors import StateDataError
    from spark_state.storage import open_storage

    assert O.parse_bool(" Yes ") is True and O.parse_bool("OFF") is False and O.parse_bool("maybe") is None
    for word in sorted(O.TRUE_WORDS | O.FALSE_WORDS):
        want = word in O.TRUE_WORDS
        assert EngineConfig.from_options({"rocksdb.writeAheadLog": word.upper()}).rocksdb_wal is want
        assert TP.parse_settings({TP.BACKGROUND_CLEANUP: word}).background_cleanup is want
        P.validate_provider_options({P.PRESTART_WORKERS: word})
    for raw in ("maybe", ""):
        with pytest.raises(ConfigError, match="must be true or false"):
            EngineConfig.from_options({"rocksdb.writeAheadLog": raw})
        with pytest.raises(ConfigError, match="must be true or false"):
            TP.parse_settings({TP.BACKGROUND_CLEANUP: raw})
        with pytest.raises(ConfigError, match="must be true or false"):
            P.validate_provider_options({P.PRESTART_WORKERS: raw})
        with pytest.raises(ConfigError, match="is not a boolean"):
            open_storage("s3://bucket/x", {"s3.anonymous": raw})
        with pytest.raises(StateDataError, match="option allowPickle must be true or false"):
            plan_from_options({"path": "/nowhere", "stateVarName": "s", "allowPickle": raw})
    scala = (ROOT / "jvm-shim/src/main/scala/org/apache/spark/sql/execution/streaming/state/sparkstate/"
             "SparkStatePlugin.scala").read_text()
    words = {name: set(re.findall(r'"(\w+)"', re.search(rf"val {name}: Set\[String\] = Set\(([^)]*)\)", scala).group(1)))
             for name in ("TrueWords", "FalseWords")}
    assert words == {"TrueWords": set(O.TRUE_WORDS), "FalseWords": set(O.FALSE_WORDS)}

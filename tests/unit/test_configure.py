"""``configure()`` (the confs it puts on a builder), ``python -m spark_state jar`` and the
server-side confs of a Spark Connect server (``server_confs()``, ``spark-state server-conf``).

The jar build is stubbed (:func:`no_build`): these tests check what the confs name, not the
build, which ``test_jvm_build`` covers.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

import spark_state
from spark_state.errors import ConfigError
from spark_state.spark import jvm


# --- configure() --------------------------------------------------------------------------

FAKE_JAR = "/opt/cache/spark-state-shim.jar"


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Stub the jar build: jar_path returns FAKE_JAR and counts its calls."""
    calls: list[int] = []

    def fake_jar_path(build: bool = True, line=None) -> str:
        calls.append(1)
        return FAKE_JAR

    monkeypatch.setattr(jvm, "jar_path", fake_jar_path)
    return calls


def test_configure_sets_confs(no_build: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    builder = (SparkSession.builder.config("spark.jars", "/a.jar,/b.jar").config("spark.plugins", "com.example.Theirs")
               .config("spark.sql.extensions", "com.example.TheirExtensions"))
    out = spark_state.configure(
        builder,
        backend="hashmap",
        options={"snapshotInterval": "5", "storage.s3.endpoint_url": "http://localhost:9000"},
    )
    assert out is builder
    conf = builder._options
    assert conf["spark.jars"] == "/a.jar,/b.jar," + FAKE_JAR
    assert conf["spark.plugins"] == "com.example.Theirs," + jvm.PLUGIN_CLASS  # theirs kept, ours appended
    assert conf["spark.sql.extensions"] == "com.example.TheirExtensions," + jvm.EXTENSIONS_CLASS
    assert conf["spark.sql.streaming.stateStore.providerClass"] == jvm.PROVIDER_CLASS
    assert conf["spark.pyspark.python"] == sys.executable
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    prefix = "spark.sql.streaming.stateStore.sparkState."
    assert conf[prefix + "backend"] == "hashmap"
    assert conf[prefix + "snapshotInterval"] == "5"
    assert conf[prefix + "storage.s3.endpoint_url"] == "http://localhost:9000"
    # Configuring twice does not list the jar or the plugin twice.
    spark_state.configure(builder)
    assert builder._options["spark.jars"].split(",").count(FAKE_JAR) == 1
    assert builder._options["spark.plugins"].split(",").count(jvm.PLUGIN_CLASS) == 1
    assert builder._options["spark.sql.extensions"].split(",").count(jvm.EXTENSIONS_CLASS) == 1


def test_configure_minimal(no_build: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    monkeypatch.setenv("PYSPARK_PYTHON", "/keep/this/python")
    builder = spark_state.configure(SparkSession.builder, python="/usr/bin/python3.11")
    conf = builder._options
    assert conf["spark.jars"] == FAKE_JAR
    assert conf["spark.plugins"] == jvm.PLUGIN_CLASS
    assert conf["spark.sql.extensions"] == jvm.EXTENSIONS_CLASS
    assert conf["spark.pyspark.python"] == "/usr/bin/python3.11"
    assert os.environ["PYSPARK_PYTHON"] == "/keep/this/python"  # an existing value wins
    assert not [k for k in conf if k.startswith("spark.sql.streaming.stateStore.sparkState.")]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"options": {"snapshotIntervall": "5"}}, "unknown spark-state option"),
        ({"options": {"snapshotInterval": "often"}}, "must be an integer"),
        ({"backend": "leveldb"}, "option 'backend' must be one of rocksdb, hashmap, got 'leveldb'"),
        ({"backend": "rocksdb", "options": {"backend": "hashmap"}}, "contradicts"),
        # checkpoint storage options: names and values, checked by the storage layer's own checks
        ({"options": {"storage.retry.attempts": "0"}},
         r"^option 'storage.retry.attempts': storage option retry.attempts=0 must be an integer >= 1$"),
        ({"options": {"storage.s3.endpointUrl": "http://localhost:9000"}},
         r"^option 'storage.s3.endpointUrl': unknown storage option 's3.endpointUrl'; valid options: "
         r".*s3.endpoint_url"),
        ({"options": {"storage.s3.anonymous": "maybe"}}, "option 'storage.s3.anonymous': .* is not a boolean"),
        ({"options": {"storage.s3.read_timeout": "-1"}}, "option 'storage.s3.read_timeout': .* positive number"),
    ],
)
def test_configure_rejects_bad_options(no_build: list[int], kwargs: dict, match: str) -> None:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    with pytest.raises(ConfigError, match=match):
        spark_state.configure(builder, **kwargs)
    assert builder._options == {}  # validated before the builder was touched
    assert no_build == []  # and before any build


# --- python -m spark_state jar ------------------------------------------------------------


def test_cli_jar_prints_path(no_build: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    from spark_state.__main__ import main

    assert main(["jar"]) == 0
    assert capsys.readouterr().out.strip() == FAKE_JAR


def test_cli_jar_reports_errors(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from spark_state.__main__ import main

    def failing(build: bool = True, line=None) -> str:
        raise jvm.ShimBuildError("scalac failed", "Provider.scala:3: error: not found: type Foo")

    monkeypatch.setattr(jvm, "jar_path", failing)
    assert main(["jar"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "not found: type Foo" in captured.err


# --- server_confs(), spark-state server-conf, configure() on a Spark Connect builder -------


def test_server_confs_are_what_configure_sets(no_build: list[int], capsys: pytest.CaptureFixture[str]) -> None:
    from pyspark.sql import SparkSession

    from spark_state.__main__ import main

    confs = spark_state.server_confs(backend="hashmap", options={"snapshotInterval": "5"}, python="/py")
    assert confs == {
        "spark.jars": FAKE_JAR,
        "spark.sql.streaming.stateStore.providerClass": jvm.PROVIDER_CLASS,
        "spark.plugins": jvm.PLUGIN_CLASS,
        "spark.sql.extensions": jvm.EXTENSIONS_CLASS,
        "spark.pyspark.python": "/py",
        "spark.sql.streaming.stopActiveRunOnRestart": "false",
        "spark.sql.streaming.stateStore.sparkState.backend": "hashmap",
        "spark.sql.streaming.stateStore.sparkState.snapshotInterval": "5",
    }
    builder = spark_state.configure(SparkSession.builder, backend="hashmap", options={"snapshotInterval": "5"},
                                    python="/py")
    assert builder._options == confs
    with pytest.raises(ConfigError, match="unknown spark-state option"):
        spark_state.server_confs(options={"snapshotIntervall": "5"})

    assert main(["server-conf", "--backend", "hashmap", "--option", "snapshotInterval=5", "--python", "/py"]) == 0
    assert capsys.readouterr().out.split() == [part for k, v in confs.items() for part in ("--conf", f"{k}={v}")]
    assert main(["server-conf", "--json", "--python", "/py"]) == 0
    assert json.loads(capsys.readouterr().out)["spark.jars"] == FAKE_JAR
    assert main(["server-conf", "--properties", "--python", "/py"]) == 0
    assert f"spark.jars {FAKE_JAR}" in capsys.readouterr().out.splitlines()
    assert main(["server-conf", "--option", "nope=1"]) == 1
    assert "unknown spark-state option" in capsys.readouterr().err


@pytest.mark.parametrize("option, message", [
    ("storage.retry.attempts=0", "option 'storage.retry.attempts': storage option retry.attempts=0 must be an "
                                 "integer >= 1"),
    ("storage.s3.endpointUrl=http://localhost:9000", "option 'storage.s3.endpointUrl': unknown storage option "
                                                     "'s3.endpointUrl'; valid options: "),
    ("heap.maxBytes=-1", "option spark.sql.streaming.stateStore.sparkState.heap.maxBytes must be a size"),
])
def test_server_conf_refuses_bad_options_with_an_error_json(no_build: list[int], capsys: pytest.CaptureFixture[str],
                                                            option: str, message: str) -> None:
    """A bad option fails server-conf (exit status 1, the message on stderr) and, with --json, prints
    the error JSON on stdout, as every other command does; nothing else is printed on stdout."""
    from spark_state.__main__ import main

    assert main(["server-conf", "--option", option]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(f"error: {message}")
    assert main(["server-conf", "--json", "--option", option]) == 1
    captured = capsys.readouterr()
    error = json.loads(captured.out)
    assert error["error"] == "ConfigError" and error["message"].startswith(message)
    assert captured.err.startswith(f"error: {message}")


def test_configure_refuses_a_builder_for_a_connect_server(no_build: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import SparkSession

    from spark_state.errors import ConnectUnsupportedError

    builder = SparkSession.builder.remote("sc://spark-host:15002")
    with pytest.raises(ConnectUnsupportedError) as info:
        spark_state.configure(builder)
    message = str(info.value)
    assert "sc://spark-host:15002" in message and "spark-state server-conf" in message
    assert "server_confs()" in message and "docs/spark-connect.md" in message
    assert builder._options == {"spark.remote": "sc://spark-host:15002"}  # untouched
    monkeypatch.setenv("SPARK_REMOTE", "sc://from-env")
    with pytest.raises(ConnectUnsupportedError, match="sc://from-env"):
        spark_state.configure(SparkSession.builder)
    # remote("local[...]"): pyspark starts that server in this process, with the builder's confs.
    local = spark_state.configure(SparkSession.builder.remote("local[2]"))
    assert local._options["spark.jars"] == FAKE_JAR

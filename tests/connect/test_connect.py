"""Spark Connect: a real Connect server process started from pyspark's own jars with
``spark_state.server_confs()`` (the shim jar, the provider), a real Connect client in this
process (no JVM of its own), and real streaming queries:

* the provider runs the server's stateful queries (its metrics show in the progress) and the
  results equal a plain-Python model;
* ``keyed_process`` (every keyed state type; event time and timers), ``keyed_co_process`` and
  ``keyed_broadcast_process`` from the client equal the Python models of the classic tests;
* ``checkpointed_process`` from the client equals the same query run classically;
* the watermark delay read from a Connect plan equals the one a classic plan gives;
* what cannot work over Connect says so, and what to do instead.

One server for the module (start-up ~15 s). The classic ``spark`` session of the other tests
shares this process: ``SPARK_CONNECT_MODE_ENABLED`` (which makes ``pyspark.sql.functions``
build Connect columns) is set only while a Connect test runs and removed around classic work.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest

import process_fns
import time_fns
import spark_state
from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, OPERATOR_OUTPUT, AllStates, OperatorStates, expected_all_states
from spark_state.spark.connect import is_connect
from spark_state.errors import ConnectUnsupportedError
from spark_state.process import (ProcessDefinitionError, checkpointed_process, keyed_broadcast_process, keyed_co_process,
                                 keyed_process)
from spark_state.process.event_time import event_time_of
from streaming_harness import HDFS_PROVIDER, SPARKSTATE_PROVIDER, plain, run_query, ship_module_by_value, sort_rows, write_batches
from time_fns import (ACTION_SCHEMA, EVENTS_SCHEMA, JOIN_OUTPUT, JOIN_SCHEMA, PATTERN_OUTPUT, PATTERNS, PV_OUTPUT,
                      RULE_SCHEMA, FullJoin, PageViews, PatternEvaluator, at, expected_full_join, expected_page_views,
                      expected_patterns)

pytestmark = pytest.mark.spark

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"
NUM_BATCHES = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _connect_mode(enabled: bool) -> Iterator[None]:
    """pyspark's process-wide switch between Connect and classic functions, set or removed."""
    before = os.environ.get(CONNECT_MODE)
    if enabled:
        os.environ[CONNECT_MODE] = "1"
    else:
        os.environ.pop(CONNECT_MODE, None)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(CONNECT_MODE, None)
        else:
            os.environ[CONNECT_MODE] = before


classic_mode = lambda: _connect_mode(False)  # noqa: E731


@pytest.fixture(scope="module")
def connect_server(spark, tmp_path_factory) -> Iterator[str]:
    """A Spark Connect server in its own process (pyspark's spark-submit and jars), started
    with ``spark_state.server_confs()``; yields its ``sc://`` URL. ``spark`` (the classic
    session) is started first, so that it is not started while Connect mode is on."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    port = _free_port()
    confs = spark_state.server_confs()  # under test: what users give their server
    confs.update({
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.memory": "1g",
    })
    cmd = [str(spark_home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", "local[2]",
           "--name", "spark-state-connect-tests"]
    for key, value in confs.items():
        cmd += ["--conf", f"{key}={value}"]
    log_path = tmp_path_factory.mktemp("connect-server") / "server.log"
    env = dict(os.environ, SPARK_HOME=str(spark_home))
    env.pop(CONNECT_MODE, None)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-3000:]
                    pytest.fail(f"the Spark Connect server did not start on port {port}:\n{tail}")
                time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def remote(connect_server):
    """The Connect client session (module-wide)."""
    with _connect_mode(True):
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

        session = RemoteSparkSession.builder.remote(connect_server).getOrCreate()
    assert is_connect(session)
    ship_module_by_value(process_fns)
    ship_module_by_value(time_fns)
    yield session
    session.stop()


@pytest.fixture
def connect_mode(remote):
    """Connect mode on for the test (pyspark.sql.functions build Connect columns)."""
    with _connect_mode(True):
        yield remote


def _run_connect(spark, build, input_dir, schema, checkpoint, output_mode="append", timeout=240.0):
    """Run ``build(*streams)`` over the batch files (one per micro-batch; ``input_dir`` and
    ``schema`` may be lists, one per source) into a memory sink; returns (sorted rows as plain
    tuples, the query's progress reports)."""
    dirs = input_dir if isinstance(input_dir, list) else [input_dir]
    schemas = schema if isinstance(schema, list) else [schema] * len(dirs)
    streams = [spark.readStream.schema(sch).option("maxFilesPerTrigger", 1).parquet(str(d))
               for d, sch in zip(dirs, schemas)]
    name = f"connect_{random.randrange(1 << 30)}"
    query = (build(*streams).writeStream.format("memory").queryName(name).outputMode(output_mode)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        assert query.awaitTermination(timeout), f"the query did not finish within {timeout} s"
        progress = [json.loads(p.json) for p in query.recentProgress]
        rows = sort_rows(plain(tuple(r)) for r in spark.table(name).collect())
    finally:
        if query.isActive:
            query.stop()
    return rows, progress


def _flat(batches: dict) -> list:
    return sort_rows(r for b in sorted(batches) for r in batches[b])


# ------------------------------------------------------------------------------------ inputs
@pytest.fixture(scope="module")
def keyed_input(tmp_path_factory):
    rng = random.Random(11)
    batches = [[(f"k{rng.randrange(20)}", rng.randrange(0, 25)) for _ in range(40)] for _ in range(NUM_BATCHES)]
    root = tmp_path_factory.mktemp("connect-keyed-input")
    write_batches(root, batches, INPUT_SCHEMA)
    return root, batches


@pytest.fixture(scope="module")
def events_input(tmp_path_factory):
    rng = random.Random(3)
    batches, t = [], 0
    for _ in range(NUM_BATCHES + 2):
        rows = []
        for _ in range(15):
            t += rng.randrange(0, 1500)
            rows.append((f"u{rng.randrange(5)}", "/", at(max(0, t - rng.randrange(0, 4000)))))
        batches.append(rows)
    root = tmp_path_factory.mktemp("connect-events-input")
    write_batches(root, batches, EVENTS_SCHEMA)
    return root, batches


# ------------------------------------------------------------------------------------- tests
def test_the_provider_runs_the_servers_stateful_queries(connect_mode, keyed_input, tmp_path):
    from pyspark.sql import functions as F

    spark = connect_mode
    input_dir, batches = keyed_input
    assert spark.conf.get("spark.sql.streaming.stateStore.providerClass") == SPARKSTATE_PROVIDER
    rows, progress = _run_connect(
        spark, lambda df: df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total")),
        input_dir, INPUT_SCHEMA, tmp_path / "ckpt", output_mode="complete")
    n, total = Counter(), Counter()
    for batch in batches:
        for k, v in batch:
            n[k] += 1
            total[k] += v
    assert rows == sorted((k, n[k], total[k]) for k in n)
    ops = [op for p in progress for op in p.get("stateOperators", [])]
    assert len(ops) == NUM_BATCHES
    assert all(op["customMetrics"].get("sparkStateChangelogBytes", 0) > 0 for op in ops)  # our provider's metric
    offsets = (tmp_path / "ckpt" / "offsets" / "0").read_text().splitlines()
    assert json.loads(offsets[1])["conf"]["spark.sql.streaming.stateStore.providerClass"] == SPARKSTATE_PROVIDER


def test_keyed_process_from_a_connect_client_equals_the_model(connect_mode, keyed_input, tmp_path):
    input_dir, batches = keyed_input
    rows, _ = _run_connect(
        connect_mode, lambda df: keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=2,
                                               state_root=str(tmp_path / "state")),
        input_dir, INPUT_SCHEMA, tmp_path / "ckpt")
    assert rows == _flat(expected_all_states(batches))
    assert len(rows) == 40 * NUM_BATCHES


def test_event_time_timers_from_a_connect_client_equal_the_model(connect_mode, events_input, tmp_path):
    input_dir, batches = events_input
    df_seen = []

    def build(df):
        df = df.withWatermark("ts", "2 seconds")
        df_seen.append(df)
        return keyed_process(df, "user", PageViews(), PV_OUTPUT, parallelism=2, state_root=str(tmp_path / "state"))

    rows, _ = _run_connect(connect_mode, build, input_dir, EVENTS_SCHEMA, tmp_path / "ckpt")
    assert event_time_of(df_seen[0], "t").delay_ms == 2000
    expected = _flat(expected_page_views(batches, 2000))
    assert rows == expected and len(expected) > 5


def test_keyed_co_process_from_a_connect_client_equals_the_model(connect_mode, tmp_path):
    rng = random.Random(8)
    sides = [[[(f"id{rng.randrange(4)}", side, b * 100 + i) for i in range(rng.randrange(2, 6))]
              for b in range(NUM_BATCHES)] for side in "LR"]
    for side, batches in zip("lr", sides):
        write_batches(tmp_path / side, batches, JOIN_SCHEMA)
    rows, _ = _run_connect(
        connect_mode, lambda left, right: keyed_co_process(left, right, "id", "id", FullJoin(), JOIN_OUTPUT,
                                                           parallelism=2, state_root=str(tmp_path / "state")),
        [tmp_path / "l", tmp_path / "r"], [JOIN_SCHEMA, JOIN_SCHEMA], tmp_path / "ckpt")
    expected = expected_full_join(*sides)
    assert rows == expected and len(expected) >= 10


def test_keyed_broadcast_process_from_a_connect_client_equals_the_model(connect_mode, tmp_path):
    rng = random.Random(9)
    actions = [[(f"u{rng.randrange(6)}", rng.choice(["login", "pay", "buy", "view"]), b * 100 + i) for i in range(20)]
               for b in range(NUM_BATCHES)]
    rules = [[(1, "login", "pay")], [], [(2, "login", "buy")], []]
    write_batches(tmp_path / "a", actions, ACTION_SCHEMA)
    write_batches(tmp_path / "r", rules, RULE_SCHEMA)
    rows, _ = _run_connect(
        connect_mode, lambda a, r: keyed_broadcast_process(
            a, "user", r, PatternEvaluator(), PATTERN_OUTPUT, broadcast_states=[PATTERNS], broadcast_order="version",
            parallelism=2, state_root=str(tmp_path / "state")),
        [tmp_path / "a", tmp_path / "r"], [ACTION_SCHEMA, RULE_SCHEMA], tmp_path / "ckpt")
    expected = _flat(expected_patterns(actions, rules))
    assert rows == expected and {r[4] for r in expected} == {1, 2}


def test_checkpointed_process_from_a_connect_client_equals_the_classic_run(spark, connect_mode, keyed_input, tmp_path):
    input_dir, _ = keyed_input

    def build(root):
        return lambda df: checkpointed_process(df, OperatorStates(), OPERATOR_OUTPUT, parallelism=2, state_root=root)

    rows, _ = _run_connect(connect_mode, build(str(tmp_path / "connect-state")), input_dir, INPUT_SCHEMA,
                           tmp_path / "connect-ckpt")
    with classic_mode():
        classic = run_query(spark, build(str(tmp_path / "classic-state")), provider_class=HDFS_PROVIDER,
                            input_dir=input_dir, schema=INPUT_SCHEMA, checkpoint_dir=tmp_path / "classic-ckpt",
                            output_mode="append")
    assert rows == _flat(classic.batches)
    assert len(rows) == 40 * NUM_BATCHES


@pytest.mark.parametrize("delay", ["10 seconds", "interval 1 minute 30 seconds", "2 hours 500 milliseconds",
                                   "1 day", "1.5 seconds", "1 week", "1 month 2 days", "1 year"])
def test_a_connect_plans_watermark_delay_equals_the_classic_one(spark, connect_mode, keyed_input, delay):
    from pyspark.sql import functions as F

    input_dir, _ = keyed_input

    def stream(session):
        df = session.readStream.schema(INPUT_SCHEMA).parquet(str(input_dir))
        return df.withColumn("ts", F.timestamp_seconds("v")).withWatermark("ts", delay).select("k", "ts")

    remote_spec = event_time_of(stream(connect_mode), "q")
    with classic_mode():
        classic_spec = event_time_of(stream(spark), "q")
    assert remote_spec == classic_spec and remote_spec.column == "ts" and remote_spec.delay_ms > 0


def test_what_cannot_work_over_connect_says_what_to_do(connect_mode, connect_server, keyed_input):
    from pyspark.sql import SparkSession

    from spark_state.ops import jvm_bridge
    from spark_state.ops.errors import UnsupportedCheckpointError

    # configure() on a builder for a running Connect server: the server's own confs are needed.
    with pytest.raises(ConnectUnsupportedError) as info:
        spark_state.configure(SparkSession.builder.remote(connect_server))
    message = str(info.value)
    assert connect_server in message and "spark-state server-conf" in message and "server_confs()" in message
    # Reading a checkpoint of Spark's own providers needs the driver JVM.
    with pytest.raises(UnsupportedCheckpointError, match="Spark Connect client.*spark-state savepoint"):
        jvm_bridge._bridge(connect_mode)
    # A watermark the client cannot see (declared in SQL) is refused, not silently ignored.
    input_dir, _ = keyed_input
    connect_mode.readStream.schema(INPUT_SCHEMA).parquet(str(input_dir)) \
        .selectExpr("k", "timestamp_seconds(v) AS ts").createOrReplaceTempView("connect_events")
    sql_df = connect_mode.sql("SELECT k, ts FROM connect_events WATERMARK ts DELAY OF INTERVAL 5 SECONDS")
    with pytest.raises(ProcessDefinitionError, match="withWatermark"):
        keyed_process(sql_df, "k", PageViews(), PV_OUTPUT)

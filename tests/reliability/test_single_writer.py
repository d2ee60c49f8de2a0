"""One writer per checkpoint: a second query writing the state of a running one fails fast with
a clear message, and the first goes on unharmed (``spark_state.checkpoint.runs``, rules 4-5)."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import StreamingQueryException
from support import RecordingBuilder
from pyspark.sql import functions as F

import process_fns
import reliability_fns
from streaming_harness import HDFS_PROVIDER, SPARKSTATE_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches
import spark_state
from spark_state.process import keyed_process

pytestmark = pytest.mark.spark

JOBS = os.path.join(os.path.dirname(__file__), "jobs")


def test_a_second_keyed_query_on_the_same_state_location_fails_and_the_first_goes_on(spark, tmp_path):
    """A copy of the job with a new checkpoint but the same state_location (a typical mistake)."""
    ship_module_by_value(process_fns)
    batches = reliability_fns.keyed_batches(6)
    write_batches(tmp_path / "in", batches, process_fns.INPUT_SCHEMA)
    location = str(tmp_path / "state")

    def run(checkpoint, **kw):
        def build(df):
            return keyed_process(df, "k", process_fns.AllStates(), process_fns.ALL_STATES_OUTPUT, parallelism=3,
                                 state_location=location)

        return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=tmp_path / "in",
                         schema=process_fns.INPUT_SCHEMA, checkpoint_dir=checkpoint, output_mode="append", **kw)

    first = run(tmp_path / "ckpt-1", stop_after_batches=3)
    with pytest.raises(StreamingQueryException) as err:
        run(tmp_path / "ckpt-2")
    message = str(err.value)
    assert f"ConcurrentWriterError: two queries are writing the state at {location}" in message
    assert "starts at version 0" in message and "has since committed version 3" in message
    assert "This run stops before writing anything" in message
    assert not os.path.exists(os.path.join(location, "runs", "2.json"))  # it registered nothing
    rest = run(tmp_path / "ckpt-1")
    assert merge_runs(first, rest) == process_fns.expected_all_states(batches)


def test_a_second_copy_of_a_running_query_in_the_same_application_is_refused(spark, tmp_path):
    """``spark_state.configure`` sets spark.sql.streaming.stopActiveRunOnRestart=false (Spark's
    default would stop the running query in favour of the second); Spark then refuses."""
    assert spark_state.configure(RecordingBuilder())._options["spark.sql.streaming.stopActiveRunOnRestart"] == "false"
    write_batches(tmp_path / "in", [[(f"k{i % 5}", i)] for i in range(3)], process_fns.INPUT_SCHEMA)
    df = spark.readStream.schema(process_fns.INPUT_SCHEMA).parquet(str(tmp_path / "in"))

    def start():
        return (df.groupBy("k").count().writeStream.outputMode("update").format("noop")
                .option("checkpointLocation", str(tmp_path / "ckpt")).start())

    confs = {"spark.sql.streaming.stateStore.providerClass": SPARKSTATE_PROVIDER,
             "spark.sql.streaming.stopActiveRunOnRestart": "false"}
    for k, v in confs.items():
        spark.conf.set(k, v)
    try:
        first = start()
        try:
            with pytest.raises(Py4JJavaError, match=r"IllegalStateException: Cannot start query with id \S+ as "
                                                    r"another query with same id is already active"):
                start()
            assert first.isActive
        finally:
            first.stop()
    finally:
        for k in confs:
            spark.conf.unset(k)


def test_a_second_application_on_a_running_querys_checkpoint_fails_and_the_first_finishes(tmp_path):
    """Two Spark applications, one checkpoint: the second starts while the first is mid-stream.
    The second fails -- by spark-state's check (it finds the first ahead of it, or is fenced off
    by it), or by Spark's own log check if the first got its commit in before -- and the first
    finishes with exact counts."""
    expected: collections.Counter = collections.Counter()
    os.makedirs(tmp_path / "input")
    for b in range(60):
        path = tmp_path / "input" / f"b{b:03d}.json"
        with open(path, "w") as f:
            for i in range(50):
                k = (b * 7 + i) % 23
                expected[k] += 1
                f.write(json.dumps({"k": k}) + "\n")
        os.utime(path, (1_700_000_000 + 10 * b,) * 2)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    job = [sys.executable, os.path.join(JOBS, "writer_job.py"), str(tmp_path)]
    first = subprocess.Popen(job + ["first"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    seen = 0
    deadline = time.monotonic() + 300
    for line in first.stdout:
        if line.startswith("BATCH "):
            seen += 1
            if seen == 3:
                break
        if time.monotonic() > deadline:
            break
    assert seen == 3, "the first application did not get going"
    second = subprocess.run(job + ["second"], capture_output=True, text=True, env=env, timeout=600)
    rest = first.communicate(timeout=600)[0]
    first_result = json.loads([ln for ln in rest.splitlines() if ln.startswith("RESULT ")][0][len("RESULT "):])
    second_result = json.loads([ln for ln in second.stdout.splitlines() if ln.startswith("RESULT ")][0][7:])
    assert not second_result["ok"], "the second application was not stopped"
    message = second_result["message"]
    ours = "two queries are writing the state at" in message
    sparks = "Multiple streaming queries are concurrently using" in message or "concurrent update" in message.lower()
    assert ours or sparks, message
    assert first_result["ok"], first_result
    assert {int(k): v for k, v in first_result["counts"].items()} == dict(expected)
    print("second application stopped by", "spark-state" if ours else "Spark's log check")

"""The vectorized form of a keyed function (``process_elements(rows, ctx)``) on real streaming
queries: equal to a plain-Python model on both backends with input split into many small
Arrow batches, exactly-once under a task retry and a restart, and one row per call on the
event-time loop."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

import vector_fns
from process_fns import INPUT_SCHEMA
from spark_state.process import keyed_process
from streaming_harness import HDFS_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches
from vector_fns import ONE_ROW_OUTPUT, VECTOR_OUTPUT, FailingVectorStates, OneRowAtATime, VectorStates, \
    expected_vector_states

pytestmark = pytest.mark.spark

NUM_BATCHES = 5
#: small Arrow batches, so that a key's rows of one micro-batch span several of them
SMALL_ARROW_BATCHES = {"spark.sql.execution.arrow.maxRecordsPerBatch": 16}


def _batches() -> list[list[tuple[str, int]]]:
    rng = random.Random(17)
    return [[(f"k{rng.randrange(40)}", rng.randrange(0, 50)) for _ in range(150)] for _ in range(NUM_BATCHES)]


@pytest.fixture(scope="module")
def vector_input(tmp_path_factory):
    ship_module_by_value(vector_fns)
    root = tmp_path_factory.mktemp("vector-input")
    batches = _batches()
    write_batches(root, batches, INPUT_SCHEMA)
    return str(root), batches


def _run(spark, input_dir, tmp, function, backend="rocksdb", post=None, **kwargs):
    def build(df):
        out = keyed_process(df, "k", function, VECTOR_OUTPUT, parallelism=3, state_root=str(tmp / "state"),
                            engine={"backend": backend})
        return post(out) if post else out

    return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=INPUT_SCHEMA,
                     checkpoint_dir=str(tmp / "ckpt"), output_mode="append", extra_confs=SMALL_ARROW_BATCHES,
                     **kwargs)


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_vectorized_function_matches_a_python_model(spark, vector_input, tmp_path, backend):
    input_dir, batches = vector_input
    result = _run(spark, input_dir, tmp_path, VectorStates(), backend)
    assert result.batches == expected_vector_states(batches)


def test_vectorized_task_retry_and_restart_give_identical_results(spark, vector_input, tmp_path):
    input_dir, batches = vector_input
    first = _run(spark, input_dir, tmp_path, FailingVectorStates(fail_batch=1), stop_after_batches=3)
    assert first.stopped_early and first.batch_ids == [0, 1, 2]
    second = _run(spark, input_dir, tmp_path, FailingVectorStates(fail_batch=3))
    assert second.batch_ids == [3, 4]
    assert merge_runs(first, second) == expected_vector_states(batches)


def test_vectorized_function_on_the_event_time_loop_gets_one_row_per_call(spark, vector_input, tmp_path):
    from pyspark.sql import functions as F

    input_dir, batches = vector_input

    def build(df):
        # event time v + 100 s: Spark's first watermark is 0, and rows at or before it are late
        timed = df.withColumn("ts", F.timestamp_seconds(F.col("v") + 100)).withWatermark("ts", "1 hour")
        return keyed_process(timed, "k", OneRowAtATime(), ONE_ROW_OUTPUT, parallelism=2,
                             state_root=str(tmp_path / "state"))

    result = run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=INPUT_SCHEMA,
                       checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    rows = result.rows()
    assert rows and all(r[1] == 1 for r in rows)
    # per key: the counts are 1..n and the event times are the rows' own
    counts: dict = defaultdict(list)
    for k, _, n, ts in rows:
        counts[k].append((n, ts))
    seen: dict = defaultdict(list)
    for batch in batches:
        for k, v in batch:
            seen[k].append(v)
    for k, got in counts.items():
        assert sorted(n for n, _ in got) == list(range(1, len(seen[k]) + 1))
        assert sorted(ts - 100 for _, ts in got) == sorted(seen[k])

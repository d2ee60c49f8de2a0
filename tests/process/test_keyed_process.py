"""keyed_process on real streaming queries: every keyed state type against a plain-Python model,
a task retry and a restart with identical results, a rescale 4 -> 3 -> 6 equal to an
unscaled run, and the clear errors."""

from __future__ import annotations

import os
import random
import re

import pytest
from pyspark.errors import StreamingQueryException

import process_fns
from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, AllStates, FailOnce, expected_all_states
from spark_state.process import ProcessDefinitionError, keyed_process
from streaming_harness import HDFS_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark

NUM_BATCHES = 6


def _batches() -> list[list[tuple[str, int]]]:
    rng = random.Random(5)
    return [[(f"k{rng.randrange(60)}", rng.randrange(0, 25)) for _ in range(90)] for _ in range(NUM_BATCHES)]


@pytest.fixture(scope="module")
def keyed_input(tmp_path_factory):
    ship_module_by_value(process_fns)
    root = tmp_path_factory.mktemp("keyed-input")
    batches = _batches()
    write_batches(root, batches, INPUT_SCHEMA)
    return str(root), expected_all_states(batches)


def _run(spark, input_dir, checkpoint, function, parallelism, state_root, post=None, options=None, **kwargs):
    def build(df):
        out = keyed_process(df, "k", function, ALL_STATES_OUTPUT, parallelism=parallelism,
                            state_root=state_root, **(options or {}))
        return post(out) if post else out

    return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=INPUT_SCHEMA,
                     checkpoint_dir=checkpoint, output_mode="append", **kwargs)


@pytest.fixture(scope="module")
def unscaled(spark, keyed_input, tmp_path_factory):
    """All batches at parallelism 4, in one run."""
    input_dir, _ = keyed_input
    tmp = tmp_path_factory.mktemp("unscaled")
    return _run(spark, input_dir, str(tmp / "ckpt"), AllStates(), 4, str(tmp / "state"))


def test_every_keyed_state_type_matches_a_python_model(keyed_input, unscaled):
    _, expected = keyed_input
    assert unscaled.batches == expected
    assert sum(len(rows) for rows in expected.values()) == 90 * NUM_BATCHES


def test_task_retry_and_restart_give_identical_results(spark, keyed_input, tmp_path):
    """Batch 1 fails mid-partition on its first attempt (state already changed), batch 3 fails
    in a UDF after the function, and the query is stopped after batch 2 and restarted."""
    input_dir, expected = keyed_input
    ckpt, root = str(tmp_path / "ckpt"), str(tmp_path / "state")
    fail_late = process_fns.fail_first_attempt_of_batch(3)

    def post(out):
        return out.withColumn("k", fail_late("k"))

    first = _run(spark, input_dir, ckpt, FailOnce(fail_batch=1), 4, root, post=post, stop_after_batches=3)
    assert first.stopped_early and first.batch_ids == [0, 1, 2]
    second = _run(spark, input_dir, ckpt, FailOnce(fail_batch=1), 4, root, post=post)
    assert second.batch_ids == [3, 4, 5]
    assert merge_runs(first, second) == expected


def test_rescale_4_to_3_to_6_equals_the_unscaled_run(spark, keyed_input, unscaled, tmp_path):
    input_dir, _ = keyed_input
    ckpt, root = str(tmp_path / "ckpt"), str(tmp_path / "state")
    runs = [
        _run(spark, input_dir, ckpt, AllStates(), 4, root, stop_after_batches=2),
        _run(spark, input_dir, ckpt, AllStates(), 3, root, stop_after_batches=2),
        _run(spark, input_dir, ckpt, AllStates(), 6, root),
    ]
    assert [r.batch_ids for r in runs] == [[0, 1], [2, 3], [4, 5]]
    assert merge_runs(*runs) == unscaled.batches
    # The default location is <root>/<query id>/<class name>, with one layout per parallelism.
    location = os.path.join(root, runs[0].query_id, "AllStates")
    assert sorted(os.listdir(os.path.join(location, "layouts"))) == ["p3-b2.json", "p4-b0.json", "p6-b4.json"]
    assert sorted(os.listdir(os.path.join(location, "stores", "p6-b4"))) == [str(i) for i in range(6)]


# ------------------------------------------------------------------------------ clear errors
def _stream(spark, input_dir):
    return spark.readStream.schema(INPUT_SCHEMA).parquet(input_dir)


def test_bad_definitions_fail_before_the_query_starts(spark, keyed_input):
    input_dir, _ = keyed_input
    df = _stream(spark, input_dir)
    with pytest.raises(ProcessDefinitionError, match=r"key column\(s\) \['nope'\] not in"):
        keyed_process(df, "nope", AllStates(), ALL_STATES_OUTPUT)
    with pytest.raises(ProcessDefinitionError, match="needs a streaming DataFrame"):
        keyed_process(spark.read.schema(INPUT_SCHEMA).parquet(input_dir), "k", AllStates(), ALL_STATES_OUTPUT)
    with pytest.raises(ProcessDefinitionError, match="KeyedProcessFunction"):
        keyed_process(df, "k", object(), ALL_STATES_OUTPUT)
    with pytest.raises(ProcessDefinitionError, match="not a valid DDL"):
        keyed_process(df, "k", AllStates(), "k string, count")
    with pytest.raises(ProcessDefinitionError, match="must be at least parallelism"):
        keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=8, max_parallelism=4)


def test_output_that_does_not_fit_the_schema_names_the_column(spark, keyed_input, tmp_path):
    input_dir, _ = keyed_input
    with pytest.raises(StreamingQueryException,
                       match=r"OutputSchemaError: WrongOutput produced a row that does not match output_schema: "
                             r"column 'count' \(bigint\) cannot hold 'one'"):
        run_query(spark, lambda df: keyed_process(df, "k", process_fns.WrongOutput(), ALL_STATES_OUTPUT,
                                                  parallelism=2, state_root=str(tmp_path / "s")),
                  provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=INPUT_SCHEMA,
                  checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")


def test_none_in_a_not_null_output_column_names_the_column_the_row_and_the_function(spark, keyed_input, tmp_path):
    """Checked in Python before Spark's Arrow reader, which would fail with a bare
    "Value at index is null"."""
    input_dir, _ = keyed_input
    with pytest.raises(StreamingQueryException) as info:
        run_query(spark, lambda df: keyed_process(df, "k", process_fns.NullKeyOutput(), process_fns.NULL_KEY_OUTPUT,
                                                  parallelism=2, state_root=str(tmp_path / "s")),
                  provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=INPUT_SCHEMA,
                  checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    message = str(info.value)
    assert re.search(r"OutputSchemaError: NullKeyOutput produced a row with None in column 'k', which output_schema "
                     r"declares string not null: \{'k': None, 'v': \d*[13579]\}\. Give 'k' a value in every row, or "
                     r"declare the column nullable \(drop 'not null'\)", message), message
    assert "Value at index is null" not in message


def test_changed_max_parallelism_and_unusable_location_fail_clearly(spark, keyed_input, tmp_path):
    input_dir, _ = keyed_input
    ckpt, root = str(tmp_path / "ckpt"), str(tmp_path / "state")
    _run(spark, input_dir, ckpt, AllStates(), 2, root, stop_after_batches=1)
    with pytest.raises(StreamingQueryException, match=r"MaxParallelismMismatchError: state at \S+ was created with "
                                                      r"max_parallelism=128 .* pass max_parallelism=128"):
        _run(spark, input_dir, ckpt, AllStates(), 2, root, options={"max_parallelism": 256})
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StreamingQueryException, match=r"StateLocationError: state location \S*a-file/state is not usable"):
        _run(spark, input_dir, str(tmp_path / "ckpt2"), AllStates(), 2, root,
             options={"state_location": str(blocker / "state")})

"""In-place rescale on real queries: 3 -> 5 partitions, interrupted half-way and run again,
then 5 -> 2; the output equals an uninterrupted run; a running query is refused; the old
batches' state stays readable."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import test_operator_equivalence as E
from ops_support import assert_equal_to_uninterrupted, reference, run
from spark_state import ops
from spark_state.ops.resplit import CRASH_AFTER_STORES_ENV
from spark_state.ops.state_io import open_committed, reader_config
from spark_state.storage import open_storage

pytestmark = pytest.mark.spark


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "spark_state", *args], capture_output=True, text=True,
                          env=dict(os.environ, **(env or {})), timeout=600)


def _conf(checkpoint, batch):
    with open(os.path.join(checkpoint, "offsets", str(batch))) as f:
        return json.loads(f.read().split("\n")[1])["conf"]


@pytest.mark.parametrize("name", ["agg_update", "join_inner", "session_window"])
def test_rescale_in_place_interrupted_and_rerun(spark, name, tmp_path, tmp_path_factory):
    case = E.CASES_BY_NAME[name]
    want = reference(spark, case, tmp_path_factory)
    ck = tmp_path / "ck"
    dirs = E.write_inputs(case, tmp_path, upto=2)
    first = run(spark, case, ck, dirs, partitions=3)
    last = max(first.batch_ids)
    rows_before = [op["rows"] for op in ops.inspect(str(ck))["operators"]]

    # interrupted after two stores: nothing committed, the query's checkpoint still says 3
    crashed = _cli("rescale", str(ck), "--partitions", "5", env={CRASH_AFTER_STORES_ENV: "2"})
    assert crashed.returncode == 3, crashed.stderr
    assert not os.path.exists(ck / "commits" / str(last + 1))
    assert _conf(ck, last + 1)["spark.sql.shuffle.partitions"] == "5"
    # run again: resumes (the uncommitted batch is our marked rescale, not a running query)
    done = _cli("rescale", str(ck), "--partitions", "5", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["batch_id"] == last + 1 and result["new_partitions"] == 5 and result["old_partitions"] == 3
    assert os.path.exists(ck / "commits" / str(last + 1))
    info = ops.inspect(str(ck))
    assert info["partitions"] == 5 and all(op["partitions"] == 5 for op in info["operators"])

    E.write_inputs(case, tmp_path, start=2, upto=4)
    second = run(spark, case, ck, dirs)
    assert min(second.batch_ids) == last + 2
    ops.rescale(str(ck), 2, progress=False)
    E.write_inputs(case, tmp_path, start=4)
    third = run(spark, case, ck, dirs)
    assert _conf(ck, max(third.batch_ids))["spark.sql.shuffle.partitions"] == "2"
    assert_equal_to_uninterrupted(case, [first, second, third], want, f"{name} rescaled 3 -> 5 -> 2 in place",
                                  renumbered=True)

    # a savepoint of a batch from before the rescales holds that batch's state, at its count
    old_sp = ops.savepoint(str(ck), str(tmp_path / "sp-old"), batch=last, progress=False)
    assert old_sp.partitions == 3 and old_sp.keys == sum(rows_before)
    # the old batches' state stays readable: version last+1 of partition 2 (at 3 partitions)
    store = os.path.join(ck, "state", "0", "2")
    store = store if name != "join_inner" else os.path.join(store, "left-keyToNumValues")
    old = open_committed(open_storage(store), last + 1, reader_config())
    assert old.num_keys() > 0
    old.close()


def test_rescale_refuses_a_running_query_and_other_providers(spark, tmp_path):
    case = E.CASES_BY_NAME["agg_update"]
    dirs = E.write_inputs(case, tmp_path)
    ck = tmp_path / "ck"
    stopped = run(spark, case, ck, dirs, partitions=3, stop_after_batches=2)
    assert stopped.stopped_early  # batch 2's offsets are logged, its commit is not: looks running
    with pytest.raises(ops.QueryRunningError, match="has offsets but no commit"):
        ops.rescale(str(ck), 4, progress=False)
    refused = _cli("rescale", str(ck), "--partitions", "4")
    assert refused.returncode == 1 and "error:" in refused.stderr and "Stop the query" in refused.stderr
    with pytest.raises(ValueError, match="already has 3 partitions"):
        ops.rescale(str(ck), 3, force=True, progress=False)

    from streaming_harness import HDFS_PROVIDER

    hdfs = tmp_path / "hdfs"
    run(spark, case, hdfs, dirs, provider=HDFS_PROVIDER, partitions=3)
    with pytest.raises(ops.UnsupportedCheckpointError, match="migrate"):
        ops.rescale(str(hdfs), 4, progress=False)


def test_rescale_in_place_carries_keyed_process_state(spark, tmp_path):
    """A query whose only state is keyed_process's: the rescale batch gives its state the
    batch version the next batch loads (a copy in a new layout); the next run at another
    parallelism then rescales it by key group; the output equals the unscaled model."""
    import random

    import process_fns
    from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, AllStates, expected_all_states
    from spark_state.process import keyed_process
    from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches

    ship_module_by_value(process_fns)
    rng = random.Random(3)
    batches = [[(f"k{rng.randrange(30)}", rng.randrange(1, 25)) for _ in range(40)] for _ in range(4)]
    expected = expected_all_states(batches)
    inp, ck, root = tmp_path / "in", str(tmp_path / "ck"), str(tmp_path / "state")

    def go(parallelism):
        def build(df):
            return keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=parallelism, state_root=root)

        return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=str(inp), schema=INPUT_SCHEMA,
                         checkpoint_dir=ck, output_mode="append", extra_confs={"spark.sql.shuffle.partitions": "4"})

    write_batches(inp, batches[:2], INPUT_SCHEMA)
    first = go(4)
    result = ops.rescale(ck, 6, process_root=root, progress=False)
    assert result.process_states == ["AllStates"] and result.batch_id == 2
    write_batches(inp, batches[2:], INPUT_SCHEMA, start=2)
    second = go(3)
    assert min(second.batch_ids) == 3
    got = [rows for _, rows in sorted({**first.batches, **second.batches}.items())]
    assert got == [rows for _, rows in sorted(expected.items())]

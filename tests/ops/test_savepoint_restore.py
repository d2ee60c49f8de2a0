"""Savepoint -> restore on real queries, for every operator kind the provider runs and for
keyed_process state: 3 partitions -> savepoint -> restore at 5 -> more batches -> savepoint ->
restore at 2 -> the rest; the output equals an uninterrupted run on Spark's HDFS provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import process_fns
import test_operator_equivalence as E
from ops_support import assert_equal_to_uninterrupted, reference, run
from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, AllStates, expected_all_states
from spark_state import ops
from spark_state.process import keyed_process
from streaming_harness import HDFS_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark


def _offset_conf(checkpoint, batch: int) -> dict:
    with open(os.path.join(checkpoint, "offsets", str(batch))) as f:
        return json.loads(f.read().split("\n")[1])["conf"]


def _state_partitions(checkpoint, op: int = 0) -> set:
    return {d for d in os.listdir(os.path.join(checkpoint, "state", str(op))) if d.isdigit()}


#: Cases the compatibility suite of every Spark line runs (``-m lines``).
_ON_EVERY_LINE = {"agg_update", "session_window"}


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.lines] if c.name in _ON_EVERY_LINE else [])
                                  for c in E.SEMANTIC_CASES], ids=[c.name for c in E.SEMANTIC_CASES])
def test_savepoint_restore_3_5_2_equals_an_uninterrupted_run(spark, case, tmp_path, tmp_path_factory):
    cut1, cut2 = 2, 4 if case.num_batches > 5 else 3
    want = reference(spark, case, tmp_path_factory, cuts=(cut1, cut2))
    ck1, ck2, ck3 = tmp_path / "ck1", tmp_path / "ck2", tmp_path / "ck3"
    dirs = E.write_inputs(case, tmp_path, upto=cut1)
    first = run(spark, case, ck1, dirs, partitions=3)

    sp1 = ops.savepoint(str(ck1), str(tmp_path / "sp1"), progress=False)
    assert sp1.batch_id == max(first.batch_ids) and sp1.partitions == 3
    restored = ops.restore(sp1.savepoint, str(ck2), partitions=5, progress=False)
    assert restored.partitions == 5 and restored.query_id != sp1.query_id
    assert _offset_conf(ck2, sp1.batch_id)["spark.sql.shuffle.partitions"] == "5"
    assert len(_state_partitions(ck2)) == (1 if case.name == "limit" else 5)  # limit: one partition
    E.write_inputs(case, tmp_path, start=cut1, upto=cut2)
    second = run(spark, case, ck2, dirs)
    assert min(second.batch_ids) == sp1.batch_id + 1

    sp2 = ops.savepoint(str(ck2), str(tmp_path / "sp2"), progress=False)
    assert sp2.partitions == 5
    ops.restore(sp2.savepoint, str(ck3), partitions=2, progress=False)
    E.write_inputs(case, tmp_path, start=cut2)
    third = run(spark, case, ck3, dirs)
    assert _offset_conf(ck3, max(third.batch_ids))["spark.sql.shuffle.partitions"] == "2"
    assert_equal_to_uninterrupted(case, [first, second, third], want, f"{case.name} 3 -> 5 -> 2")


def _keyed(spark, input_dir, checkpoint, parallelism, state_root):
    def build(df):
        return keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=parallelism, state_root=state_root)

    return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=INPUT_SCHEMA,
                     checkpoint_dir=checkpoint, output_mode="append")


@pytest.mark.lines
def test_keyed_process_savepoint_restore_and_parallelism_change(spark, tmp_path):
    """keyed_process state is saved with its layout and key groups, restored into the new
    query's location, and its runtime rescales it (4 -> 3 -> 6) at the next batch."""
    import random

    ship_module_by_value(process_fns)
    rng = random.Random(11)
    batches = [[(f"k{rng.randrange(40)}", rng.randrange(1, 25)) for _ in range(60)] for _ in range(6)]
    expected = expected_all_states(batches)
    inp = tmp_path / "in"
    write_batches(inp, batches[:2], INPUT_SCHEMA)
    roots = [str(tmp_path / f"state{i}") for i in range(3)]
    first = _keyed(spark, str(inp), str(tmp_path / "ck1"), 4, roots[0])
    sp1 = ops.savepoint(str(tmp_path / "ck1"), str(tmp_path / "sp1"), process_root=roots[0], progress=False)
    assert sp1.process_states == ["AllStates"]
    info = ops.inspect(str(tmp_path / "ck1"), process_root=roots[0])
    [proc] = info["process_states"]
    assert proc["kind"] == "keyed" and proc["parallelism"] == 4 and proc["max_parallelism"] == 128
    assert [p["key_groups"] for p in proc["partitions"]] == [[0, 31], [32, 63], [64, 95], [96, 127]]
    assert sorted(s["name"] for s in proc["states"]) == ["buckets", "count", "mean", "recent", "total"]
    assert proc["rows"] > 0

    r = ops.restore(sp1.savepoint, str(tmp_path / "ck2"), process_root=roots[1], progress=False)
    assert r.process_locations["AllStates"] == f"{roots[1]}/{r.query_id}/AllStates"
    write_batches(inp, batches[2:4], INPUT_SCHEMA, start=2)
    second = _keyed(spark, str(inp), str(tmp_path / "ck2"), 3, roots[1])
    sp2 = ops.savepoint(str(tmp_path / "ck2"), str(tmp_path / "sp2"), process_root=roots[1], progress=False)
    ops.restore(sp2.savepoint, str(tmp_path / "ck3"), process_root=roots[2], backend="hashmap", progress=False)
    write_batches(inp, batches[4:], INPUT_SCHEMA, start=4)
    third = _keyed(spark, str(inp), str(tmp_path / "ck3"), 6, roots[2])
    assert merge_runs(first, second, third) == expected


def test_savepoint_demands_process_state_it_cannot_find(spark, tmp_path):
    """Spark's checkpoint does not record keyed_process operators: a savepoint of a query whose
    only state is keyed state under a custom root, taken without that root, is refused (it would
    hold no state and could not be restored), naming the query and how to point at the state;
    a root that holds none of the query's state is named too."""
    ship_module_by_value(process_fns)
    inp, ck, root = tmp_path / "in", tmp_path / "ck", str(tmp_path / "custom-root")
    write_batches(inp, [[("a", 1), ("b", 2)], [("a", 3)]], INPUT_SCHEMA)
    query_id = _keyed(spark, str(inp), str(ck), 2, root).query_id

    out = subprocess.run([sys.executable, "-m", "spark_state", "savepoint", str(ck), str(tmp_path / "sp"), "--json"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)  # no ./spark-state here
    assert out.returncode == 1, out.stderr
    message = (f"the savepoint of batch 1 of {ck} would hold no state: the checkpoint has no stateful operator of "
               f"Spark's, and no keyed_process/checkpointed_process state of query {query_id} was found beside the "
               f"checkpoint ({ck}/spark-state/<name>). Spark's checkpoint does not record those "
               "operators or where their state lives: if the query runs one with state_root= (or the conf "
               "spark.sql.streaming.stateStore.sparkState.process.root), point at its state with --process-root DIR "
               f"(the state is at DIR/{query_id}/<name>); with state_location=, with --process-location NAME=URL; a "
               "savepoint without it could not be restored. For a query that keeps no state, pass --allow-no-state. "
               "(Python: process_root=, process_locations={name: url}, allow_no_state=True)")
    assert json.loads(out.stdout) == {"error": "ProcessStateNotFoundError", "message": message}
    with pytest.raises(ops.ProcessStateNotFoundError, match=f"no keyed_process/checkpointed_process state of query "
                                                            f"{query_id} was found beside the checkpoint"):
        ops.savepoint(str(ck), str(tmp_path / "sp"), progress=False)
    wrong = str(tmp_path / "wrong-root")
    with pytest.raises(ops.ProcessStateNotFoundError) as info:
        ops.savepoint(str(ck), str(tmp_path / "sp"), process_root=wrong, progress=False)
    assert str(info.value).startswith(
        f"the process root {wrong} holds no keyed_process/checkpointed_process state of query {query_id}: no "
        f"{wrong}/{query_id}/<name>/_operator.json. Pass the root the query's state_root= or the conf "
        "spark.sql.streaming.stateStore.sparkState.process.root named")
    assert not (tmp_path / "sp").exists()  # refused before anything was written

    assert ops.savepoint(str(ck), str(tmp_path / "sp"), process_root=root, progress=False).process_states == [
        "AllStates"]
    empty = ops.savepoint(str(ck), str(tmp_path / "sp-no-state"), allow_no_state=True, progress=False)
    assert empty.process_states == [] and empty.operators == []


def test_checkpointed_process_operator_state_savepoint_restore(spark, tmp_path):
    """Operator state (even-split list, union list, broadcast) saved at parallelism 4 and
    restored; continued at parallelism 3, the output equals the same two runs on one
    checkpoint without the savepoint."""
    from process_fns import OPERATOR_OUTPUT, OperatorStates
    from spark_state.process import checkpointed_process

    ship_module_by_value(process_fns)
    batches = [[(f"r{b}", b * 100 + i) for i in range(12)] for b in range(4)]

    def go(inp, ckpt, root, parallelism):
        return run_query(
            spark, lambda df: checkpointed_process(df, OperatorStates(), OPERATOR_OUTPUT, parallelism=parallelism,
                                                   state_root=root),
            provider_class=HDFS_PROVIDER, input_dir=str(inp), schema=INPUT_SCHEMA, checkpoint_dir=str(ckpt),
            output_mode="append")

    def two_runs(d, via_savepoint: bool):
        write_batches(d / "in", batches[:2], INPUT_SCHEMA)
        first = go(d / "in", d / "ck", str(d / "state"), 4)
        ckpt = d / "ck"
        if via_savepoint:
            ops.savepoint(str(ckpt), str(d / "sp"), process_root=str(d / "state"), progress=False)
            ckpt = d / "ck2"
            ops.restore(str(d / "sp"), str(ckpt), process_root=str(d / "state2"), progress=False)
        write_batches(d / "in", batches[2:], INPUT_SCHEMA, start=2)
        second = go(d / "in", ckpt, str(d / ("state2" if via_savepoint else "state")), 3)
        return merge_runs(first, second)

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    want = two_runs(tmp_path / "a", False)
    got = two_runs(tmp_path / "b", True)
    assert sorted(got) == [0, 1, 2, 3] and got == want


def test_event_time_timers_and_the_watermark_survive_savepoint_restore_and_rescale(spark, tmp_path):
    """A keyed function with event-time timers (the page-view counter): its timers move with
    the state, and the batch clock (event-time maxima, watermark) is carried by the savepoint
    and across an in-place rescale's input-free batch, so the watermark never goes back and the
    output equals the model of an uninterrupted run."""
    import random

    import time_fns

    ship_module_by_value(time_fns)
    rng = random.Random(3)
    batches = [[(f"u{rng.randrange(8)}", "/p", time_fns.at(b * 4000 + rng.randrange(-3000, 2000) + 3000))
                for _ in range(30)] for b in range(6)]
    inp = tmp_path / "in"

    def run_pv(checkpoint, root, parallelism):
        def build(df):
            return keyed_process(df.withWatermark("ts", "2000 milliseconds"), "user", time_fns.PageViews(),
                                 time_fns.PV_OUTPUT, parallelism=parallelism, state_root=root)

        return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=str(inp),
                         schema=time_fns.EVENTS_SCHEMA, checkpoint_dir=checkpoint, output_mode="append")

    roots = [str(tmp_path / f"state{i}") for i in range(2)]
    write_batches(inp, batches[:3], time_fns.EVENTS_SCHEMA)
    first = run_pv(str(tmp_path / "ck1"), roots[0], 4)
    sp = ops.savepoint(str(tmp_path / "ck1"), str(tmp_path / "sp"), process_root=roots[0], progress=False)
    r = ops.restore(sp.savepoint, str(tmp_path / "ck2"), process_root=roots[1], progress=False)
    # batches 0-2 read input; batch 3 ran without input, for the timers the last input made due
    assert first.batch_ids == [0, 1, 2, 3] and first.batches[3]
    assert os.listdir(os.path.join(r.process_locations["PageViews"], "time", "clock")) == ["3.json"]
    write_batches(inp, batches[3:5], time_fns.EVENTS_SCHEMA, start=3)
    second = run_pv(str(tmp_path / "ck2"), roots[1], 3)
    ops.rescale(str(tmp_path / "ck2"), 2, process_root=roots[1], progress=False)
    write_batches(inp, batches[5:], time_fns.EVENTS_SCHEMA, start=5)
    third = run_pv(str(tmp_path / "ck2"), roots[1], 2)
    got = merge_runs(first, second, third)
    want = time_fns.expected_page_views(batches, 2000)
    # the in-place rescale adds one input-free batch: compare every row, ignoring batch ids
    strip = lambda rows: sorted(tuple(r[:3]) for r in rows)  # noqa: E731  (user, pv, fired_at)
    assert strip([r for b in got.values() for r in b]) == strip([r for b in want.values() for r in b])

"""The operations on keyed-function state at the runtime's default location, beside the
query's checkpoint (``<checkpoint>/spark-state/<name>``): savepoint, inspect, restore and
rescale need no flag; ``move-state`` moves state from the former default
(``./spark-state/<query id>/<name>``) beside the checkpoint, and the restarted query
continues from it."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys

import pytest

import process_fns
from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, AllStates, expected_all_states
from spark_state import ops
from spark_state.process import keyed_process
from streaming_harness import HDFS_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark


def _batches(n: int, seed: int) -> list[list[tuple[str, int]]]:
    rng = random.Random(seed)
    return [[(f"k{rng.randrange(40)}", rng.randrange(1, 25)) for _ in range(60)] for _ in range(n)]


def _keyed(spark, input_dir, checkpoint, parallelism: int, **options):
    def build(df):
        return keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=parallelism, **options)

    return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=str(input_dir), schema=INPUT_SCHEMA,
                     checkpoint_dir=str(checkpoint), output_mode="append")


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "spark_state", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def test_savepoint_inspect_restore_rescale_of_state_beside_the_checkpoint_need_no_flag(spark, tmp_path, monkeypatch):
    """A query on the default location: savepoint and inspect find its state beside the
    checkpoint without flags; restore writes it beside the new checkpoint, where the restored
    query started with default options finds it; an in-place rescale carries it; the output
    equals the uninterrupted model."""
    monkeypatch.chdir(tmp_path)  # no ./spark-state here: nothing but the checkpoint holds state
    ship_module_by_value(process_fns)
    batches = _batches(6, seed=5)
    inp, ck1, ck2 = tmp_path / "in", tmp_path / "ck1", tmp_path / "ck2"
    write_batches(inp, batches[:2], INPUT_SCHEMA)
    first = _keyed(spark, inp, ck1, 4)
    assert (ck1 / "spark-state" / "AllStates" / "_operator.json").is_file()

    out = _cli("savepoint", str(ck1), str(tmp_path / "sp"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["process_states"] == ["AllStates"]
    with open(tmp_path / "sp" / "savepoint.json") as f:
        [entry] = json.load(f)["process"]
    assert entry["placement"] == "checkpoint" and entry["location"] == str(ck1 / "spark-state" / "AllStates")
    [proc] = ops.inspect(str(ck1))["process_states"]
    assert proc["location"] == str(ck1 / "spark-state" / "AllStates") and proc["parallelism"] == 4

    restored = ops.restore(str(tmp_path / "sp"), str(ck2), progress=False)
    assert restored.process_locations == {"AllStates": str(ck2 / "spark-state" / "AllStates")}
    write_batches(inp, batches[2:4], INPUT_SCHEMA, start=2)
    second = _keyed(spark, inp, ck2, 3)
    assert min(second.batch_ids) == 2

    result = ops.rescale(str(ck2), 2, progress=False)
    assert result.process_states == ["AllStates"]
    write_batches(inp, batches[4:], INPUT_SCHEMA, start=4)
    third = _keyed(spark, inp, ck2, 2)
    got = [rows for _, rows in sorted(merge_runs(first, second, third).items())]
    assert got == [rows for _, rows in sorted(expected_all_states(batches).items())]
    assert not (tmp_path / "spark-state").exists(), "nothing was written to the working directory"


def test_restore_places_state_by_the_options_given(spark, tmp_path, monkeypatch):
    """--process-root and --process-location override the default beside the new checkpoint;
    a restore that was interrupted after writing the state beside it runs again."""
    monkeypatch.chdir(tmp_path)
    ship_module_by_value(process_fns)
    inp, ck = tmp_path / "in", tmp_path / "ck"
    write_batches(inp, _batches(2, seed=6), INPUT_SCHEMA)
    _keyed(spark, inp, ck, 2)
    sp = ops.savepoint(str(ck), str(tmp_path / "sp"), progress=False).savepoint

    rooted = ops.restore(sp, str(tmp_path / "r1"), process_root=str(tmp_path / "root"), progress=False)
    assert rooted.process_locations == {"AllStates": str(tmp_path / "root" / rooted.query_id / "AllStates")}
    named = ops.restore(sp, str(tmp_path / "r2"), process_locations={"AllStates": str(tmp_path / "mine")},
                        progress=False)
    assert named.process_locations == {"AllStates": str(tmp_path / "mine")}
    assert not (tmp_path / "r1" / "spark-state").exists() and not (tmp_path / "r2" / "spark-state").exists()

    beside = ops.restore(sp, str(tmp_path / "r3"), progress=False)
    for path in (tmp_path / "r3").iterdir():  # as if interrupted after the state, before Spark's files
        if path.name != "spark-state":
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    again = ops.restore(sp, str(tmp_path / "r3"), progress=False)
    assert again.process_locations == beside.process_locations == {
        "AllStates": str(tmp_path / "r3" / "spark-state" / "AllStates")}
    [proc] = ops.inspect(str(tmp_path / "r3"))["process_states"]
    assert proc["rows"] == ops.inspect(str(ck))["process_states"][0]["rows"]


def _legacy_run(spark, tmp_path, inp, ck):
    """A run that puts its state where the former default did: <cwd>/spark-state/<query id>/<name>."""
    return _keyed(spark, inp, ck, 2, state_root=str(tmp_path / "spark-state"))


def test_move_state_from_the_former_default_then_a_restart_continues(spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ship_module_by_value(process_fns)
    batches = _batches(6, seed=7)
    inp, ck = tmp_path / "in", tmp_path / "ck"
    write_batches(inp, batches[:2], INPUT_SCHEMA)
    runs = [_legacy_run(spark, tmp_path, inp, ck)]
    write_batches(inp, batches[2:4], INPUT_SCHEMA, start=2)
    runs.append(_keyed(spark, inp, ck, 2))  # default options: the runtime falls back to the former default
    assert not (ck / "spark-state").exists()
    [query_id] = os.listdir(tmp_path / "spark-state")
    source = tmp_path / "spark-state" / query_id / "AllStates"
    files = sorted(os.path.relpath(os.path.join(d, f), source) for d, _, fs in os.walk(source) for f in fs)
    before = ops.inspect(str(ck))["process_states"]
    assert [p["location"] for p in before] == [str(source)], "the former default is still searched"

    out = _cli("move-state", str(ck), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    [moved] = json.loads(out.stdout)["moved"]
    target = ck / "spark-state" / "AllStates"
    assert moved["name"] == "AllStates" and moved["source"] == str(source) and moved["destination"] == str(target)
    assert moved["files"] == len(files)
    assert sorted(os.path.relpath(os.path.join(d, f), target) for d, _, fs in os.walk(target) for f in fs) == files
    assert not (tmp_path / "spark-state" / query_id).exists(), "the source is deleted, its directories too"
    [after] = ops.inspect(str(ck))["process_states"]
    assert after["location"] == str(target) and after["rows"] == before[0]["rows"]

    again = _cli("move-state", str(ck), cwd=tmp_path)
    assert again.returncode == 1 and f"no keyed_process/checkpointed_process state of query {query_id} to move" \
        in again.stderr

    write_batches(inp, batches[4:], INPUT_SCHEMA, start=4)
    runs.append(_keyed(spark, inp, ck, 2))  # default options: the state beside the checkpoint
    assert merge_runs(*runs) == expected_all_states(batches), "the restart continued the moved state"
    assert not (tmp_path / "spark-state" / query_id).exists()


def test_move_state_refuses_a_running_query_and_a_destination_holding_state(spark, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ship_module_by_value(process_fns)
    inp, ck = tmp_path / "in", tmp_path / "ck"
    write_batches(inp, _batches(2, seed=8), INPUT_SCHEMA)
    _legacy_run(spark, tmp_path, inp, ck)
    [query_id] = os.listdir(tmp_path / "spark-state")
    source = tmp_path / "spark-state" / query_id / "AllStates"

    shutil.copy(ck / "offsets" / "1", ck / "offsets" / "2")  # batch 2 under way
    with pytest.raises(ops.QueryRunningError, match="batch 2 has offsets but no commit") as info:
        ops.move_state(str(ck), progress=False)
    assert str(info.value).endswith("then move the state"), "move-state has no --force"
    os.remove(ck / "offsets" / "2")

    (ck / "spark-state" / "AllStates").mkdir(parents=True)
    (ck / "spark-state" / "AllStates" / "_operator.json").write_text("{}")
    out = _cli("move-state", str(ck), "--json", cwd=tmp_path)
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"] == "TargetExistsError"
    assert "already holds state of 'AllStates'" in out.stderr
    assert (source / "_operator.json").is_file(), "nothing was moved"

    # A copy cut short (no _operator.json yet at the destination) is overwritten by the next move.
    os.remove(ck / "spark-state" / "AllStates" / "_operator.json")
    (ck / "spark-state" / "AllStates" / "stores").mkdir()
    (ck / "spark-state" / "AllStates" / "runs").mkdir()
    (ck / "spark-state" / "AllStates" / "runs" / "1.json").write_text("partial")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no former default root here: say where the state is
    with pytest.raises(ops.ProcessStateNotFoundError, match="pass --process-root DIR"):
        ops.move_state(str(ck), progress=False)
    result = ops.move_state(str(ck), process_root=str(tmp_path / "spark-state"), progress=False)
    assert [m["name"] for m in result.moved] == ["AllStates"]
    assert (ck / "spark-state" / "AllStates" / "runs" / "1.json").read_text() != "partial"
    assert ops.inspect(str(ck))["process_states"][0]["rows"] > 0



def test_migrate_copies_state_beside_the_checkpoint_beside_the_target(spark, tmp_path, monkeypatch):
    """State beside the checkpoint is part of it: migrate copies it beside the new checkpoint
    (the source keeps its own), and the query continues there with default options."""
    monkeypatch.chdir(tmp_path)
    ship_module_by_value(process_fns)
    batches = _batches(4, seed=9)
    inp, ck, moved = tmp_path / "in", tmp_path / "ck", tmp_path / "migrated"
    write_batches(inp, batches[:2], INPUT_SCHEMA)
    first = _keyed(spark, inp, ck, 2)
    result = ops.migrate(str(ck), str(moved), to="spark-state", progress=False)
    assert result.to_provider == "spark-state"
    assert (moved / "spark-state" / "AllStates" / "_operator.json").is_file()
    assert (ck / "spark-state" / "AllStates" / "_operator.json").is_file(), "the source is never modified"
    write_batches(inp, batches[2:], INPUT_SCHEMA, start=2)
    second = _keyed(spark, inp, moved, 2)
    assert merge_runs(first, second) == expected_all_states(batches)

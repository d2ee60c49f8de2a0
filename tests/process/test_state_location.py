"""Where a keyed function's state lives by default: beside the query's checkpoint, found again
after a restart from another working directory; state under the former default
(``./spark-state/<query id>/<name>``) is still found and used."""

from __future__ import annotations

import json
import logging
import os
import random

import pytest

import process_fns
from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, AllStates, expected_all_states
from spark_state.process import keyed_process
from spark_state.process.location import LocationSpec, locate
from streaming_harness import HDFS_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark


def _batches(n: int = 4) -> list[list[tuple[str, int]]]:
    rng = random.Random(9)
    return [[(f"k{rng.randrange(30)}", rng.randrange(0, 25)) for _ in range(50)] for _ in range(n)]


def _run(spark, input_dir, checkpoint, **kwargs):
    def build(df):
        return keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=2, name="all_states")

    return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=INPUT_SCHEMA,
                     checkpoint_dir=checkpoint, output_mode="append", **kwargs)


@pytest.fixture()
def keyed_input(tmp_path):
    ship_module_by_value(process_fns)
    batches = _batches()
    write_batches(tmp_path / "in", batches, INPUT_SCHEMA)
    return str(tmp_path / "in"), batches


def test_state_lives_beside_the_checkpoint_and_a_restart_from_another_directory_finds_it(
        spark, keyed_input, tmp_path, monkeypatch):
    input_dir, batches = keyed_input
    ckpt = tmp_path / "ckpt"
    monkeypatch.chdir(tmp_path)
    first = _run(spark, input_dir, str(ckpt), stop_after_batches=2)
    assert first.batch_ids == [0, 1]
    location = ckpt / "spark-state" / "all_states"
    meta = json.loads((location / "_operator.json").read_text())
    assert meta["kind"] == "keyed" and (location / "stores").is_dir()
    assert not (tmp_path / "spark-state").exists(), "nothing in the driver's working directory"

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    second = _run(spark, input_dir, str(ckpt))
    assert second.batch_ids == [2, 3]
    assert merge_runs(first, second) == expected_all_states(batches), "the restart continued the same state"
    assert not (elsewhere / "spark-state").exists()


def test_state_under_the_former_default_is_found_and_used(spark, keyed_input, tmp_path, monkeypatch):
    """A query that ran with the former default keeps its state there: the first run here
    writes it at <cwd>/spark-state/<query id>/<name> (what the former default was), the
    restart with the new default continues from it."""
    input_dir, batches = keyed_input
    ckpt = tmp_path / "ckpt"
    monkeypatch.chdir(tmp_path)
    legacy_root = tmp_path / "spark-state"

    def build_legacy(df):
        return keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=2, name="all_states",
                             state_root=str(legacy_root))

    first = run_query(spark, build_legacy, provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=INPUT_SCHEMA,
                      checkpoint_dir=str(ckpt), output_mode="append", stop_after_batches=2)
    [query_dir] = os.listdir(legacy_root)
    assert (legacy_root / query_dir / "all_states" / "_operator.json").is_file()

    second = _run(spark, input_dir, str(ckpt))
    assert merge_runs(first, second) == expected_all_states(batches)
    assert not (ckpt / "spark-state" / "all_states" / "_operator.json").exists(), "the state stayed where it was"


def test_locate_prefers_the_checkpoint_and_falls_back_to_the_former_default_only_with_state(tmp_path, caplog):
    spec = LocationSpec(explicit=None, root=None, name="op", legacy_root=str(tmp_path / "old"))
    ckpt = f"file:{tmp_path}/ckpt"
    assert locate(spec, "q1", ckpt) == f"{ckpt}/spark-state/op"
    legacy = tmp_path / "old" / "q2" / "op"
    legacy.mkdir(parents=True)
    assert locate(spec, "q2", ckpt) == f"{ckpt}/spark-state/op", "an empty former location is not used"
    (tmp_path / "old" / "q3" / "op").mkdir(parents=True)
    (tmp_path / "old" / "q3" / "op" / "_operator.json").write_text("{}")
    with caplog.at_level(logging.WARNING):
        assert locate(spec, "q3", ckpt) == str(tmp_path / "old" / "q3" / "op")
    assert "former default location" in caplog.text
    # moved beside the checkpoint (spark-state move-state) while this process lives on: found there
    moved = tmp_path / "ckpt" / "spark-state" / "op"
    moved.mkdir(parents=True)
    (moved / "_operator.json").write_text("{}")
    (tmp_path / "old" / "q3" / "op" / "_operator.json").unlink()
    assert locate(spec, "q3", ckpt) == f"{ckpt}/spark-state/op"
    explicit = LocationSpec(explicit="s3://b/x/", root=None, name="op", legacy_root=str(tmp_path / "old"))
    assert locate(explicit, "q3", ckpt) == "s3://b/x"
    rooted = LocationSpec(explicit=None, root="/r", name="op", legacy_root=str(tmp_path / "old"))
    assert locate(rooted, "q3", ckpt) == "/r/q3/op"


def test_a_session_without_spark_states_classes_fails_the_call_and_says_how_to_fix_it(spark, monkeypatch, tmp_path):
    """The tick source is a JVM class of the shim jar: a session that cannot load it (here: a
    class name the jar does not have, as a session without the jar would see it) fails the
    keyed_process call itself, naming configure()."""
    from spark_state.process import ProcessDefinitionError
    from spark_state.process import ticks

    monkeypatch.setattr(ticks, "TICK_SOURCE_CLASS", "org.apache.spark.sql.execution.streaming.state.sparkstate"
                                                    ".MissingTickSource")
    df = spark.readStream.schema(INPUT_SCHEMA).parquet(str(tmp_path))
    with pytest.raises(ProcessDefinitionError, match=r"spark_state.configure\(SparkSession.builder\)"):
        keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=2)

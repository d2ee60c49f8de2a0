"""Keyed functions take the session's spark-state confs (what ``spark_state.configure(options=...)``
sets) as engine and storage options; ``engine=`` overrides them key by key; a bad session value
fails the call on the driver naming the conf."""

from __future__ import annotations

import glob
import json
import os
import random
import re

import pytest

import process_fns
from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, AllStates, expected_all_states
from spark_state import constants as C
from spark_state.process import ProcessDefinitionError, keyed_process
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark

SESSION = {C.CONF_PREFIX + "backend": "hashmap", C.CONF_PREFIX + "snapshotInterval": "2",
           C.CONF_PREFIX + "workersPerExecutor": "2", C.CONF_PREFIX + "ttl": "1h"}  # the last two: provider only


def _snapshot_descriptors(state_root: str) -> list[dict]:
    """The snapshot descriptors (``snapshots/<version>-<id>.json``) under ``state_root``."""
    paths = glob.glob(os.path.join(state_root, "**", C.SNAPSHOT_DIR, "*.json"), recursive=True)
    return [json.loads(open(p).read()) for p in paths if re.fullmatch(r"\d+-[0-9a-f]+\.json", os.path.basename(p))]


def test_session_options_reach_the_stores_and_engine_overrides_them(spark, tmp_path):
    ship_module_by_value(process_fns)
    rng = random.Random(11)
    batches = [[(f"k{rng.randrange(20)}", rng.randrange(0, 25)) for _ in range(40)] for _ in range(4)]
    write_batches(tmp_path / "in", batches, INPUT_SCHEMA)
    resolved = {}

    def build(engine):
        def query(df):
            out = keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=2,
                                state_root=str(tmp_path / f"state-{bool(engine)}"), engine=engine)
            resolved[bool(engine)] = out
            return out
        return query

    # the session alone: hashmap, a snapshot every 2 commits (the engine's default is 10)
    run = run_query(spark, build(None), provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"),
                    schema=INPUT_SCHEMA, checkpoint_dir=str(tmp_path / "ckpt-session"), output_mode="append",
                    extra_confs=SESSION)
    assert run.batches == expected_all_states(batches)
    snapshots = _snapshot_descriptors(str(tmp_path / "state-False"))
    assert snapshots and {d["backend"] for d in snapshots} == {"hashmap"}
    assert {d["version"] % 2 for d in snapshots} == {0}

    # engine= overrides the session's backend, and keeps its snapshotInterval
    run = run_query(spark, build({"backend": "rocksdb"}), provider_class=HDFS_PROVIDER,
                    input_dir=str(tmp_path / "in"), schema=INPUT_SCHEMA,
                    checkpoint_dir=str(tmp_path / "ckpt-engine"), output_mode="append", extra_confs=SESSION)
    assert run.batches == expected_all_states(batches)
    snapshots = _snapshot_descriptors(str(tmp_path / "state-True"))
    assert snapshots and {d["backend"] for d in snapshots} == {"rocksdb"}
    assert {d["version"] % 2 for d in snapshots} == {0}


def test_resolved_options_carry_the_session_confs(spark, tmp_path):
    from spark_state.process.options import process_options

    df = spark.readStream.schema(INPUT_SCHEMA).parquet(str(tmp_path))
    try:
        for key, value in {**SESSION, C.CONF_PREFIX + "storage.retry.attempts": "3"}.items():
            spark.conf.set(key, value)
        common = dict(keyed=True, parallelism=2, name=None, state_location=None, state_root=str(tmp_path),
                      storage_options={"retry.maxDelayMs": "10"})
        options = process_options(df, AllStates(), ALL_STATES_OUTPUT, engine=None, **common)
        assert (options.engine.backend, options.engine.snapshot_interval) == ("hashmap", 2)
        assert options.location.storage_options == {"retry.attempts": "3", "retry.maxDelayMs": "10"}
        options = process_options(df, AllStates(), ALL_STATES_OUTPUT, engine={"snapshotInterval": "5"}, **common)
        assert (options.engine.backend, options.engine.snapshot_interval) == ("hashmap", 5)
        spark.conf.set(C.CONF_PREFIX + "backend", "heap")
        with pytest.raises(ProcessDefinitionError,
                           match=rf"'{C.CONF_PREFIX}backend' must be one of rocksdb, hashmap, got 'heap'"):
            keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=2, state_root=str(tmp_path))
    finally:
        for key in (*SESSION, C.CONF_PREFIX + "storage.retry.attempts"):
            spark.conf.unset(key)

"""The in-place rewrites (erase, rescale) share one liveness check that sees both kinds of stores:
a query whose only state is a keyed function's, caught committing a batch (a store of its state
location holds the next batch version, written by the query's own run), is refused with
QueryRunningError before anything is written."""

from __future__ import annotations

import os
import shutil

import pytest

import process_fns
from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, AllStates
from spark_state import ops
from spark_state.checkpoint.layout import parse_manifest_name
from spark_state.constants import MANIFEST_DIR
from spark_state.ops.errors import QueryRunningError
from spark_state.process import keyed_process
from spark_state.state_data import erase_keys
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark


def _newest_manifest(location):
    """(manifests directory, file name, store version) of the newest copy in any store of the location."""
    found = []
    for directory, _, files in os.walk(location):
        if os.path.basename(directory) == MANIFEST_DIR:
            found += [(parse_manifest_name(f)[0], directory, f) for f in files if parse_manifest_name(f)]
    version, directory, name = max(found)
    return directory, name, version


def test_erase_and_rescale_refuse_a_query_committing_keyed_function_state(spark, tmp_path):
    ship_module_by_value(process_fns)
    inp, ck = tmp_path / "in", tmp_path / "ck"
    write_batches(inp, [[("k1", 1), ("k2", 2)], [("k1", 3), ("k3", 4)]], INPUT_SCHEMA)

    def build(df):
        return keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=2)

    run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=str(inp), schema=INPUT_SCHEMA,
              checkpoint_dir=str(ck), output_mode="append")
    location = ck / "spark-state" / "AllStates"
    assert (location / "_operator.json").is_file()
    # the query's run writing the next batch version into one of its stores: a batch being committed
    directory, name, version = _newest_manifest(location)
    rank_part = name[len(str(version)):]  # ".json" or ".r<rank>.json": the query's run, not a tool run
    shutil.copy(os.path.join(directory, name), os.path.join(directory, f"{version + 1}{rank_part}"))
    offsets = sorted(os.listdir(ck / "offsets"))

    with pytest.raises(QueryRunningError, match=r"past the last committed batch's .*is committing a batch"):
        erase_keys(str(ck), ["k1"], progress=False)
    with pytest.raises(QueryRunningError, match="is committing a batch"):
        ops.rescale(str(ck), 3, progress=False)
    assert sorted(os.listdir(ck / "offsets")) == offsets, "nothing was written"

    # the copy gone, the same erasure goes through
    os.remove(os.path.join(directory, f"{version + 1}{rank_part}"))
    assert erase_keys(str(ck), ["k1"], progress=False).functions["AllStates"]["keys_found"] == 1

"""TTL on keyed_process state descriptors, on a real streaming query: values and list
elements expire on an injected clock (batch id in seconds), so results are exact."""

from __future__ import annotations

import pytest

import process_fns
from process_fns import EXPIRING_OUTPUT, INPUT_SCHEMA, ExpiringCount, expected_expiring_count
from spark_state.process import keyed_process
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark

BATCHES = [
    [("k1", 1), ("k2", 1)],
    [("k3", 1)],
    [("k1", 1)],             # k1: 2 s after its last write -> alive (count 2)
    [("k2", 1)],             # k2: 3 s -> expired, starts over
    [("k1", 1), ("k3", 1)],  # k1 alive (count 3), its batch-0 element expired; k3 expired
    [("k2", 1)],
]


@pytest.mark.lines
def test_values_and_list_elements_expire_on_the_injected_clock(spark, tmp_path):
    ship_module_by_value(process_fns)
    write_batches(tmp_path / "in", BATCHES, INPUT_SCHEMA)
    result = run_query(
        spark, lambda df: keyed_process(df, "k", ExpiringCount(), EXPIRING_OUTPUT, parallelism=2,
                                        state_root=str(tmp_path / "state")),
        provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"), schema=INPUT_SCHEMA,
        checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    expected = expected_expiring_count(BATCHES)
    assert result.batches == expected
    assert expected[3] == [("k2", 1, "[3]")] and expected[4] == [("k1", 3, "[2, 4]"), ("k3", 1, "[4]")]

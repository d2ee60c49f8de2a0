"""Operator state of a function (list, union list, broadcast) read per partition outside the query
(spark_state.state_data.read_function_operator_state) equals what the function restores at the next
batch, for the last and an earlier batch; an unknown state lists the ones there are."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

import process_fns
from spark_state.__main__ import main
from process_fns import INPUT_SCHEMA, OPERATOR_OUTPUT, OperatorStates
from spark_state.process import checkpointed_process
from spark_state.state_data import UnknownStateError, read_function_operator_state
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark

PARALLELISM = 3


def test_operator_state_reads_as_the_function_keeps_it(spark, tmp_path, capsys):
    ship_module_by_value(process_fns)
    batches = [[(f"r{b}", b * 100 + i) for i in range(12)] for b in range(3)]
    write_batches(tmp_path / "in", batches, INPUT_SCHEMA)
    ckpt = str(tmp_path / "ckpt")
    run = run_query(spark, lambda df: checkpointed_process(df, OperatorStates(), OPERATOR_OUTPUT,
                                                           parallelism=PARALLELISM, name="Ops"),
                    provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"), schema=INPUT_SCHEMA,
                    checkpoint_dir=ckpt, output_mode="append")
    restored, added = {}, defaultdict(list)
    for rows in run.batches.values():
        for b, p, _, seq, v, split, union, writer in rows:
            if seq == 0:
                restored[b, p] = (json.loads(split), json.loads(union), writer)
            added[b, p].append((seq, v))

    def after(b, p):  # the state partition p holds after batch b
        split, union, writer = restored[b, p]
        new = [v for _, v in sorted(added[b, p])]
        return split + new, union + new, writer

    for batch in (1, 2):
        def read(state, batch=batch):
            frame = read_function_operator_state(spark, ckpt, state, batch=None if batch == 2 else batch)
            by_partition = defaultdict(list)
            for place, value, p in sorted(map(tuple, frame.collect())):
                by_partition[p].append((place, value))
            return dict(by_partition), frame

        split, frame = read("split")
        assert frame.columns == ["index", "value", "partition_id"]
        assert {p: [v for _, v in rows] for p, rows in split.items()} == {
            p: after(batch, p)[0] for p in range(PARALLELISM)}
        union, _ = read("union")
        assert {p: [v for _, v in rows] for p, rows in union.items()} == {
            p: after(batch, p)[1] for p in range(PARALLELISM)}
        bcast, frame = read("bcast")
        assert frame.columns == ["map_key", "value", "partition_id"]
        assert bcast == {p: [("batches", batch + 1), ("writer", p)] for p in range(PARALLELISM)}
    with pytest.raises(UnknownStateError, match="bcast, split, union"):
        read_function_operator_state(spark, ckpt, "nope")
    assert main(["read", ckpt, "bcast", "--operator-state", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["columns"] == ["map_key", "value", "partition_id"] and out["total"] == 2 * PARALLELISM

"""state_data.partition_jobs: the one owner of "one Spark task per partition"."""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa

from spark_state.state_data.partition_jobs import each_partition, each_routed_partition

SCHEMA = pa.schema([pa.field("partition", pa.int32()), pa.field("task", pa.int32())])


def test_each_partition_runs_one_task_per_partition_with_its_id(spark) -> None:
    schema = SCHEMA

    def _task(partition: int) -> Iterator[pa.RecordBatch]:  # a closure: pickled by value to the tasks
        from pyspark import TaskContext

        tc = TaskContext.get()
        task = tc.partitionId() if tc is not None else -1
        yield pa.record_batch([pa.array([partition], pa.int32()), pa.array([task], pa.int32())], schema=schema)

    df = each_partition(spark, 4, _task, "partition int, task int")
    assert df.rdd.getNumPartitions() == 4
    rows = sorted((r.partition, r.task) for r in df.collect())
    assert rows == [(0, 0), (1, 1), (2, 2), (3, 3)]  # task p runs partition p, once


def test_each_routed_partition_gives_task_p_the_values_of_its_pairs(spark) -> None:
    pairs = spark.sparkContext.parallelize([(2, "a"), (0, "b"), (2, "c"), (3, "d")], 2)

    def run(partition: int, items: Iterator[Any]) -> Iterator[tuple[int, list[str]]]:
        yield partition, sorted(items)

    got = each_routed_partition(pairs, 4, run)
    assert got == [(0, ["b"]), (1, []), (2, ["a", "c"]), (3, ["d"])]  # an empty partition runs too

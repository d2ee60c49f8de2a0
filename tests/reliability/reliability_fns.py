"""Functions the reliability tests run inside Spark's Python workers (shipped by value).

They are *non-deterministic across runs on purpose*: a run's "salt" is read from a file that
the test rewrites between runs, so state written by an abandoned attempt differs from the
state the re-run writes, and reading the wrong one shows in the output.
"""

from __future__ import annotations

import os
import time

from pyspark.sql.types import LongType

from spark_state.process import KeyedProcessFunction
from spark_state.state import ValueStateDescriptor


def read_salt(path: str) -> int:
    with open(path) as f:
        return int(f.read().strip())


class SaltedSum(KeyedProcessFunction):
    """Per key: the running sum of ``v + salt``, where salt is the current run's (from a file)."""

    def __init__(self, salt_file: str) -> None:
        self.salt_file = salt_file

    def open(self, ctx):
        self.salt = read_salt(self.salt_file)
        self.total = ctx.get_state(ValueStateDescriptor("total", LongType()))

    def process_element(self, row, ctx):
        total = (self.total.value() or 0) + row.v + self.salt
        self.total.update(total)
        yield (row.k, total)


def failing_partition_udf(fail_file: str, partition: int, return_type: str = "string", delay_s: float = 1.5):
    """An identity UDF that, while ``fail_file`` exists and names the current batch, fails
    every row of one partition after ``delay_s`` (the other partitions of the batch finish and
    commit their state meanwhile)."""
    from pyspark.sql.functions import udf

    @udf(return_type)
    def check(k):
        from pyspark import TaskContext

        tc = TaskContext.get()
        if os.path.exists(fail_file):
            with open(fail_file) as f:
                batch = f.read().strip()
            if tc.getLocalProperty("streaming.sql.batchId") == batch and tc.partitionId() == partition:
                time.sleep(delay_s)
                raise RuntimeError(f"injected failure of partition {partition} in batch {batch}")
        return k

    return check


def salt_udf(salt_file: str):
    """``v + salt`` with the current run's salt (a non-deterministic input to built-in operators)."""
    from pyspark.sql.functions import udf

    @udf("bigint")
    def salted(v):
        return v + read_salt(salt_file)

    return salted


def keyed_batches(num_batches: int = 4):
    """Input of the keyed_process runs: ``process_fns.INPUT_SCHEMA`` rows (key, value)."""
    import random

    rng = random.Random(5)
    return [[(f"k{rng.randrange(60)}", rng.randrange(0, 25)) for _ in range(90)] for _ in range(num_batches)]

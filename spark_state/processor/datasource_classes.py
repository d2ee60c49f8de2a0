"""The Python Data Source API classes of ``format("spark-state")`` (Spark 4.0+; the options and
the planning are :mod:`.datasource`'s).

Spark runs ``schema()`` and ``reader()`` in a Python worker beside the driver: ``schema()`` plans
the read once (the state's schema record, read from the first partition store that has it) and
keeps the plan on the instance, which Spark pickles into ``reader()``; each input partition is
one partition store, and ``read`` yields its Arrow record batches (:mod:`.partition_jobs`).
"""

from __future__ import annotations

from typing import Iterator, Optional

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .datasource import NAME, plan_from_options
from .partition_jobs import PartitionJob

__all__ = ["SparkStateDataSource"]


class SparkStateDataSource(DataSource):
    """``format("spark-state")``: keyed functions' state, timers, change feeds and operator state."""

    _job: Optional[PartitionJob] = None

    @classmethod
    def name(cls) -> str:
        return NAME

    def _plan(self) -> PartitionJob:
        if self._job is None:
            self._job = plan_from_options(self.options)
        return self._job

    def schema(self) -> StructType:
        return self._plan().schema

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(self._plan())


class _Reader(DataSourceReader):
    def __init__(self, job: PartitionJob) -> None:
        self.job = job

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.job.partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.job.batches(partition.value)

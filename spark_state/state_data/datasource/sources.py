"""The Python Data Source API classes of ``format("spark-state")`` (Spark 4.0+; the options and
the planning are :mod:`.options`'s).

Spark runs ``schema()`` and ``reader()`` in a Python worker beside the driver: ``schema()`` plans
the read once (the state's schema record, read from the first partition store that has it) and
keeps the plan on the instance, which Spark pickles into ``reader()``; each input partition is
one partition store, and ``read`` yields its Arrow record batches (:mod:`..partition_jobs`).
"""

from __future__ import annotations

from typing import Any, Iterator, Optional

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceWriter, InputPartition
from pyspark.sql.types import StructType

from ...ops.inspect import METADATA_FIELDS, METADATA_TYPES
from ..partition_jobs import PartitionJob
from .options import METADATA_NAME, NAME, metadata_from_options, plan_from_options
from .writer import savepoint_writer

__all__ = ["SparkStateDataSource", "StateMetadataDataSource"]


class SparkStateDataSource(DataSource):
    """``format("spark-state")``: reads keyed functions' state, timers, change feeds and operator
    state; writes a savepoint's keyed state or Spark operator store as a new savepoint (:mod:`.writer`)."""

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

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A savepoint's state replaced by the rows (:mod:`.writer`)."""
        return savepoint_writer(dict(self.options), schema, overwrite)


class _Reader(DataSourceReader):
    def __init__(self, job: PartitionJob) -> None:
        self.job = job

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.job.partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self.job.batches(partition.value)


class StateMetadataDataSource(DataSource):
    """``format("spark-state-metadata")``: :func:`~..readers.metadata.state_metadata`'s rows, computed in
    ``reader()`` (beside the driver) and read in one partition."""

    @classmethod
    def name(cls) -> str:
        return METADATA_NAME

    def schema(self) -> str:
        return ", ".join(f"{f} {METADATA_TYPES.get(f, 'string')}" for f in METADATA_FIELDS)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _MetadataReader(metadata_from_options(self.options))


class _MetadataReader(DataSourceReader):
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        for row in self.rows:
            yield tuple(row[f] for f in METADATA_FIELDS)

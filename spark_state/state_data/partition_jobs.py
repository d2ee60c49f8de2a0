"""The frame every reader of state as data runs in: one Spark task per partition store, rows as
Arrow record batches, and a ``partition_id`` column last; and the one owner of "one Spark task per
partition" for the writers too (:func:`each_partition`, :func:`each_routed_partition`).

A reader is planned on the driver as a :class:`PartitionJob`: its Spark schema (ending with
``partition_id``, as Spark's ``statestore`` reader's rows do), the number ``n`` of partition
stores, and a picklable ``rows(partition)`` giving that store's rows (without the partition id)
in lists of at most :data:`BATCH_ROWS` (:func:`chunked`). Two carriers run the same job:

* :func:`run_job` for the Python functions: :func:`each_partition`, one task per partition id;
* the data source (:mod:`.datasource.options`): its ``read(partition)`` yields :meth:`PartitionJob.batches`.

Memory: a task holds one list of at most :data:`BATCH_ROWS` rows and its record batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, TypeVar, Union

import pyarrow as pa
from pyspark import RDD
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ..arrow_chunks import chunks
from ..spark.compat import arrow_schema
from .errors import StateDataError

__all__ = ["BATCH_ROWS", "PARTITION_ID", "PartitionJob", "chunked", "each_partition", "each_routed_partition",
           "record_batch", "run_job"]

R = TypeVar("R")

#: Rows per Arrow record batch a task yields.
BATCH_ROWS = 8192
#: The last column of every reader's rows: the partition store the row comes from.
PARTITION_ID = T.StructField("partition_id", T.IntegerType(), False)


@dataclass(frozen=True)
class PartitionJob:
    """A reader's plan: ``schema`` (``partition_id`` last), ``partitions`` stores, and ``rows``,
    picklable, giving partition ``p``'s rows without ``partition_id`` in lists of at most
    :data:`BATCH_ROWS`."""

    schema: T.StructType
    partitions: int
    rows: Callable[[int], Iterator[list[tuple]]]

    def batches(self, partition: int) -> Iterator[pa.RecordBatch]:
        """Partition ``partition``'s rows as record batches of the job's schema."""
        arrow = arrow_schema(self.schema)
        for rows in self.rows(partition):
            yield record_batch(rows, arrow, partition)


def run_job(spark: SparkSession, job: PartitionJob) -> DataFrame:
    """``job`` as a DataFrame: one Spark task per partition store (:func:`each_partition`)."""
    return each_partition(spark, job.partitions, job.batches, job.schema)


def each_partition(spark: SparkSession, n: int, task: Callable[[int], Iterator[pa.RecordBatch]],
                   schema: Union[T.StructType, str]) -> DataFrame:
    """``task(p)`` for every partition ``p`` in ``0..n-1``, one Spark task each, as a DataFrame of
    ``schema``: ``spark.range(0, n, 1, n)`` puts one id in each of its ``n`` partitions and the
    ``mapInArrow`` body runs ``task`` on the ids it reads (its partition's id). ``task`` is pickled
    to the executors."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for partition in batch.column(0).to_pylist():
                yield from task(partition)

    return spark.range(0, n, 1, n).mapInArrow(run, schema)


def each_routed_partition(pairs: RDD, n: int, task: Callable[[int, Iterator[Any]], Iterator[R]]) -> list[R]:
    """``task(p, items)`` for every partition ``p`` in ``0..n-1``, one Spark task each, where
    ``items`` are the values of the ``(p, value)`` pairs of ``pairs`` (shuffled so that pair
    ``(p, v)`` reaches task ``p``; a partition with no pairs gets none, and runs too); returns
    what the tasks yield, pickled back to the driver (Python objects, no Spark schema), in
    partition order. For jobs that write per-partition files from rows of a DataFrame."""

    def run(partition: int, routed: Iterable[tuple[int, Any]]) -> Iterator[R]:
        return task(partition, (value for _, value in routed))

    return pairs.partitionBy(n, _identity).mapPartitionsWithIndex(run).collect()


def _identity(partition: int) -> int:
    """The partitioner of :func:`each_routed_partition`: pair ``(p, v)`` goes to partition ``p``."""
    return partition


def chunked(rows: Iterable[tuple], size: int = BATCH_ROWS) -> Iterator[list[tuple]]:
    """``rows`` in lists of at most ``size`` (none empty): :func:`~spark_state.arrow_chunks.chunks`
    at the readers' batch size."""
    return chunks(rows, size)


def record_batch(rows: list[tuple], schema: pa.Schema, partition: Optional[int] = None) -> pa.RecordBatch:
    """``rows`` as a record batch of ``schema``; with ``partition``, the rows lack the last column
    (``partition_id``), which is ``partition`` on every row."""
    columns: list[Any] = list(zip(*rows)) if rows else [()] * (len(schema) - (partition is not None))
    arrays = [_column(col, field) for col, field in zip(columns, schema)]
    if partition is not None:
        arrays.append(pa.array([partition] * len(rows), type=schema.field(len(schema) - 1).type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _column(values: Iterable[Any], field: pa.Field) -> pa.Array:
    """One column of a reader's rows; a value its type cannot hold is an error naming the column."""
    try:
        return pa.array([_arrow_value(v) for v in values], type=field.type)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
        raise StateDataError(f"column {field.name!r} ({field.type}) cannot hold a value of the rows: {exc}") from None


def _arrow_value(value: Any) -> Any:
    """A decoded value in the form pyarrow builds its type from: rows as dicts, maps as pairs."""
    if isinstance(value, tuple) and hasattr(value, "asDict"):  # a pyspark Row (struct)
        return {k: _arrow_value(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return [(k, _arrow_value(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_arrow_value(v) for v in value]
    return value

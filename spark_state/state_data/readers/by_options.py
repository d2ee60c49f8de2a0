"""The reader a :class:`~..read_options.ReadOptions` asks for: the one choice of reader for the
data source, :class:`~.state_reader.StateReader` and the command line.

An :class:`~..read_options.OptionError` raised by a reader names its option as Python spells it;
these functions respell it for the surface the options came through before it reaches the user.
"""

from __future__ import annotations

from typing import Any, Iterator

from pyspark.sql import DataFrame, SparkSession

from ..partition_jobs import PartitionJob, run_job
from ..read_options import OptionError, ReadOptions
from .change_feed import plan_change_feed
from .keyed_state import plan_keyed_state, plan_timers
from .operator_state import plan_function_operator_state
from .spark_operator_state import read_spark_operator_state

__all__ = ["local_rows", "plan", "read"]


def plan(options: ReadOptions) -> PartitionJob:
    """The read of a keyed or checkpointed function's state that ``options`` ask for, as its job
    (driver side, no Spark session): the data source's planning.

    :raises OptionError: see :meth:`~..read_options.ReadOptions.check`."""
    o = options.check()
    common: dict[str, Any] = {"function": o.function, "storage_options": dict(o.storage_options),
                              "process_root": o.process_root, "process_locations": dict(o.process_locations)}
    try:
        if o.change_feed:
            assert o.state is not None and o.start_batch is not None
            return plan_change_feed(o.path, o.state, start_batch=o.start_batch, end_batch=o.end_batch,
                                    allow_pickle=o.allow_pickle, **common)
        if o.timers:
            return plan_timers(o.path, batch=o.batch, **common)
        if o.operator_state is not None:
            return plan_function_operator_state(o.path, o.operator_state, batch=o.batch, allow_pickle=o.allow_pickle,
                                                **common)
        if o.operator_id is not None:
            raise OptionError("operator_id", "{option} reads a Spark operator through Spark's own reader, which "
                                             "has no plan of ours: read it with read_spark_operator_state")
        assert o.state is not None
        return plan_keyed_state(o.path, o.state, batch=o.batch, allow_pickle=o.allow_pickle,
                                flatten_collection_types=o.flatten(), **common)
    except OptionError as e:
        raise e.on(o.surface) from None


def read(spark: SparkSession, options: ReadOptions) -> DataFrame:
    """The DataFrame ``options`` ask for (Python's and the command line's reads).

    :raises OptionError: see :meth:`~..read_options.ReadOptions.check`."""
    o = options.check()
    if o.operator_id is None:
        return run_job(spark, plan(o))
    try:
        return read_spark_operator_state(spark, o.path, operator_id=o.operator_id, store_name=o.store_name,
                                         batch=o.batch, storage_options=dict(o.storage_options))
    except OptionError as e:
        raise e.on(o.surface) from None


def local_rows(options: ReadOptions) -> tuple[list[str], Iterator[dict[str, Any]]]:
    """The columns and rows of a function's state that ``options`` ask for, read in this process
    without a Spark session: partition store after partition store, a chunk of rows at a time
    (:data:`~..partition_jobs.BATCH_ROWS`), so a tool that prints them holds one chunk whatever
    the state's size. Rows are dicts of the DataFrame's columns; structs are dicts, as
    ``Row.asDict(recursive=True)`` gives them.

    :raises OptionError: see :meth:`~..read_options.ReadOptions.check`."""
    job = plan(options)
    columns = job.schema.fieldNames()

    def rows() -> Iterator[dict[str, Any]]:
        for partition in range(job.partitions):
            for chunk in job.rows(partition):
                for row in chunk:
                    yield dict(zip(columns, (*map(_plain, row), partition)))

    return columns, rows()


def _plain(value: Any) -> Any:
    """A decoded value with structs (pyspark Rows) as dicts, recursively."""
    if isinstance(value, tuple) and hasattr(value, "asDict"):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value

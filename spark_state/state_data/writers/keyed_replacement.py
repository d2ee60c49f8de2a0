"""A keyed state's whole content replaced, partition by partition: the one per-partition code of
:meth:`~.transform.SavepointTransform.replace_keyed_state` (a Spark job over a DataFrame) and of
the data source's writer (staged rows, :mod:`..datasource.writer`).

A replacement runs the descriptor's own state objects offline (:mod:`spark_state.process.offline`)
through :class:`StateWriter`, a keyed function that writes each row's ``value`` into the state
of the row's key: values are checked and encoded by the descriptor's serializer, TTL stamps are
written for a descriptor with TTL, and the schema record is the descriptor's. Partition ``p``'s
rows (key columns, ``value``, and the hidden key group column) start from the partition's
entries without the state's (:class:`~.keyed_state_surgery.BaseEntries`) and are written as
``process/<function>/<p>.arrow`` (:func:`~.bootstrap_task.bootstrap_partition`).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from ...config import EngineConfig
from ...ops.progress import Progress
from ...ops import savepoint_format as F
from ...process.functions import KeyedProcessFunction
from ...process.location import LocationSpec
from ...process.options import ProcessOptions
from ...state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from ...state.descriptors import StateDescriptor
from ..errors import StateDataError
from ..location.savepoints import SavepointSource
from .bootstrap_task import RESULT_DDL, bootstrap_partition
from .keyed_state_surgery import BaseEntries

#: descriptor class -> how the state's value is written
_KINDS = ((ValueStateDescriptor, "value"), (ListStateDescriptor, "list"), (MapStateDescriptor, "map"),
          (ReducingStateDescriptor, "reducing"), (AggregatingStateDescriptor, "aggregating"))


def state_kind(descriptor: StateDescriptor) -> str:
    """How ``descriptor``'s values are written: value, list, map, reducing or aggregating.

    :raises StateDataError: not a keyed state descriptor."""
    kind = next((k for cls, k in _KINDS if isinstance(descriptor, cls)), None)
    if kind is None:
        raise StateDataError(f"{type(descriptor).__name__} is not a keyed state descriptor")
    return kind


class StateWriter(KeyedProcessFunction):
    """Writes each row's ``value`` into one state of the current key (the replacement's rows)."""

    def __init__(self, descriptor: StateDescriptor, kind: str) -> None:
        self.descriptor = descriptor
        self.kind = kind

    def open(self, ctx: Any) -> None:
        getter = {"value": ctx.get_state, "list": ctx.get_list_state, "map": ctx.get_map_state,
                  "reducing": ctx.get_reducing_state, "aggregating": ctx.get_aggregating_state}[self.kind]
        self.state = getter(self.descriptor)

    def process_element(self, row: Any, ctx: Any) -> None:
        value, state, kind = row.value, self.state, self.kind
        if kind == "value":
            state.update(value)
        elif kind == "list":
            state.update(list(value or ()))
        elif kind == "map":
            state.clear()
            state.put_all(dict(value or ()))
        elif kind == "reducing":
            state.clear()
            if value is not None:
                state.add(value)
        else:
            state.clear()
            if value is not None:
                state.merge_accumulator(tuple(value.values()) if isinstance(value, dict) else value)
        return None


def replacement_options(source: SavepointSource, descriptor: StateDescriptor) -> ProcessOptions:
    """The options of the offline run that replaces ``descriptor``'s state of ``source``'s function."""
    return offline_options(source, descriptor.name)


def offline_options(source: SavepointSource, label: str) -> ProcessOptions:
    """The options of an offline run that writes part (``label``) of ``source``'s function's state:
    its layout (parallelism, max parallelism) and a RocksDB store (a partition may not fit in memory)."""
    name = source.function
    return ProcessOptions(function_name=f"{name}.{label}", location=LocationSpec(None, None, name),
                          engine=EngineConfig(backend="rocksdb", snapshot_interval=0),
                          parallelism=source.entry.parallelism, output_schema=T.StructType([]),
                          max_parallelism=source.max_parallelism)


def write_routed(plan: Any, routed: DataFrame, source: SavepointSource, base: BaseEntries, url: str,
                 options: Mapping[str, str], label: str, progress: bool) -> dict[int, F.FileEntry]:
    """Every partition file of ``source``'s function written into the savepoint at ``url`` by one
    Spark job: partition ``p`` of ``routed`` (rows routed for ``plan`` by
    :func:`~spark_state.process.offline.plan_offline`) runs through the plan's function, starting
    from ``base``'s entries of ``p`` (:func:`~.bootstrap_task.bootstrap_partition`); returns the
    files written, by partition."""
    name = source.function

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return bootstrap_partition(plan, name, url, options, batches, base)

    bar = Progress(label, unit="partitions", total=source.entry.parallelism, enabled=progress)
    found: dict[int, F.FileEntry] = {}
    try:
        for row in routed.mapInArrow(run, RESULT_DDL).toLocalIterator():
            found[row.partition] = F.file_entry_of_row(row)
            bar.update(1)
    finally:
        bar.close()
    return found


def replace_partition(plan: Any, source: SavepointSource, descriptor: StateDescriptor, partition: int,
                      batches: Iterator[pa.RecordBatch], url: str, options: Mapping[str, str]) -> F.FileEntry:
    """Partition ``partition`` of ``source``'s function written into the savepoint at ``url`` with
    ``descriptor``'s state given the content of ``batches`` (the partition's rows, routed; see the
    module docstring), starting from the source savepoint's partition file. ``plan``: the offline
    plan of :class:`StateWriter` (:func:`~spark_state.process.offline.plan_offline_routed`);
    returns the file's manifest entry."""
    base = BaseEntries(source, (descriptor.name_bytes,))
    for result in bootstrap_partition(plan, source.function, url, options, batches, base, partition):
        row = result.to_pylist()[0]
        return F.FileEntry(row["path"], row["size"], row["crc32"], row["rows"], row["keys"])
    raise AssertionError("a bootstrap task yields one row")  # pragma: no cover

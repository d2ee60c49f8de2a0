"""Transform: a new savepoint from an existing one, through DataFrame jobs.

::

    from spark_state.processor import SavepointTransform
    t = SavepointTransform(spark, "/savepoints/sp1")
    counts = t.read_keyed_state("count")                                 # key columns, value
    fixed = counts.where("k != 'bot'").withColumn("value", F.col("value").cast("string"))
    (t.replace_keyed_state(ValueStateDescriptor("count", StringType()), fixed)
      .write("/savepoints/sp2"))                                          # then spark-state restore

A replacement gives a keyed state its whole new content: one row per key, the key columns
(the names and types the function is keyed by) and ``value`` -- the value (value, reducing
state), an array (list state), a map (map state) or the accumulator (aggregating state), as
:func:`~.read.read_keyed_state` reads them. Keys without a row lose the state; the other
states, the timers and everything else of the savepoint are copied unchanged.

How. A replacement is a Spark job: its rows are routed by key group to the partitions of the
function's layout (as the query routes them); each task loads the partition's entries from the
savepoint without the state's entries (values, schema record, TTL marker and index), then
writes every row through the state objects of ``descriptor`` -- the runtime's own code, so the
values are checked and encoded by the descriptor's serializer, TTL stamps are written for a
descriptor with TTL, and the schema record is the descriptor's (a changed type is recorded, and
the query that restores the savepoint must declare it). Replacements of one function run one
after the other, each on the previous one's files. The key columns and the ``value`` column are
checked against the recorded key columns and the descriptor's type before anything is written;
the manifest, written last, lists every file with its size and CRC-32.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ..config import EngineConfig
from ..ops import savepoint_format as F
from ..ops.progress import Progress
from ..ops.savepoint_manifest import read_manifest
from ..ops.savepoint import check_empty_target
from ..ops.state_files import copy_verified
from ..process.functions import KeyedProcessFunction
from ..process.offline import plan_offline
from ..process.options import ProcessOptions
from ..process.location import LocationSpec
from ..state import (AggregatingStateDescriptor, ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                     ValueStateDescriptor)
from ..state.descriptors import StateDescriptor
from ..state.type_strings import spark_type_of as _spark_type_of
from ..storage import open_storage
from .bootstrap_task import RESULT_DDL, BaseEntries, bootstrap_partition
from .errors import KeyMismatchError, StateDataError
from .read import read_keyed_state, read_timers
from .savepoint_source import SavepointSource

#: descriptor class -> how the state's value is written
_KINDS = ((ValueStateDescriptor, "value"), (ListStateDescriptor, "list"), (MapStateDescriptor, "map"),
          (ReducingStateDescriptor, "reducing"), (AggregatingStateDescriptor, "aggregating"))


@dataclass
class TransformResult:
    savepoint: str
    source: str
    #: function -> the states replaced, in order
    replaced: dict[str, list[str]]
    #: function -> data entries of its state after the transform
    entries: dict[str, int]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


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


@dataclass
class _Replacement:
    source: SavepointSource
    descriptor: StateDescriptor
    kind: str
    rows: DataFrame


class SavepointTransform:
    """A transform of one savepoint (see the module docstring)."""

    def __init__(self, spark: SparkSession, savepoint: str, *, savepoint_options: Optional[Mapping[str, str]] = None,
                 progress: bool = True) -> None:
        self._spark = spark
        self._savepoint = savepoint
        self._options = dict(savepoint_options or {})
        self._progress = progress
        self._replacements: list[_Replacement] = []

    def read_keyed_state(self, state: str, *, function: Optional[str] = None, flatten_collection_types: bool = False,
                         allow_pickle: bool = False) -> DataFrame:
        """A keyed state of the savepoint as a DataFrame (:func:`~.read.read_keyed_state`)."""
        return read_keyed_state(self._spark, self._savepoint, state, function=function,
                                flatten_collection_types=flatten_collection_types,
                                storage_options=self._options, allow_pickle=allow_pickle)

    def read_timers(self, *, function: Optional[str] = None) -> DataFrame:
        return read_timers(self._spark, self._savepoint, function=function, storage_options=self._options)

    def replace_keyed_state(self, descriptor: StateDescriptor, rows: DataFrame, *,
                            function: Optional[str] = None) -> "SavepointTransform":
        """Give keyed state ``descriptor.name`` of ``function`` (optional when the savepoint has one
        keyed function) the content of ``rows`` (see the module docstring).

        :raises KeyMismatchError: the key columns differ from the recorded ones.
        :raises StateDataError: no ``value`` column, or one of another type than the descriptor's."""
        source = SavepointSource.open(self._savepoint, function, self._options)
        kind = next((k for cls, k in _KINDS if isinstance(descriptor, cls)), None)
        if kind is None:
            raise StateDataError(f"{type(descriptor).__name__} is not a keyed state descriptor")
        _check_rows(source, descriptor, kind, rows)
        self._replacements.append(_Replacement(source, descriptor, kind, rows))
        return self

    def write(self, target: str, *, target_options: Optional[Mapping[str, str]] = None) -> TransformResult:
        """Write the transformed savepoint into ``target`` (new or empty); its manifest last."""
        started = time.perf_counter()
        sp = open_storage(self._savepoint, self._options)
        manifest = read_manifest(sp)
        out_options = dict(target_options or {})
        out = open_storage(target, out_options)
        check_empty_target(out, target)
        rewritten = {r.source.function for r in self._replacements}
        new = F.SavepointManifest(**{**manifest.__dict__, "files": [], "created_ms": int(time.time() * 1000),
                                     "format_version": F.FORMAT_VERSION})
        for entry in manifest.files:
            if any(entry.path.startswith(f"{F.PROCESS_DIR}/{name}/") and entry.path.endswith(".arrow")
                   for name in rewritten):
                continue
            copy_verified(sp, manifest, entry.path, out)  # a state file streams through a local copy
            new.files.append(entry)
        replaced: dict[str, list[str]] = {}
        written: dict[str, dict[int, F.FileEntry]] = {}
        for r in self._replacements:
            name = r.source.function
            chained = name in written
            base = BaseEntries(r.source, (r.descriptor.name_bytes,), out.url if chained else None, out_options)
            written[name] = self._run(r, base, out.url, out_options)
            replaced.setdefault(name, []).append(r.descriptor.name)
        for name in sorted(written):
            new.files.extend(written[name][i] for i in sorted(written[name]))
        out.write_bytes(F.MANIFEST, new.to_json())
        entries = {name: sum(f.keys or 0 for f in files.values()) for name, files in written.items()}
        return TransformResult(out.url, sp.url, replaced, entries, round(time.perf_counter() - started, 3))

    def _run(self, r: _Replacement, base: BaseEntries, url: str, options: dict[str, str]) -> dict[int, F.FileEntry]:
        """One replacement's job; returns the partition files it wrote."""
        source, name = r.source, r.source.function
        n, max_p = source.entry.parallelism, source.max_parallelism
        key_columns = source.key_columns
        keys = list(key_columns.columns)
        rows = r.rows.select(*keys, "value")
        opts = ProcessOptions(function_name=f"{name}.{r.descriptor.name}", location=LocationSpec(None, None, name),
                              engine=_engine(), parallelism=n, output_schema=T.StructType([]), max_parallelism=max_p)
        plan, routed = plan_offline(rows, keys, key_columns.fields, StateWriter(r.descriptor, r.kind), opts)

        def run(batches):
            return bootstrap_partition(plan, name, url, options, batches, base)

        bar = Progress(f"transform of {name}.{r.descriptor.name}", unit="partitions", total=n, enabled=self._progress)
        found: dict[int, F.FileEntry] = {}
        try:
            for row in routed.mapInArrow(run, RESULT_DDL).toLocalIterator():
                found[row.partition] = F.FileEntry(row.path, row.size, row.crc32, row.rows, row.keys)
                bar.update(1)
        finally:
            bar.close()
        return found


def _engine() -> EngineConfig:
    """The engine of a transform task's temporary store (RocksDB: a partition may not fit in memory)."""
    return EngineConfig(backend="rocksdb", snapshot_interval=0)


def _check_rows(source: SavepointSource, descriptor: StateDescriptor, kind: str, rows: DataFrame) -> None:
    """The replacement's key columns are the recorded ones and its ``value`` fits the descriptor."""
    recorded = source.key_columns
    types = {f.name: f.dataType for f in rows.schema.fields}
    given = [(c, types[c].simpleString()) for c in recorded.columns if c in types]
    if [c for c, _ in given] != list(recorded.columns) or [t for _, t in given] != list(recorded.types):
        raise KeyMismatchError(
            f"the rows for state {descriptor.name!r} of {source.function!r} need the key columns "
            f"{recorded.describe()} (as recorded in the savepoint); they have {rows.schema.simpleString()}: "
            "rename or cast them")
    if "value" not in types:
        raise StateDataError(f"the rows for state {descriptor.name!r} need a 'value' column; they have "
                             f"{', '.join(types)} (read_keyed_state gives the form to write)")
    expected = _expected_type(descriptor, kind)
    if expected is not None and _canonical(types["value"]) != _canonical(expected):
        raise StateDataError(
            f"the 'value' column for state {descriptor.name!r} is {types['value'].simpleString()}, but the "
            f"descriptor ({type(descriptor).__name__}) stores {expected.simpleString()}: cast the column, or "
            "declare the descriptor with the column's type")


def _expected_type(descriptor: StateDescriptor, kind: str) -> Optional[T.DataType]:
    """The Spark type of the ``value`` column a descriptor takes (None: values of a Python or
    custom serializer, checked by the serializer as they are written)."""
    value = _spark_type_of(descriptor.serializer)
    if value is None:
        return None
    if kind == "list":
        return T.ArrayType(value, True)
    if kind == "map":
        key = _spark_type_of(getattr(descriptor, "key_serializer", None))
        return T.MapType(key, value, True) if key is not None else None
    return value


def _canonical(data_type: T.DataType) -> str:
    """A type's canonical form (the serializers'), nullability ignored: ``int`` is ``bigint``."""
    from ..state.serializers import serializer_for

    text = getattr(serializer_for(data_type), "type_string", None)
    return text.replace(" not null", "") if isinstance(text, str) else data_type.simpleString()

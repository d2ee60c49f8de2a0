"""Savepoint surgery on functions' operator state (list, union list, broadcast): a state's whole
content replaced by the rows of a DataFrame, one Spark task per partition of the function's layout.

The rows are those :func:`~..readers.operator_state.read_function_operator_state` gives:
``index`` and ``value`` (list and union list state: the element's place in the partition's
list, and the element) or ``map_key`` and ``value`` (broadcast state), then ``partition_id``
(the layout's partition). Each task writes its partition's file from the savepoint's entries without
every entry of the state (any mode) and its schema record, plus the rows' entries and the
descriptor's record (layout: :mod:`spark_state.keys.operator`; values are the descriptor
serializer's bytes, so a value of another type fails in the serializer, naming the state).
A partition without rows holds the state empty.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Mapping, Optional

from pyspark.sql import DataFrame, SparkSession

from ...keys.operator import (
    INDEX,
    KEYED_OPERATOR_PREFIX,
    MODE_BROADCAST,
    MODE_KINDS,
    MODE_SPLIT,
    MODE_UNION,
    MODES,
    state_prefix,
)
from ...keys.system import operator_record_key
from ...ops import savepoint_format as F
from ...process.plan import KEYED
from ...state import ListStateDescriptor, MapStateDescriptor
from ...state.descriptors import StateDescriptor
from ...state.schema import schema_of
from ..errors import StateDataError
from ..location.savepoints import SavepointSource
from ..partition_jobs import each_routed_partition
from .keyed_state_surgery import BaseEntries, write_partition

#: ``mode=`` of a list state descriptor -> the mode byte
LIST_MODES = {"list": MODE_SPLIT, "union": MODE_UNION}


def operator_mode(descriptor: StateDescriptor, mode: Optional[str]) -> int:
    """The mode byte of an operator state declared by ``descriptor`` (a map descriptor: broadcast;
    a list descriptor: ``mode`` "list", the default, or "union").

    Raises:
        StateDataError: another descriptor, or a mode it cannot have.
    """
    if isinstance(descriptor, MapStateDescriptor):
        if mode not in (None, "broadcast"):
            raise StateDataError(f"a MapStateDescriptor declares a broadcast state, not mode={mode!r}")
        return MODE_BROADCAST
    if isinstance(descriptor, ListStateDescriptor):
        if (mode or "list") not in LIST_MODES:
            raise StateDataError(f"a ListStateDescriptor declares a list or union list state (mode='list' or "
                                 f"'union'), not mode={mode!r}")
        return LIST_MODES[mode or "list"]
    raise StateDataError(f"{type(descriptor).__name__} declares no operator state (ListStateDescriptor for list "
                         "and union list state, MapStateDescriptor for broadcast state)")


def keyspace_of(entry: F.ProcessEntry) -> bytes:
    """The operator-state keyspace of a function's store: ``0xFE`` beside keyed state, else none."""
    return KEYED_OPERATOR_PREFIX if entry.kind == KEYED else b""


def dropped_prefixes(name: bytes, keyspace: bytes) -> tuple[bytes, ...]:
    """The key prefixes of every entry of operator state ``name``: each mode's, and its schema record."""
    return (*(state_prefix(m, name, keyspace) for m in MODES), operator_record_key(name))


def replace_operator_state(spark: SparkSession, source: SavepointSource, base: BaseEntries, rows: DataFrame,
                           descriptor: StateDescriptor, mode: int, url: str,
                           options: Mapping[str, str]) -> dict[int, F.FileEntry]:
    """Write every partition file of ``source``'s function into the savepoint at ``url``: ``base``'s
    entries (the state's dropped) plus ``rows`` encoded (see the module docstring); returns the files."""
    name, n = source.function, source.entry.parallelism
    opts = dict(options)
    keyspace = keyspace_of(source.entry)
    encode = _Encoder(descriptor, mode, keyspace)
    place = "map_key" if mode == MODE_BROADCAST else "index"

    def run(partition: int, items: Iterator[tuple[Any, Any]]) -> Iterator[tuple[int, F.FileEntry]]:
        yield partition, write_partition(name, url, opts, base, partition, encode(items))

    # partition p of the job is the layout's partition p; the tasks' FileEntry objects, pickled back
    pairs = rows.select("partition_id", place, "value").rdd.map(lambda r: (r[0], (r[1], r[2])))
    return dict(each_routed_partition(pairs, n, run))


class _Encoder:
    """A partition's rows as entries (picklable: it goes to the tasks): the schema record first."""

    def __init__(self, descriptor: StateDescriptor, mode: int, keyspace: bytes) -> None:
        self.descriptor, self.mode = descriptor, mode
        self.prefix = state_prefix(mode, descriptor.name_bytes, keyspace)
        self.record = (operator_record_key(descriptor.name_bytes), schema_of(descriptor, MODE_KINDS[mode]).encode())

    def __call__(self, rows: Iterable[tuple[Any, Any]]) -> Iterator[tuple[bytes, bytes]]:
        yield self.record
        value = self.descriptor.serializer.serialize
        if self.mode == MODE_BROADCAST:
            assert isinstance(self.descriptor, MapStateDescriptor)  # operator_mode chose broadcast for it
            key = self.descriptor.key_serializer.serialize
            for map_key, v in rows:
                yield self.prefix + key(map_key), value(v)
        else:
            for index, v in rows:
                yield self.prefix + INDEX.pack(index), value(v)

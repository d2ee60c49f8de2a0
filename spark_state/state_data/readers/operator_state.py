"""The operator state of keyed and checkpointed functions, per partition, as a batch DataFrame.

::

    from spark_state.state_data import read_function_operator_state
    read_function_operator_state(spark, "/ckpt", "offsets", function="Reader").show()

Operator state (Flink's list, union list and broadcast state; :mod:`spark_state.process.operator_state`)
belongs to a partition of the function's layout, not to a key. Rows: ``index`` (int, the
element's place in the partition's list) and ``value`` for list and union list state, or
``map_key`` and ``value`` for broadcast state, typed by the state's schema record; then
``partition_id`` (int), as in every reader.
A ``checkpointed_process`` function's state and a keyed function's (``initialize_state``, or the
broadcast states of ``keyed_broadcast_process``) are read alike. One Spark task per partition
store loads the store's committed copy of the batch (default: the last committed batch), or its
state file when ``checkpoint`` is a savepoint's directory (the savepoint's batch).
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ...engine.store import VersionedStore, prefix_upper_bound
from ...keys.operator import INDEX, KEYED_OPERATOR_PREFIX, MODE_BROADCAST, modes_range, split_key, state_prefix
from ...keys.system import operator_record_key
from ...process.plan import KEYED
from ...state.schema import StateSchema
from ..codecs import serializer_of
from ..errors import UnknownStateError
from ..location.partitions import Partitions, function_partitions
from ..partition_jobs import PARTITION_ID, PartitionJob, run_job
from .keyed_state import value_type

__all__ = ["plan_function_operator_state", "read_function_operator_state"]


def read_function_operator_state(spark: SparkSession, path: str, state: str, *, function: Optional[str] = None,
                                 batch: Optional[int] = None, storage_options: Optional[Mapping[str, str]] = None,
                                 process_root: Optional[str] = None,
                                 process_locations: Optional[Mapping[str, str]] = None,
                                 allow_pickle: bool = False) -> DataFrame:
    """Operator state ``state`` of the query's function ``function`` (optional when it has one
    function) after ``batch`` (see the module docstring).

    :raises UnknownStateError: no such function, or no such operator state (the message lists them)."""
    return run_job(spark, plan_function_operator_state(
        path, state, function=function, batch=batch, storage_options=storage_options,
        process_root=process_root, process_locations=process_locations, allow_pickle=allow_pickle))


def plan_function_operator_state(path: str, state: str, *, function: Optional[str] = None,
                                 batch: Optional[int] = None, storage_options: Optional[Mapping[str, str]] = None,
                                 process_root: Optional[str] = None,
                                 process_locations: Optional[Mapping[str, str]] = None,
                                 allow_pickle: bool = False) -> PartitionJob:
    """:func:`read_function_operator_state`'s job (driver side; no Spark session needed)."""
    parts, name, kind = function_partitions(path, function, batch, storage_options, process_root, process_locations,
                                            kind="function")
    keyspace = KEYED_OPERATOR_PREFIX if kind == KEYED else b""
    mode, record = _record(parts, state, name, keyspace)
    value = value_type(record.value, state)
    if mode == MODE_BROADCAST:
        assert record.key is not None
        extra = [T.StructField("map_key", value_type(record.key, state), False), T.StructField("value", value, True)]
    else:
        extra = [T.StructField("index", T.IntegerType(), False), T.StructField("value", value, True)]
    schema = T.StructType(extra + [PARTITION_ID])
    return parts.job(schema, _Reader(state, mode, record, keyspace, allow_pickle).rows)


def _record(parts: Partitions, state: str, function: str, keyspace: bytes) -> tuple[int, StateSchema]:
    """The state's mode and schema record, from the first partition store that has it."""
    seen: set[str] = set()
    name = state.encode("utf-8")
    for partition in range(parts.layout.parallelism):
        with parts.store(partition) as store:
            raw = store.get(operator_record_key(name))
            modes = {m for m, n, _ in _states(store, keyspace) if n == name}
            seen.update(n.decode("utf-8", "replace") for _, n, _ in _states(store, keyspace))
        if raw is not None and modes:
            return modes.pop(), StateSchema.decode(raw, state)
    raise UnknownStateError(f"function {function!r} has no operator state {state!r} "
                            f"(operator states: {', '.join(sorted(seen)) or 'none'})")


def _states(store: VersionedStore, keyspace: bytes) -> Iterator[tuple[int, bytes, bytes]]:
    for key, _ in store.iterate(*modes_range(keyspace)):
        yield split_key(key, keyspace)


class _Reader:
    """One operator state's rows in one partition store (pickled to the tasks)."""

    def __init__(self, state: str, mode: int, record: StateSchema, keyspace: bytes, allow_pickle: bool) -> None:
        self.state, self.mode, self.record, self.keyspace = state, mode, record, keyspace
        self.allow_pickle = allow_pickle

    def rows(self, store: VersionedStore, partition: int) -> Iterator[tuple[Any, ...]]:
        value = serializer_of(self.record.value, self.state, self.allow_pickle)
        key_snapshot = self.record.key if self.mode == MODE_BROADCAST else None
        key = serializer_of(key_snapshot, self.state, self.allow_pickle) if key_snapshot is not None else None
        prefix = state_prefix(self.mode, self.state, self.keyspace)
        for entry, raw in store.iterate(prefix, prefix_upper_bound(prefix)):
            suffix = entry[len(prefix):]
            place = key.deserialize(suffix) if key is not None else INDEX.unpack(suffix)[0]
            yield place, value.deserialize(raw)

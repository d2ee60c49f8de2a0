"""A keyed function's state as a batch DataFrame, read by partition store in Spark tasks.

::

    from spark_state.state_data import read_keyed_state, read_timers
    read_keyed_state(spark, "/ckpt", "counts")                    # key columns, value, partition_id
    read_keyed_state(spark, "/ckpt", "events", flatten_collection_types=True)  # ..., index, value, partition_id
    read_timers(spark, "/ckpt", function="Sessions", batch=12)    # key columns, domain,
                                                                  # expiration_timestamp_ms, partition_id

Rows (columns after the key columns, which keep their recorded names and types; ``partition_id``,
the partition store's, last as in Spark's ``statestore`` reader):

* value, reducing and aggregating state: ``value``;
* list state: ``value`` (an array); flattened, ``index`` (int, oldest first) and ``value``;
* map state: ``value`` (a map); flattened, ``map_key`` and ``value``.

One row per key that has a value (flattened: per element or entry). The default is a row per
key, unlike Spark's reader (whose ``flattenCollectionTypes`` defaults to true; so does the data
source, :mod:`..datasource.options`): a row per key is the form :class:`~..writers.transform.SavepointTransform`
writes back. Types come from the state's schema record (the serializer's canonical type: ``int``
state reads as ``bigint``); values whose TTL has expired when the read starts are left out, as for
lookups (:mod:`..codecs`).

How. The driver reads batch ``b``'s layout (its parallelism ``n``) and, from the first
partition store that has it, the state's schema record (for the DataFrame's schema); then one
Spark task per partition store (:mod:`..partition_jobs`) loads that store's committed copy of
batch version ``b + 1`` and scans the state's entries key group by key group (``[kg][name]``
prefixes; layout in :mod:`spark_state.keys.keyed`). Nothing is written; a running query is not
disturbed, and only committed batches are read.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator, Mapping, Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ...deprecation import renamed_arguments
from ...engine.store import VersionedStore, prefix_upper_bound
from ...keys import keyed as K
from ...keys import timers as TK
from ...process.keycodec import key_decoder
from ...state.schema import StateSchema
from ...state.type_strings import spark_type_of
from ..codecs import SINGLE_VALUE_KINDS
from ..errors import StateDataError, UnreadableStateError
from ..location.records import each_store_records, find_state_record, state_codec
from ..location.partitions import Partitions, function_partitions
from ..partition_jobs import PARTITION_ID, PartitionJob, run_job

__all__ = ["plan_keyed_state", "plan_timers", "read_keyed_state", "read_timers"]

#: The domains of timers, as ``read_timers`` names them.
DOMAINS = {TK.EVENT_TIME: "event_time", TK.PROCESSING_TIME: "processing_time"}


@renamed_arguments(exploded="flatten_collection_types")
def read_keyed_state(spark: SparkSession, path: str, state: str, *, function: Optional[str] = None,
                     batch: Optional[int] = None, flatten_collection_types: bool = False,
                     storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
                     process_locations: Optional[Mapping[str, str]] = None, allow_pickle: bool = False) -> DataFrame:
    """Keyed state ``state`` of a query's keyed function after ``batch`` (default: the last
    committed batch) as a DataFrame (see the module docstring for its rows). Options as for
    :class:`~.lookup.StateLookup`. ``path`` is a checkpoint, or a savepoint's directory: its batch.

    :raises UnknownStateError: no such function or state (the message lists what there is).
    :raises UnreadableStateError: pickled values without ``allow_pickle``, or a custom
        serializer's values (a DataFrame needs a Spark type: read them with lookups).
    """
    return run_job(spark, plan_keyed_state(path, state, function=function, batch=batch,
                                           flatten_collection_types=flatten_collection_types,
                                           storage_options=storage_options, process_root=process_root,
                                           process_locations=process_locations, allow_pickle=allow_pickle))


def plan_keyed_state(path: str, state: str, *, function: Optional[str] = None, batch: Optional[int] = None,
                     flatten_collection_types: bool = False, storage_options: Optional[Mapping[str, str]] = None,
                     process_root: Optional[str] = None, process_locations: Optional[Mapping[str, str]] = None,
                     allow_pickle: bool = False) -> PartitionJob:
    """:func:`read_keyed_state`'s job (driver side; no Spark session needed)."""
    parts, name = function_partitions(path, function, batch, storage_options, process_root, process_locations)[:2]
    record = state_record(parts, state, name)
    schema = state_schema(parts.key_fields, state, record, flatten_collection_types)
    reader = _StateReader(parts, state, record.kind, flatten_collection_types, int(time.time() * 1000), allow_pickle)
    return parts.job(schema, reader.rows)


def read_timers(spark: SparkSession, path: str, *, function: Optional[str] = None, batch: Optional[int] = None,
                storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
                process_locations: Optional[Mapping[str, str]] = None) -> DataFrame:
    """The timers a keyed function has registered and not fired after ``batch``: the key
    columns, ``domain`` (``event_time`` or ``processing_time``), ``expiration_timestamp_ms`` and
    ``partition_id``. ``path`` is a checkpoint, or a savepoint's directory."""
    return run_job(spark, plan_timers(path, function=function, batch=batch, storage_options=storage_options,
                                      process_root=process_root, process_locations=process_locations))


def plan_timers(path: str, *, function: Optional[str] = None, batch: Optional[int] = None,
                storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
                process_locations: Optional[Mapping[str, str]] = None) -> PartitionJob:
    """:func:`read_timers`' job (driver side)."""
    parts, _ = function_partitions(path, function, batch, storage_options, process_root, process_locations)[:2]
    added = (T.StructField("domain", T.StringType(), False),
             T.StructField("expiration_timestamp_ms", T.LongType(), False), PARTITION_ID)
    _check_names([f.name for f in parts.key_fields], [f.name for f in added])
    schema = T.StructType(list(parts.key_fields) + list(added))
    decode = row_key(parts.key_fields)

    def timers(store: VersionedStore, partition: int) -> Iterator[tuple]:
        for kg in parts.key_groups(partition):
            for domain, name in DOMAINS.items():
                start = TK.domain_prefix(kg, domain)
                for key, _ in store.iterate(start, prefix_upper_bound(start)):
                    ts, key_bytes = TK.timestamp_and_key(key)
                    yield decode(key_bytes) + (name, ts)

    return parts.job(schema, timers)


# ------------------------------------------------------------------------------ driver side
def state_record(parts: "Partitions", state: str, function: str) -> StateSchema:
    """The state's schema record, from the first partition store that has one (each store
    records the states it holds; a partition without keys of the state has none)."""
    return find_state_record(each_store_records(parts.store, parts.layout.parallelism), state, function)


def state_schema(key_fields: tuple[T.StructField, ...], state: str, record: StateSchema,
                  flatten_collection_types: bool) -> T.StructType:
    """The rows' schema: the key columns, the value column(s) and ``partition_id``."""
    flat = flatten_collection_types
    value = value_type(record.value, state)
    fields = list(key_fields)
    if record.kind in SINGLE_VALUE_KINDS:
        extra = [T.StructField("value", value, True)]
    elif record.kind == "list":
        extra = ([T.StructField("index", T.IntegerType(), False), T.StructField("value", value, True)] if flat
                 else [T.StructField("value", T.ArrayType(value, True), True)])
    elif record.kind == "map":
        assert record.key is not None
        map_key = value_type(record.key, state)
        extra = ([T.StructField("map_key", map_key, False), T.StructField("value", value, True)] if flat
                 else [T.StructField("value", T.MapType(map_key, value, True), True)])
    else:
        raise UnreadableStateError(f"state {state!r} is of kind {record.kind!r}, which this release cannot read")
    extra.append(PARTITION_ID)
    _check_names([f.name for f in fields], [f.name for f in extra])
    return T.StructType(fields + extra)


def value_type(snapshot: dict, state: str) -> T.DataType:
    """The Spark type of a state's values from its serializer snapshot (:func:`spark_type_of`),
    or :class:`UnreadableStateError` when they have none."""
    value = spark_type_of(snapshot)
    if value is None:
        raise UnreadableStateError(
            f"state {state!r} is serialized by {snapshot.get('class') or snapshot.get('codec')}, whose values have "
            "no Spark type: read them one key at a time with spark_state.state_data.StateLookup")
    return value


def _check_names(key_columns: list[str], added: "list[str] | tuple[str, ...]") -> None:
    clash = sorted(set(key_columns) & set(added))
    if clash:
        raise StateDataError(
            f"the key column(s) {clash} have the name of a column the reader adds ({', '.join(added)}), so the "
            "DataFrame cannot have both; read this state one key at a time with spark_state.state_data.StateLookup")


# ------------------------------------------------------------------------------ task side
def row_key(fields: tuple[T.StructField, ...]) -> Callable[[bytes], tuple]:
    """Key bytes -> the key columns' values, as a tuple."""
    decode = key_decoder(fields)
    if len(fields) == 1:
        return lambda data: (decode(data),)
    return lambda data: tuple(decode(data))


class _StateReader:
    """Rows of one state in one partition store (pickled to the tasks)."""

    def __init__(self, parts: Partitions, state: str, kind: str, flatten: bool, now_ms: int,
                 allow_pickle: bool) -> None:
        self.parts = parts
        self.state = state
        self.kind = kind
        self.flatten = flatten
        self.now_ms = now_ms
        self.allow_pickle = allow_pickle

    def rows(self, store: VersionedStore, partition: int) -> Iterator[tuple]:
        name = self.state.encode("utf-8")
        codec = state_codec(store, self.state, self.allow_pickle)
        if codec is None:  # no key of this partition has (had) the state
            return
        decode = row_key(self.parts.key_fields)
        for kg in self.parts.key_groups(partition):
            prefix = K.key_group_bytes(kg) + K.name_part(name)
            for key_bytes, base_len, entries in by_key(store, prefix):
                found, value = codec.value_of(base_len, entries, self.now_ms)
                if not found:
                    continue
                key = decode(key_bytes)
                if not self.flatten or self.kind in SINGLE_VALUE_KINDS:
                    yield key + (value,)
                elif self.kind == "list":
                    yield from (key + (i, v) for i, v in enumerate(value))
                else:
                    yield from (key + (k, v) for k, v in value.items())


def by_key(store: VersionedStore, prefix: bytes) -> Iterator[tuple[bytes, int, list[tuple[bytes, bytes]]]]:
    """``(key bytes, base key length, entries)`` per key under ``prefix`` (``[kg][name]``), in key order."""
    start = len(prefix)
    base: Optional[bytes] = None
    entries: list[tuple[bytes, bytes]] = []
    for key, value in store.iterate(prefix, prefix_upper_bound(prefix)):
        (klen,) = K.KEY_LENGTH.unpack_from(key, start)
        end = start + K.KEY_LENGTH.size + klen
        if base is None or len(base) != end or not key.startswith(base):
            if base is not None:
                yield base[start + K.KEY_LENGTH.size:], len(base), entries
            base, entries = key[:end], []
        entries.append((key, value))
    if base is not None:
        yield base[start + K.KEY_LENGTH.size:], len(base), entries

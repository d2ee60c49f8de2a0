"""Every state of each key in one pass (Flink's ``KeyedStateReaderFunction``): the user's function
sees a key with all its states and yields rows, so no join of one DataFrame per state is needed.

::

    from spark_state.state_data import read_keyed_states

    def summary(key, states):                  # states: {"count": 7, "recent": [3, 4], ...}
        yield key, states.get("count", 0), len(states.get("recent", []))

    read_keyed_states(spark, "/ckpt", summary, "user string, n bigint, recent int")
    # user, n, recent, partition_id

``key`` is the key as the function sees it (``ctx.current_key``: a value for one key column, a
tuple for several). ``states`` maps the name of each keyed state the key has a value in to that
value, as :func:`~.keyed_state.read_keyed_state` shows it (a list's array, a map's dict; values whose TTL
has expired are left out); ``states=`` limits which (default: every keyed state a partition
store records). Keys without any value are not shown. The rows the function yields are of
``schema``; ``partition_id`` is added last, as in every reader.

How. One Spark task per partition store (:mod:`..partition_jobs`) loads the store at the batch and,
key group by key group, walks the entries of each state under its ``[kg][name]`` prefix (layout:
:mod:`spark_state.keys.keyed`). Within a prefix keys sort by ``(length, bytes)`` of the
serialized key, the same for every state, so the walks merge into one pass in key order; memory
holds one key's entries of each state. A checkpoint (default: its last committed batch) or a
savepoint.
"""

from __future__ import annotations

import heapq
import itertools
import time
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ...engine.store import VersionedStore
from ...keys import keyed as K
from ..codecs import StateCodec
from ..errors import StateDataError
from ..location.records import each_store_records, find_state_records, keyed_records, state_codec
from ..partition_jobs import PARTITION_ID, run_job
from ..location.partitions import Partitions, function_partitions
from .keyed_state import by_key, row_key

__all__ = ["read_keyed_states"]

#: The user's function: ``(key, {state name: value})`` -> rows of the schema.
KeyReader = Callable[[Any, Mapping[str, Any]], Iterable[Sequence[Any]]]


def read_keyed_states(spark: SparkSession, path: str, reader: KeyReader, schema: Union[T.StructType, str], *,
                      states: Optional[Sequence[str]] = None, function: Optional[str] = None,
                      batch: Optional[int] = None, storage_options: Optional[Mapping[str, str]] = None,
                      process_root: Optional[str] = None, process_locations: Optional[Mapping[str, str]] = None,
                      allow_pickle: bool = False) -> DataFrame:
    """``reader``'s rows over each key of a keyed function with all its states (see the module
    docstring). ``schema``: the rows' schema, a ``StructType`` or DDL; options as for
    :func:`~.keyed_state.read_keyed_state`.

    :raises StateDataError: ``schema`` has a ``partition_id`` column (the reader adds it).
    :raises UnknownStateError: no such function, or a name in ``states`` that no partition store
        records (the message lists the states there are)."""
    if isinstance(schema, str):
        parsed = T._parse_datatype_string(schema)
        schema = parsed if isinstance(parsed, T.StructType) else T.StructType([T.StructField("value", parsed)])
    if PARTITION_ID.name in schema.fieldNames():
        raise StateDataError(f"the schema has a column {PARTITION_ID.name!r}, which the reader adds: rename it")
    parts, name = function_partitions(path, function, batch, storage_options, process_root, process_locations)[:2]
    if states is not None:  # a name no store records is a typo, not a key without a value
        find_state_records(each_store_records(parts.store, parts.layout.parallelism), states, name)
    walk = _KeyWalk(parts, tuple(states) if states is not None else None, reader, int(time.time() * 1000),
                    allow_pickle, schema)
    return run_job(spark, parts.job(T.StructType(list(schema.fields) + [PARTITION_ID]), walk.rows))


class _KeyWalk:
    """One partition store's keys with their states, handed to the user's reader (pickled)."""

    def __init__(self, parts: Partitions, states: Optional[tuple[str, ...]], reader: KeyReader, now_ms: int,
                 allow_pickle: bool, schema: T.StructType) -> None:
        self.parts, self.states, self.reader = parts, states, reader
        self.now_ms, self.allow_pickle = now_ms, allow_pickle
        self.columns = len(schema.fields)
        self.schema_ddl = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schema.fields)

    def rows(self, store: VersionedStore, partition: int) -> Iterator[tuple]:
        names = self.states if self.states is not None else tuple(sorted(keyed_records(store)))
        codecs = {n: c for n in names if (c := state_codec(store, n, self.allow_pickle)) is not None}
        decode = row_key(self.parts.key_fields)
        single = len(self.parts.key_fields) == 1
        for kg in self.parts.key_groups(partition):
            for key_bytes, found in _merged(store, kg, codecs, self.now_ms):
                values = decode(key_bytes)
                for row in self.reader(values[0] if single else values, found):
                    yield self._checked(row)

    def _checked(self, row: Any) -> tuple:
        """``row`` (any iterable of values but a string or a mapping) as a tuple of the schema's
        length; else an error naming the function, the schema and the row (pyarrow's own would
        name none of them)."""
        values: Optional[tuple] = None
        if not isinstance(row, (str, bytes, Mapping)):
            try:
                values = tuple(row)
            except TypeError:
                pass
        if values is None:
            problem = f"a {type(row).__name__}, not a tuple of values"
        elif len(values) != self.columns:
            problem = f"{len(values)} values"
        else:
            return values
        name = getattr(self.reader, "__qualname__", repr(self.reader))
        raise StateDataError(
            f"read_keyed_states: the reader function {name} yielded {problem} for the schema "
            f"'{self.schema_ddl}' ({self.columns} columns; partition_id is added by the reader): {row!r:.200}")


def _merged(store: VersionedStore, kg: int, codecs: Mapping[str, StateCodec],
            now_ms: int) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """``(key bytes, {state: value})`` per key of key group ``kg`` that has a value in one of the
    states, in key order: the states' walks (each in ``(length, bytes)`` order) merged."""

    def walk(name: str, codec: StateCodec) -> Iterator[tuple[int, bytes, str, Any]]:
        prefix = K.key_group_bytes(kg) + K.name_part(name.encode("utf-8"))
        for key_bytes, base_len, entries in by_key(store, prefix):
            found, value = codec.value_of(base_len, entries, now_ms)
            if found:
                yield len(key_bytes), key_bytes, name, value

    merged = heapq.merge(*(walk(n, c) for n, c in codecs.items()), key=lambda item: (item[0], item[1]))
    for key_bytes, group in itertools.groupby(merged, key=lambda item: item[1]):
        yield key_bytes, {name: value for _, _, name, value in group}

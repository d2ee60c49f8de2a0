"""The changes a keyed function's batches made to one of its states, as a batch DataFrame.

::

    from spark_state.state_data import read_change_feed
    read_change_feed(spark, "/ckpt", "count", start_batch=3, end_batch=7).show()

Rows, in batch order per key: ``batch_id`` (the batch that made the change), ``change_type``
(``update``: the key's value after the batch; ``delete``: the batch removed it, or its TTL
expired), the key columns, and ``value`` as :func:`~.keyed_state.read_keyed_state` shows it (a list
state's whole array, a map state's whole map; null for ``delete``), then ``partition_id``. One row per key a batch
changed; a key written twice in one batch has one row. This is Spark's change feed of the
``statestore`` reader (``readChangeFeed``), for the state of keyed functions.

How. Every committed version of a partition store has a changelog: the keys the batch put or
deleted (:mod:`spark_state.checkpoint.changelog`). One Spark task per partition store loads the
store at the state before ``start_batch``, then for each batch loads the next version (which
replays that one changelog), takes the keys of the state it names, and reads their values after
the batch (in key order, each once: at most 65,536 of a batch's changed keys in memory, the rest
sorted on local disk). Only committed batches are read. A version written by an operations tool (restore,
rescale, erasure) has no changelog of the batch's changes: a range that covers one is refused,
naming the batch; so is a range over a new layout (a change of parallelism, a restore or an
erasure writes one): it starts at the batch after the layout's first.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping, Optional

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ...checkpoint.runs import RunContext, RunRegistry
from ...engine.changes import ToolWrittenVersionError, committed_changes
from ...engine.spill import SORT_IN_MEMORY, external_sort
from ...engine.store import VersionedStore, prefix_upper_bound
from ...keys import keyed as K
from ...keys.system import SYSTEM_PREFIX
from ...ops.state_io import process_layout, reader_config
from ...process import location as L
from ...storage import open_storage
from ..errors import StateDataError
from ..location.functions import KeyedSource
from ..location.records import state_codec
from ..location.savepoints import is_savepoint
from ..partition_jobs import PartitionJob, chunked, run_job
from ..read_options import OptionError
from ..location.partitions import Partitions
from .keyed_state import row_key, state_record, state_schema

__all__ = ["plan_change_feed", "read_change_feed"]

UPDATE, DELETE = "update", "delete"
#: Changed keys of one batch a task sorts in memory; more go through an external sort on local disk.
CHANGED_KEYS_IN_MEMORY = SORT_IN_MEMORY
#: The columns the feed adds before the key columns.
FEED_COLUMNS = (T.StructField("batch_id", T.LongType(), False), T.StructField("change_type", T.StringType(), False))


def read_change_feed(spark: SparkSession, path: str, state: str, *, start_batch: int,
                     end_batch: Optional[int] = None, function: Optional[str] = None,
                     storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
                     process_locations: Optional[Mapping[str, str]] = None, allow_pickle: bool = False) -> DataFrame:
    """The changes batches ``start_batch..end_batch`` (default: the last committed batch) made
    to keyed state ``state`` (see the module docstring). Options as for
    :func:`~.keyed_state.read_keyed_state`.

    :raises StateDataError: a bad range, or one over a tool-written version or a layout change.
    :raises UnknownStateError: no such function or state."""
    return run_job(spark, plan_change_feed(path, state, start_batch=start_batch, end_batch=end_batch,
                                           function=function, storage_options=storage_options,
                                           process_root=process_root, process_locations=process_locations,
                                           allow_pickle=allow_pickle))


def plan_change_feed(path: str, state: str, *, start_batch: int, end_batch: Optional[int] = None,
                     function: Optional[str] = None, storage_options: Optional[Mapping[str, str]] = None,
                     process_root: Optional[str] = None, process_locations: Optional[Mapping[str, str]] = None,
                     allow_pickle: bool = False) -> PartitionJob:
    """:func:`read_change_feed`'s job (driver side; no Spark session needed)."""
    if is_savepoint(path, storage_options):
        raise StateDataError(f"{path} is a savepoint, which holds one batch and no changes: read the change "
                             "feed of the checkpoint it was taken from")
    source = KeyedSource.find(path, function=function, storage_options=storage_options,
                              process_root=process_root, process_locations=process_locations)
    end = source.committed_batch(end_batch)
    if isinstance(start_batch, bool) or not isinstance(start_batch, int) or not 0 <= start_batch <= end:
        raise OptionError("start_batch", "the change feed's first batch ({option}) must be a batch id from 0 to "
                                         f"the end batch {end}, got {start_batch!r}")
    layout = process_layout(source.storage, end + 1)
    if layout.base > 0 and start_batch <= layout.base:
        # The layout's store version 0 is empty, not the state before batch `base`: that is in the
        # layout before it (batch `base` rescaled, or a tool wrote a new layout there).
        raise StateDataError(
            f"the state of {source.function!r} was rewritten into a new layout at batch {layout.base} (a change of "
            "parallelism, a restore or an erasure), which records no changes of that batch; a change feed reads "
            f"one layout: start at batch {layout.base + 1} or later")
    parts = Partitions(source.location.url, source.storage_options, layout, end + 1, source.max_parallelism,
                       tuple(source.key_columns.fields))
    record = state_record(parts, state, source.function)
    schema = T.StructType(list(FEED_COLUMNS) + list(state_schema(parts.key_fields, state, record, False).fields))
    feed = _Feed(parts, state, start_batch, end, int(time.time() * 1000), allow_pickle)
    return PartitionJob(schema, layout.parallelism, feed.rows)


@dataclass(frozen=True)
class _Feed:
    """One state's changes in one partition store (pickled to the tasks)."""

    parts: Partitions
    state: str
    start: int
    end: int
    now_ms: int
    allow_pickle: bool

    def rows(self, partition: int) -> Iterator[list[tuple]]:
        try:
            yield from chunked(self._changes(partition))
        except ToolWrittenVersionError as exc:
            raise StateDataError(str(exc)) from None

    def _changes(self, partition: int) -> Iterator[tuple]:
        parts = self.parts
        storage = open_storage(parts.url, dict(parts.storage_options))
        layout: L.Layout = parts.layout
        local = tempfile.mkdtemp(prefix="spark-state-feed-")
        runs = RunContext(RunRegistry(storage), None, layout.base)
        store = VersionedStore(storage.child(layout.store_path(partition)), reader_config(local_dir=local), runs=runs)
        try:
            name = self.state.encode("utf-8")
            decode = row_key(parts.key_fields)
            first = layout.store_version(self.start + 1)
            for changed in committed_changes(store, first, layout.store_version(self.end + 1)):
                batch = self.start + changed.version - first
                codec = state_codec(store, self.state, self.allow_pickle)
                if codec is None:  # the state has no values in this store: nothing of it changed
                    close = getattr(changed.changes, "close", None)
                    if close is not None:
                        close()
                    continue
                for base, key_bytes in changed_keys(changed.changes, name, local):
                    entries = list(store.iterate(base, prefix_upper_bound(base)))
                    found, value = codec.value_of(len(base), entries, self.now_ms) if entries else (False, None)
                    key = decode(key_bytes)
                    yield (batch, UPDATE if found else DELETE) + key + (value if found else None,)
        finally:
            store.close()
            shutil.rmtree(local, ignore_errors=True)


def changed_keys(changes: Iterable[tuple[bytes, Optional[bytes]]], name: bytes, scratch_dir: str,
                 in_memory: int = CHANGED_KEYS_IN_MEMORY) -> Iterator[tuple[bytes, bytes]]:
    """``(base key, key bytes)`` of each key of state ``name`` that a changelog touches (the base
    key is an entry key without its suffix, :mod:`spark_state.keys.keyed`), in key order, each once.
    ``changes`` is read to its end before the first pair comes out (its version stays loaded).

    Memory: at most ``in_memory`` keys (:func:`~spark_state.engine.spill.external_sort` under
    ``scratch_dir``)."""
    def touched() -> Iterator[tuple[bytes, bytes]]:
        for key, _ in changes:
            if key[:1] == SYSTEM_PREFIX or key[0] >= 0x80 or K.state_name_of(key) != name:
                continue
            _, _, key_bytes, suffix = K.split_entry(key)
            yield key[:len(key) - len(suffix)], key_bytes

    return external_sort(touched(), scratch_dir, in_memory)

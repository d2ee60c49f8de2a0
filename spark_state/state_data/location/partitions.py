"""The partition stores a reader of one function's state reads, whichever kind of path it was given.

:func:`function_partitions` is the one place where a reader of a function's state tells a
checkpoint from a savepoint: a checkpoint's stores are the function's state location at a
committed batch (batch ``b``'s state is batch version ``b + 1``), a savepoint's are its state
files of the function, loaded into temporary stores by the tasks; ``batch``, if given, must be
one the path holds. :class:`Partitions` is what the tasks get (pickled): where the stores are,
the layout and version, the key groups of each partition.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Optional

from pyspark.sql import types as T

from ...engine.store import VersionedStore
from ...ops.checkpoint_reader import SparkCheckpoint
from ...ops.process_locations import find_process_locations
from ...ops.state_io import open_committed, process_layout, reader_config
from ...partitioning.keygroups import compute_key_group_range_for_operator_index
from ...process import location as L
from ...process.plan import KEYED
from ...storage import CheckpointStorage, open_storage
from ..partition_jobs import PartitionJob, chunked
from .functions import KeyedSource, choose, keyed_locations
from .savepoints import SavepointSource, is_savepoint, savepoint_batch

__all__ = ["Partitions", "function_partitions"]


@dataclass(frozen=True)
class Partitions:
    """What a task needs to open partition stores of one committed batch (pickled to the tasks)."""

    url: str
    storage_options: Mapping[str, str]
    layout: L.Layout
    version: int
    max_parallelism: int
    key_fields: tuple[T.StructField, ...]
    #: the stores are a savepoint's state files of this function (loaded into temporary stores)
    savepoint: Optional[SavepointSource] = None

    def key_groups(self, partition: int) -> range:
        kg = compute_key_group_range_for_operator_index(self.max_parallelism, self.layout.parallelism, partition)
        return range(kg.start, kg.end + 1)

    @contextmanager
    def store(self, partition: int, storage: Optional[CheckpointStorage] = None) -> Iterator[VersionedStore]:
        """Partition ``partition``'s store, loaded at the batch in a temporary directory (read only)."""
        local = tempfile.mkdtemp(prefix="spark-state-read-")
        if self.savepoint is not None:
            store = self.savepoint.load(partition, local)
        else:
            storage = storage or open_storage(self.url, dict(self.storage_options))
            store = open_committed(storage.child(self.layout.store_path(partition)),
                                   self.layout.store_version(self.version), reader_config(local_dir=local),
                                   self.layout.base, registry=storage)
        try:
            yield store
        finally:
            store.close()
            shutil.rmtree(local, ignore_errors=True)

    def job(self, schema: T.StructType,
            read: Callable[[VersionedStore, int], Iterable[tuple]]) -> PartitionJob:
        """The job that gives ``read(store, partition)``'s rows of each partition store."""

        def rows(partition: int) -> Iterator[list[tuple]]:
            with self.store(partition) as store:
                yield from chunked(read(store, partition))

        return PartitionJob(schema, self.layout.parallelism, rows)


def function_partitions(path: str, function: Optional[str], batch: Optional[int],
                        storage_options: Optional[Mapping[str, str]], process_root: Optional[str],
                        process_locations: Optional[Mapping[str, str]],
                        kind: str = KEYED) -> tuple[Partitions, str, str]:
    """The partition stores of function ``function`` (optional when the path has one function of
    ``kind``: ``keyed``, or ``function`` for any kind) at ``batch`` (default: the last committed;
    a savepoint's batch), its name and its kind. A keyed function's partitions know its key
    columns; another's have none.

    :raises UnknownStateError: no such function, none, or several and none named.
    :raises OptionError: a batch the savepoint does not hold."""
    options = dict(storage_options or {})
    if is_savepoint(path, options):
        sp = (SavepointSource.open(path, function, options) if kind == KEYED
              else SavepointSource.open_any(path, function, options))
        savepoint_batch(sp.url, sp.manifest, batch)
        entry = sp.entry
        held = tuple(sp.key_columns.fields) if entry.kind == KEYED and entry.key else ()
        parts = Partitions(sp.url, options, L.Layout(entry.parallelism, 0), sp.manifest.state_version,
                           entry.max_parallelism or 1, held, sp)
        return parts, entry.name, entry.kind
    ckpt = SparkCheckpoint(path, options)
    found = (keyed_locations(ckpt, options, process_root, process_locations) if kind == KEYED else
             find_process_locations(ckpt.storage, ckpt.query_id(), process_root, dict(process_locations or {}),
                                    options))
    loc = choose(found, function, ckpt, process_root, process_locations,
                 kind="keyed function" if kind == KEYED else "function")
    version = ckpt.committed_batch(batch) + 1
    if loc.kind == KEYED:  # its key columns and max parallelism, as every reader of keyed state sees them
        source = KeyedSource(ckpt, loc)
        storage, key_fields, max_parallelism = source.storage, tuple(source.key_columns.fields), source.max_parallelism
    else:
        storage, key_fields, max_parallelism = loc.storage(), (), loc.max_parallelism or 1
    parts = Partitions(loc.url, dict(loc.storage_options), process_layout(storage, version), version,
                       max_parallelism, key_fields)
    return parts, loc.name, loc.kind

"""Task side of a keyed bootstrap or transform: one partition of rows through the keyed loop.

A bootstrap task runs in a *batch* job (:mod:`.bootstrap`), one per partition of the
streaming function's layout; the history is routed exactly as the streaming query routes its
rows (key group ``pmod(hash(key), max_parallelism)``, partition by Flink's operator index).
The task

1. opens an empty store at batch version 0 in a local temporary directory of the executor
   (the state never lives there longer than the task) -- or, for a transform
   (:mod:`.transform`), a store holding the savepoint partition's entries without those of the
   states it replaces (:class:`BaseEntries`);
2. runs the keyed loop (:mod:`spark_state.process.keyed_loop`) over its rows with a plan whose
   time phase registers timers for the restoring query and fires none; the function's output
   is dropped;
3. writes the committed store's entries, in key order, as the savepoint's state file
   ``process/<name>/<partition>.arrow`` with the savepoint's own writer, in bounded memory
   (:func:`spark_state.ops.state_files.write_state_file`), and returns
   one row describing it: partition, path, size, CRC-32, rows, data keys, and the names of
   the batch's event-time maxima files (the restoring query's first watermark).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Optional

import pyarrow as pa

from ..engine.store import VersionedStore
from ..ops import savepoint_format as F
from ..ops.state_files import write_state_file
from ..process.clock import maxima_dir
from ..process.functions import KeyedBroadcastProcessFunction, KeyedCoProcessFunction, KeyedProcessFunction
from ..process.keyed_loop import keyed_loop
from ..process.location import Layout
from ..process.plan import ProcessPlan
from ..process.stores import CACHE, PartitionStore
from ..state.regroup import owned_key_groups
from ..storage import CheckpointStorage, open_storage
from .surgery import BaseEntries

#: What each bootstrap task returns (one row): its partition, the manifest entry of the state file it
#: wrote (:data:`~spark_state.ops.savepoint_format.FILE_ENTRY_FIELDS`), its input rows and the names
#: of its event-time maxima files.
RESULT_SCHEMA = pa.schema([pa.field("partition", pa.int32()), *F.FILE_ENTRY_FIELDS,
                           pa.field("input_rows", pa.int64()), pa.field("maxima", pa.list_(pa.string()))])
RESULT_DDL = f"partition int, {F.FILE_ENTRY_DDL}, input_rows bigint, maxima array<string>"


class OutputDropped(KeyedProcessFunction):
    """The bootstrap function as the keyed loop calls it: a key's rows go to its
    ``process_elements`` (whose default calls ``process_element`` per row); the output is
    consumed (a generator runs to its end) and dropped. ``open`` and ``close`` are its own."""

    def __init__(self, function: KeyedProcessFunction) -> None:
        self.function = function

    def open(self, ctx: Any) -> None:
        self.function.open(ctx)

    def close(self) -> None:
        self.function.close()

    def process_elements(self, rows: list, ctx: Any) -> Iterable[Any]:
        return _drained(self.function.process_elements(rows, ctx))


class CoOutputDropped(KeyedCoProcessFunction):
    """A ``keyed_co_process`` bootstrap function as the keyed loop calls it: each side's rows go
    to its ``process_element1`` / ``process_element2``; the output is consumed and dropped."""

    def __init__(self, function: KeyedCoProcessFunction) -> None:
        self.function = function

    def open(self, ctx: Any) -> None:
        self.function.open(ctx)

    def close(self) -> None:
        self.function.close()

    def process_element1(self, row: Any, ctx: Any) -> Iterable[Any]:
        return _drained(self.function.process_element1(row, ctx))

    def process_element2(self, row: Any, ctx: Any) -> Iterable[Any]:
        return _drained(self.function.process_element2(row, ctx))


class BroadcastOutputDropped(KeyedBroadcastProcessFunction):
    """A ``keyed_broadcast_process`` bootstrap function as the keyed loop calls it: the
    broadcast rows go to ``process_broadcast_element`` (before the keyed rows), the keyed rows
    to ``process_element``; the output is consumed and dropped."""

    def __init__(self, function: KeyedBroadcastProcessFunction) -> None:
        self.function = function

    def open(self, ctx: Any) -> None:
        self.function.open(ctx)

    def close(self) -> None:
        self.function.close()

    def process_broadcast_element(self, row: Any, ctx: Any) -> Iterable[Any]:
        return _drained(self.function.process_broadcast_element(row, ctx))

    def process_element(self, row: Any, ctx: Any) -> Iterable[Any]:
        return _drained(self.function.process_element(row, ctx))


def _drained(produced: Optional[Iterable[Any]]) -> Iterable[Any]:
    """Run a generator of output rows to its end (its state changes happen as it runs); no rows."""
    if produced is not None:
        for _ in produced:
            pass
    return ()


@dataclass(frozen=True)
class _Task:
    """What the keyed loop and its time phase read from a task (as :class:`~spark_state.process.runner._Task`)."""

    batch_id: int
    partition: int
    url: str
    storage: CheckpointStorage
    runs: Optional[Any] = None


def bootstrap_partition(plan: ProcessPlan, name: str, savepoint_url: str, storage_options: Mapping[str, str],
                        batches: Iterator[pa.RecordBatch],
                        base: Optional[BaseEntries] = None) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body of a keyed bootstrap or transform (see the module docstring)."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    partition = tc.partitionId() if tc is not None else 0
    assert plan.max_parallelism is not None
    work = tempfile.mkdtemp(prefix="spark-state-bootstrap-")
    # Local copies of state files read and the spool of the one written: beside the store, not in it.
    scratch = tempfile.mkdtemp(prefix="spark-state-bootstrap-scratch-")
    store: Optional[VersionedStore] = None
    try:
        storage = open_storage(work)
        layout = Layout(plan.parallelism, 0)
        store = VersionedStore(storage.child(layout.store_path(partition)), plan.engine)
        if base is None:
            store.load(0)
        else:
            store.import_version(1, base.entries(partition, scratch))
        ps = PartitionStore(storage.url, partition, layout, store, "new", 0, storage)
        counted = _Counted(batches)
        task = _Task(0, partition, storage.url, storage)
        for _ in keyed_loop(plan, task, ps, owned_key_groups(plan.max_parallelism, plan.parallelism, partition),
                            iter(counted)):
            pass  # output rows are dropped; the observation row too
        CACHE.take(storage.url, plan.parallelism, partition)  # the loop's commit cached it: the store is ours
        # The savepoint's one state-file writer (bounded memory; a large file spools to the
        # task's own temporary directory).
        written = write_state_file(open_storage(savepoint_url, dict(storage_options)),
                                   F.process_file(name, partition), store.iterate(), scratch_dir=scratch)
        maxima = storage.list_dir(maxima_dir(0))
        yield pa.record_batch([pa.array([partition], pa.int32()), *F.file_entry_arrays(written),
                               pa.array([counted.rows], pa.int64()),
                               pa.array([maxima], pa.list_(pa.string()))], schema=RESULT_SCHEMA)
    finally:
        if store is not None:
            store.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


class _Counted:
    """The task's input, counting its rows."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self.rows = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self._batches:
            self.rows += batch.num_rows
            yield batch

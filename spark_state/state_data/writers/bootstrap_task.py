"""Task side of a keyed bootstrap or transform: one partition of rows through the keyed loop.

A bootstrap task runs in a *batch* job (:mod:`.bootstrap`), one per partition of the
streaming function's layout; the history is routed exactly as the streaming query routes its
rows (key group ``pmod(hash(key), max_parallelism)``, partition by Flink's operator index).
The task

1. opens an empty store at batch version 0 in a local temporary directory of the executor
   (the state never lives there longer than the task) -- or, for a transform
   (:mod:`.transform`), a store holding the savepoint partition's entries without those of the
   states it replaces (:class:`BaseEntries`);
2. runs the keyed loop over its rows through the keyed runtime's offline entry
   (:func:`spark_state.process.offline.run_keyed_offline`), with a plan whose time phase
   registers timers for the restoring query and fires none; the function's output is dropped;
3. writes the committed store's entries, in key order, as the savepoint's state file
   ``process/<name>/<partition>.arrow`` with the savepoint's own writer, in bounded memory
   (:func:`spark_state.ops.state_files.write_state_file`), and returns
   one row describing it: partition, path, size, CRC-32, rows, data keys, and the names of
   the batch's event-time maxima files (the restoring query's first watermark).
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any, Iterable, Iterator, Mapping, Optional

import pyarrow as pa

from ...ops import savepoint_format as F
from ...ops.state_files import write_state_file
from ...process.functions import KeyedBroadcastProcessFunction, KeyedCoProcessFunction, KeyedProcessFunction
from ...process.offline import run_keyed_offline
from ...process.plan import ProcessPlan
from ...storage import open_storage
from .keyed_state_surgery import BaseEntries

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


def bootstrap_partition(plan: ProcessPlan, name: str, savepoint_url: str, storage_options: Mapping[str, str],
                        batches: Iterator[pa.RecordBatch], base: Optional[BaseEntries] = None,
                        partition: Optional[int] = None) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body of a keyed bootstrap or transform (see the module docstring): the
    rows of partition ``partition`` (default: the Spark task's partition, the routed job's)."""
    if partition is None:
        from pyspark import TaskContext

        tc = TaskContext.get()
        partition = tc.partitionId() if tc is not None else 0
    work = tempfile.mkdtemp(prefix="spark-state-bootstrap-")
    # Local copies of state files read and the spool of the one written: beside the store, not in it.
    scratch = tempfile.mkdtemp(prefix="spark-state-bootstrap-scratch-")
    try:
        start = None if base is None else base.entries(partition, scratch)
        with run_keyed_offline(plan, partition, open_storage(work), batches, start) as run:
            # The savepoint's one state-file writer (bounded memory; a large file spools to the
            # task's own temporary directory).
            written = write_state_file(open_storage(savepoint_url, dict(storage_options)),
                                       F.process_file(name, partition), run.entries(), scratch_dir=scratch)
            maxima = run.maxima()
        yield pa.record_batch([pa.array([partition], pa.int32()), *F.file_entry_arrays(written),
                               pa.array([run.input_rows], pa.int64()),
                               pa.array([maxima], pa.list_(pa.string()))], schema=RESULT_SCHEMA)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)

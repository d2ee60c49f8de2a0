"""Re-splitting provider state into another partition count, in bounded memory (shared by
restore at another count and by the in-place rewrites of :mod:`.rewrite`).

A provider data key starts with ``[key group u16][Spark hash i32]`` and the hash is Spark's own
partitioning hash of the key's partitioning columns, so a row's partition at count ``n`` is
``pmod(hash, n)`` -- exactly where Spark's ``HashPartitioning`` sends the row's input. System
keys follow the data key they name (TTL expiry index entries) or go to every partition
(per-store records such as the TTL format marker). Key layouts and the vectorised routing
over Arrow record batches (numpy on the binary array's offset and data buffers, a few
nanoseconds per row) are in :mod:`spark_state.keys.provider`; the re-split rows are spooled to
a local Arrow file (:class:`Split`), so a store of any size is re-split in bounded memory.
"""

from __future__ import annotations

import logging
import os
import tempfile
import weakref
from typing import Any, Callable, Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa

from ..arrow_chunks import batch_entries, entry_batches
from ..config import EngineConfig
from ..keys.provider import MalformedProviderKeyError, route_hashes
from . import savepoint_format as F
from .errors import UnsupportedCheckpointError
from .progress import Progress
from .state_io import import_store

_LOG = logging.getLogger(__name__)

#: Operators whose state lives in partition 0 whatever the partition count: streaming
#: ``limit`` (``StreamingGlobalLimitExec``) runs its stateful step in one task after an
#: exchange to a single partition, and its key (one null ``void`` column) hashes to the seed,
#: not to partition 0. Their rows stay in partition 0.
SINGLE_PARTITION_OPERATORS = frozenset({"globalLimit"})
#: Fault injection for tests of an interrupted rescale: the process exits abruptly after
#: writing this many partition stores. Never set it in production.
CRASH_AFTER_STORES_ENV = "SPARK_STATE_TESTING_RESCALE_EXIT_AFTER_STORES"


# ------------------------------------------------------------------------------ routing
def partition_of_rows(keys: pa.BinaryArray, n: int) -> np.ndarray:
    """Target partition of every key at count ``n``; ``-1`` for keys that go to every partition."""
    try:
        hashes, everywhere = route_hashes(keys)
    except MalformedProviderKeyError as exc:
        raise UnsupportedCheckpointError(str(exc)) from None
    parts = np.mod(hashes, n)
    parts[everywhere] = -1
    return parts


def batches_of(entries: Iterable[tuple[bytes, bytes]], rows: int = F.BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """A store's entries as record batches of the savepoint's entry schema (what :meth:`Split.add` takes)."""
    return entry_batches(entries, F.SCHEMA, rows)


class Split:
    """Rows of one store routed to ``n`` partitions, spooled to a local Arrow file.

    Bounded memory: a store's rows (every partition of it, possibly GBs) are never held. Each
    batch given to :meth:`add` is split by target partition and its parts are appended at once
    to one Arrow IPC file in ``scratch_dir`` (default: the system's temp directory); only the
    index of which record batches belong to which partition stays in memory. Reading
    (:meth:`batches`, :meth:`entries`) closes the file for writing and maps it: a partition's
    rows come back in the order they were added, one record batch at a time. :meth:`close`
    (or the end of a ``with`` block) deletes the file; a split that is dropped unclosed deletes
    it when collected."""

    def __init__(self, n: int, single_partition: bool = False, scratch_dir: Optional[str] = None) -> None:
        self.n = n
        #: every row to partition 0 (see ``SINGLE_PARTITION_OPERATORS``)
        self.single_partition = single_partition
        self.rows = 0
        self._scratch_dir = scratch_dir
        self._index: list[list[int]] = [[] for _ in range(n)]  # partition -> its batches in the file
        self._part_rows = [0] * n
        self._written = 0
        self._path: Optional[str] = None
        self._sink: Optional[pa.NativeFile] = None
        self._writer: Optional[pa.ipc.RecordBatchFileWriter] = None
        self._reader: Optional[pa.ipc.RecordBatchFileReader] = None
        self._source: Optional[pa.MemoryMappedFile] = None
        self._finalizer: Optional[weakref.finalize] = None

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        if self.single_partition:
            self._append(0, batch)
            return
        targets = partition_of_rows(batch.column(0), self.n)
        everywhere = targets == -1
        for p in range(self.n):
            mask = (targets == p) | everywhere
            if mask.any():
                self._append(p, batch.filter(pa.array(mask)))

    def _append(self, partition: int, batch: pa.RecordBatch) -> None:
        if self._reader is not None:
            raise RuntimeError("rows added to a split that is being read")
        if self._writer is None:
            fd, self._path = tempfile.mkstemp(prefix="spark-state-split-", suffix=".arrow", dir=self._scratch_dir)
            os.close(fd)
            self._finalizer = weakref.finalize(self, _remove, self._path)
            self._sink = pa.OSFile(self._path, "wb")
            self._writer = pa.ipc.new_file(self._sink, F.SCHEMA)
        self._writer.write_batch(batch)
        self._index[partition].append(self._written)
        self._part_rows[partition] += batch.num_rows
        self._written += 1

    def rows_of(self, partition: int) -> int:
        """The rows routed to ``partition``."""
        return self._part_rows[partition]

    def batches(self, partition: int) -> Iterator[pa.RecordBatch]:
        """``partition``'s rows as record batches (views of the mapped file), in the order added."""
        if not self._index[partition]:
            return
        if self._reader is None:
            assert self._writer is not None and self._sink is not None and self._path is not None
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None
            self._source = pa.memory_map(self._path)
            self._reader = pa.ipc.open_file(self._source)
        for i in self._index[partition]:
            yield self._reader.get_batch(i)

    def entries(self, partition: int) -> Iterator[tuple[bytes, bytes]]:
        for batch in self.batches(partition):
            yield from batch_entries(batch.column(0), batch.column(1))

    def close(self) -> None:
        """Delete the spooled rows (idempotent)."""
        for f in (self._writer, self._sink, self._source):
            if f is not None:
                f.close()
        self._writer = self._sink = self._source = self._reader = None
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> "Split":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_split(split: Split, store_storage: Callable[[int], Any], version: int, config: EngineConfig,
                run_id: str, progress: Optional[Progress] = None) -> int:
    """Write ``version`` of each of the split's partitions; returns the keys written."""
    keys = 0
    # A single-partition operator's other stores are never written by Spark either: a store
    # at a version its partition never runs would break the next savepoint's reads.
    for p in range(1 if split.single_partition else split.n):
        keys += import_store(store_storage(p), version, split.entries(p), config, run_id)
        _maybe_crash()
        if progress is not None:
            progress.update(split.rows_of(p))
    return keys


_stores_written = [0]


def _maybe_crash() -> None:
    limit = os.environ.get(CRASH_AFTER_STORES_ENV)
    if limit:
        _stores_written[0] += 1
        if _stores_written[0] >= int(limit):
            _LOG.error("fault injection: exiting after %d stores", _stores_written[0])
            os._exit(3)

"""The part of one epoch's pending writes that outgrew its memory share, on local disk.

When the :class:`~spark_state.engine.overlay.WriteOverlay` passes its limit it writes its entries,
sorted, as one run: an SST file ingested into a private RocksDB (rocksdict) in a temporary
directory, and starts empty again. A later run wins over an earlier one for the same key
(ingestion gives each file a newer sequence number); the overlay's dict wins over every run.
The database answers point reads (bloom filters), ordered scans (its iterator merges the runs)
and the commit's passes; it is deleted with the epoch. The JVM shim's ``SpillRuns.scala`` is the
same idea for the provider's pending writes.

Entry layout (the value stored under the written key)::

    [op u8][prior u8][value bytes]

``op`` is :data:`OP_PUT` or :data:`OP_DELETE` (no value bytes); ``prior`` says whether the key
existed in committed state as far as the epoch's reads found out: 1, 0, or :data:`PRIOR_UNKNOWN`.
"""

from __future__ import annotations

import os
import shutil
import uuid
from typing import Iterable, Iterator, Optional, cast

import rocksdict

from ..backends.rocksdb_resources import table_options

OP_PUT = 0
OP_DELETE = 1
PRIOR_UNKNOWN = 255
HEADER_BYTES = 2
#: The spill runs' database's L0 slowdown and stop triggers: a file count no epoch reaches, so RocksDB
#: never slows or stops an ingestion. Every run is one SST file ingested into L0 (runs overlap, keys
#: being hashed), and with RocksDB's defaults (slow down at 20 L0 files, stop at 36) an epoch that
#: spilled a few dozen runs would wait on the task's thread for compaction to merge them; compaction
#: merges them in the background all the same (from 8 files on). The JVM's ``SpillRuns.NoStallL0Files``
#: is the same (a unit test compares them).
NO_STALL_L0_FILES = 1 << 20


def encode(value: Optional[bytes], prior: int) -> bytes:
    """The entry of a write (``None``: a delete) whose key's prior existence is ``prior``."""
    if value is None:
        return bytes((OP_DELETE, prior))
    return bytes((OP_PUT, prior)) + value


def decode_value(entry: bytes) -> Optional[bytes]:
    """The written value of an entry, ``None`` for a delete."""
    return None if entry[0] == OP_DELETE else entry[HEADER_BYTES:]


class SpillRuns:
    """Sorted runs of one epoch's writes in a private RocksDB under ``parent`` (see the module docstring);
    also the external sort of other passes that outgrow memory (a change feed's changed keys).

    ``cache`` is the block cache its blocks are read through (data, index and filter blocks: the
    one table policy, :func:`spark_state.backends.rocksdb_resources.table_options`); None gives
    the runs a small one of their own.
    """

    def __init__(self, parent: str, cache: Optional[rocksdict.Cache] = None) -> None:
        self.directory = os.path.join(parent, f"spill-{uuid.uuid4().hex[:12]}")
        os.makedirs(self.directory)
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_block_based_table_factory(table_options(cache if cache is not None else rocksdict.Cache(8 << 20)))
        options.set_compression_type(rocksdict.DBCompressionType.none())  # read once or twice, then deleted
        # Runs overlap (keys are hashed): let compaction merge them, and never stall an ingestion.
        options.set_level_zero_file_num_compaction_trigger(8)
        options.set_level_zero_slowdown_writes_trigger(NO_STALL_L0_FILES)
        options.set_level_zero_stop_writes_trigger(NO_STALL_L0_FILES)
        self._options = options
        self._db: Optional[rocksdict.Rdict] = rocksdict.Rdict(os.path.join(self.directory, "db"), options)
        self._ingest = rocksdict.IngestExternalFileOptions()
        self._ingest.set_move_files(True)
        self._ingest.set_allow_global_seqno(True)
        #: runs written, and entries written (a key in two runs counts twice)
        self.runs = 0
        self.entries = 0
        self.file_bytes = 0

    def write_run(self, entries: Iterable[tuple[bytes, bytes]]) -> None:
        """Write one run of ``(key, entry)`` in strictly ascending key order; an empty one writes nothing."""
        path = os.path.join(self.directory, f"run-{self.runs}.sst")
        writer = rocksdict.SstFileWriter(options=self._options)
        writer.open(path)
        n = 0
        for key, entry in entries:
            writer[key] = entry
            n += 1
        if not n:
            return  # an SST writer cannot finish an empty file; nothing was written
        writer.finish()
        self.file_bytes += os.path.getsize(path)
        self._require_open().ingest_external_file([path], self._ingest)
        self.runs += 1
        self.entries += n

    def get(self, key: bytes) -> Optional[bytes]:
        """The entry of ``key``, or None."""
        return self._require_open().get(key)

    def items(self, start: Optional[bytes] = None, end: Optional[bytes] = None) -> Iterator[tuple[bytes, bytes]]:
        """``(key, entry)`` with ``start <= key < end`` (None: open), ascending. The iterator holds a
        RocksDB snapshot: runs written meanwhile are not seen."""
        read_options = rocksdict.ReadOptions()
        if end is not None:
            read_options.set_iterate_upper_bound(end)
        snapshot = self._require_open().snapshot()
        return cast("Iterator[tuple[bytes, bytes]]", iter(snapshot.items(from_key=start, read_opt=read_options)))

    def _require_open(self) -> rocksdict.Rdict:
        if self._db is None:
            raise RuntimeError("the spill runs are closed")
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        shutil.rmtree(self.directory, ignore_errors=True)


#: Entries an external sort (:func:`external_sort`) holds in memory before it writes them as a run.
SORT_IN_MEMORY = 65_536


def external_sort(entries: Iterable[tuple[bytes, bytes]], scratch_dir: str,
                  in_memory: int = SORT_IN_MEMORY) -> Iterator[tuple[bytes, bytes]]:
    """``entries`` in ascending key order, each key once (a later entry of a key wins), holding at
    most ``in_memory`` of them in memory: past that they are written, sorted, as runs of a
    :class:`SpillRuns` under ``scratch_dir`` (deleted when the iteration ends or is dropped),
    whose merged scan gives them back. ``entries`` is read to its end before the first comes out.
    The one external sort of the Python side (a change feed's changed keys, the state files a
    savepoint surgery writes)."""
    pending: dict[bytes, bytes] = {}
    runs: Optional[SpillRuns] = None
    try:
        for key, value in entries:
            pending[key] = value
            if len(pending) >= in_memory:
                runs = runs or SpillRuns(scratch_dir)
                runs.write_run(sorted(pending.items()))
                pending = {}
        if runs is None:
            yield from sorted(pending.items())
            return
        runs.write_run(sorted(pending.items()))
        pending = {}
        yield from runs.items()
    finally:
        if runs is not None:
            runs.close()

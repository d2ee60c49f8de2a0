"""RocksDB backend through rocksdict in raw-bytes mode.

State may exceed memory: RocksDB keeps it on local disk, with the block cache and
memtables drawn from the process-wide budget (:mod:`.rocksdb_resources`).

Snapshots are RocksDB checkpoints taken after a flush, so they consist of SST files plus
a few small metadata files (``MANIFEST-*``, ``CURRENT``, ``OPTIONS-*``). SST files are
immutable and their numbers are never reused within a DB directory, which is what makes
them ``shared``: checkpoint storage keeps one copy of each for every snapshot that
contains it, and a snapshot after a small change uploads only the new SSTs.

RocksDB's own write-ahead log is off by default: a commit is durable through spark-state's
changelog, and a working directory is never reused across processes (it is restored from
checkpoint storage instead), so the WAL would only cost write throughput.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
from typing import Iterable, Iterator, Optional, Sequence, cast

import rocksdict

from .. import constants as C
from ..errors import CheckpointCorruptError
from ..storage.localdisk import disk_errno
from .base import BackendFactory, Change, KVBackend, SnapshotFile, UnsortedChangesError
from .rocksdb_resources import SharedRocksDBResources, memtable_bytes, shared_resources, table_options
from .rocksdb_threads import lower_compaction_priority

#: Files rocksdict or RocksDB keep in a DB directory that do not belong in a snapshot.
_NOT_SNAPSHOTTED = frozenset({"LOCK", "LOG", "IDENTITY"})
_MULTI_GET_CHUNK = 8192
#: Size at which RocksDB's info LOG is rolled, and how many LOG files a DB keeps: at most
#: about 1 MiB of logs per store.
INFO_LOG_MAX_BYTES = 512 * 1024
INFO_LOGS_KEPT = 2
#: Size at which RocksDB starts a new MANIFEST (holding only the live files, ~200 bytes each,
#: so a DB of up to ~1,000 SST files rolls rarely).
MANIFEST_MAX_BYTES = 256 * 1024


def _options(resources: SharedRocksDBResources) -> rocksdict.Options:
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_block_based_table_factory(table_options(resources.block_cache))
    opts.set_write_buffer_manager(resources.write_buffer_manager)
    # Memtables of this database bounded by the process's budget (RocksDB's default is 64 MB each):
    # the write-buffer manager flushes only the database being written (rocksdb_resources).
    opts.set_write_buffer_size(memtable_bytes(resources.write_buffer_mb))
    opts.set_max_write_buffer_number(2)
    opts.set_max_open_files(-1)
    # RocksDB's info LOG gains ~8 KB per commit (every commit flushes, for the snapshot or the
    # provider's read view) and is never truncated: unbounded local disk for a long-lived
    # store (3.2 MB after 400 commits). Roll it at INFO_LOG_MAX_BYTES and keep one old file.
    opts.set_max_log_file_size(INFO_LOG_MAX_BYTES)
    opts.set_keep_log_file_num(INFO_LOGS_KEPT)
    # RocksDB's MANIFEST logs every flush and compaction and rolls only at 1 GiB by default.
    # Every snapshot uploads it whole, so in a long-lived store each snapshot grew by ~200
    # bytes per commit (220 KB after 1,000 commits, in checkpoint storage and on local disk).
    # Rolled, it restarts from the live file list.
    opts.set_max_manifest_file_size(MANIFEST_MAX_BYTES)
    return opts


class RocksDBBackend(KVBackend):
    name = C.BACKEND_ROCKSDB

    def __init__(self, directory: str, resources: SharedRocksDBResources, wal: bool,
                 compaction_nice: int = C.DEFAULT_COMPACTION_NICE) -> None:
        self._directory = directory
        self._resources = resources
        options = _options(resources)
        # The default column family named with our options: rocksdict opens an existing database
        # (a restored snapshot) with the column families of its OPTIONS file otherwise, that is
        # with a private 8 MB block cache and no bloom filters instead of ours.
        self._db = rocksdict.Rdict(directory, options, column_families={"default": options})
        # Opening may have started more pool threads: they get the priority too.
        lower_compaction_priority(compaction_nice)
        self._write_options = rocksdict.WriteOptions()
        # rocksdict's stub declares disable_wal a method; at run time it is a settable attribute.
        self._write_options.disable_wal = not wal  # type: ignore[method-assign,assignment]

    @property
    def directory(self) -> str:
        return self._directory

    def get(self, key: bytes) -> Optional[bytes]:
        return self._db.get(key)

    def multi_get(self, keys: Sequence[bytes]) -> list[Optional[bytes]]:
        if not keys:
            return []
        return cast("list[Optional[bytes]]", self._db[list(keys)])  # a list key: one value per key

    def contains(self, key: bytes) -> bool:
        return self._db.get(key) is not None

    def count_existing(self, keys: Sequence[bytes]) -> int:
        # Batched multi-get releases the GIL and lets RocksDB sort the lookups.
        found = 0
        for i in range(0, len(keys), _MULTI_GET_CHUNK):
            values = cast("list[Optional[bytes]]", self._db[list(keys[i:i + _MULTI_GET_CHUNK])])
            found += sum(1 for v in values if v is not None)
        return found

    def iterate(
        self, start: Optional[bytes] = None, end: Optional[bytes] = None
    ) -> Iterator[tuple[bytes, bytes]]:
        read_opts = rocksdict.ReadOptions()
        if end is not None:
            read_opts.set_iterate_upper_bound(end)
        # A RocksDB snapshot pins the view, so the iterator is stable even if the caller
        # applies changes before consuming it fully.
        snapshot = self._db.snapshot()
        # rocksdict ignores set_iterate_lower_bound; from_key seeks instead.
        yield from snapshot.items(from_key=start, read_opt=read_opts)

    def apply(self, changes: Iterable[Change]) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        put = batch.put
        delete = batch.delete
        for key, value in changes:
            if value is None:
                delete(key)
            else:
                put(key, value)
        if len(batch):
            self._db.write(batch, self._write_options)

    def apply_distinct(self, put_keys: list[bytes], put_values: list[bytes], delete_keys: list[bytes]) -> None:
        batch = rocksdict.WriteBatch(raw_mode=True)
        # map() drives the batch's methods from C: no bytecode per key (about 40% of building the
        # batch, which costs as much as RocksDB's write of it).
        collections.deque(map(batch.put, put_keys, put_values), 0)
        collections.deque(map(batch.delete, delete_keys), 0)
        if len(batch):
            self._db.write(batch, self._write_options)

    def apply_sorted(self, batches: Iterable[tuple[list[bytes], list[Optional[bytes]]]], scratch_dir: str) -> None:
        # One SST file written in key order and ingested: no memtable inserts and no flush of them
        # (which a read view's export would wait for). It lands in level 0 over what the database
        # holds, its entries newer than every one there; compactions merge it later, at idle priority.
        os.makedirs(scratch_dir, exist_ok=True)
        path = os.path.join(scratch_dir, f"ingest-{os.getpid()}-{id(self)}.sst")
        writer = rocksdict.SstFileWriter(options=_options(self._resources))
        writer.open(path)
        written = 0
        try:
            try:
                for keys, values in batches:
                    if None in values:  # deletes among the puts: in key order, one by one
                        for key, value in zip(keys, values):
                            if value is None:
                                del writer[key]
                            else:
                                writer[key] = value
                    else:  # driven from C, as apply_distinct does
                        collections.deque(map(writer.__setitem__, keys, values), 0)
                    written += len(keys)
            except Exception as exc:  # rocksdict raises plain Exception for keys out of order
                if "ascending order" not in str(exc):
                    raise
                raise UnsortedChangesError(str(exc)) from None
            if written:
                writer.finish()
                ingest = rocksdict.IngestExternalFileOptions()
                ingest.set_move_files(True)
                self._db.ingest_external_file([path], ingest)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def memory_bytes(self) -> int:
        total = 0
        for prop in ("rocksdb.cur-size-all-mem-tables", "rocksdb.estimate-table-readers-mem"):
            total += int(self._db.property_int_value(prop) or 0)
        return total

    def write_snapshot(self, directory: str) -> list[SnapshotFile]:
        # Flush first so the snapshot is SSTs only (the WAL is off, and even when it is
        # on, a memtable-free checkpoint needs no log replay on restore).
        self._db.flush(True)
        rocksdict.Checkpoint(self._db).create_checkpoint(directory)
        files = []
        for name in sorted(os.listdir(directory)):
            if name in _NOT_SNAPSHOTTED or name.startswith("LOG."):  # rolled info logs
                continue
            path = os.path.join(directory, name)
            files.append(SnapshotFile(name, path, os.path.getsize(path), shared=name.endswith(".sst")))
        return files

    def close(self) -> None:
        if self._db is not None:
            # No cancel_all_background() first: rocksdict's close() flushes, and a
            # flush after cancelling fails with "Shutdown in progress".
            self._db.close()
            self._db = None  # type: ignore[assignment]


class RocksDBBackendFactory(BackendFactory):
    name = C.BACKEND_ROCKSDB

    def __init__(self, block_cache_mb: int, write_buffer_mb: int, wal: bool,
                 compaction_nice: int = C.DEFAULT_COMPACTION_NICE) -> None:
        self._resources = shared_resources(block_cache_mb, write_buffer_mb)
        self._wal = wal
        self._compaction_nice = compaction_nice

    @property
    def resources(self) -> SharedRocksDBResources:
        return self._resources

    def create_empty(self, directory: str) -> KVBackend:
        if os.path.exists(directory):
            shutil.rmtree(directory)
        os.makedirs(directory)
        return RocksDBBackend(directory, self._resources, self._wal, self._compaction_nice)

    def open_snapshot(self, directory: str) -> KVBackend:
        try:
            return RocksDBBackend(directory, self._resources, self._wal, self._compaction_nice)
        except Exception as exc:  # rocksdict raises plain Exception for corruption
            if disk_errno(exc) is not None:
                raise  # a full or broken local disk, not a damaged snapshot (the store reports it)
            raise CheckpointCorruptError(directory, f"RocksDB cannot open the snapshot ({exc})") from None

"""What the worker hands the JVM's read views (``jvm-shim``: ``StateView.scala``), per backend.

The provider's ``backend`` conf chooses where the executor JVM reads state from; the worker's own
store is RocksDB-backed either way, so durability (changelogs, snapshots, retention, restore) and
the checkpoint format do not depend on it, and a query can switch backends at a restart.

``rocksdb``
    The JVM opens an exported RocksDB checkpoint of some version read-only and layers the epochs
    committed since then over it (``RocksViews.scala``). A load exports a new checkpoint only when
    the JVM lacks the version or asks for a refresh: one memtable flush per refresh instead of one
    per epoch and partition.
``hashmap``
    The JVM holds the state in a hash map (``HeapViews.scala``). A load ships the version as an
    Arrow IPC file (``key``, ``value``: every data entry, TTL stamps included) only when the JVM
    lacks it: at start, after a restore elsewhere, or when it could not follow a commit.

Which version the JVM holds is named by commit id: the manifest's ``commit_id`` (random per
commit attempt; ``""`` for the empty version 0). The JVM sends the id it holds for the version it
loads; the worker exports only if that is not the id of the version it loaded.

After a commit, the JVM applies the epoch's writes to its views itself; ``commit_view`` tells it
how the worker stored them (protocol in ``protocol.py``): as shipped (``buffer``), stamped with
the batch's TTL time plus the keys TTL expired (``stamped``), or not rebuildable (``reload``: a TTL
layout migration rewrote every row, an earlier attempt of the run committed other content, or TTL
expired more keys than the JVM applies, :data:`EXPIRED_BATCHES_APPLIED`).

The expired keys are written to their file as expiry finds them (:class:`ExpiredKeys`), a record
batch at a time, and the JVM applies at most :data:`EXPIRED_BATCHES_APPLIED` batches of them: past
that, a commit (a full-snapshot cleanup can expire millions of rows) is a ``reload``, so neither
side holds the keys of a large expiry. Applying them batch by batch in the JVM would not bound it:
the applied delta stays in the heap as a layer (``rocksdb``) or as the undo that readers of the
previous version consult (``hashmap``). A reload costs one fresh export at the next load: a
checkpoint of the worker's RocksDB (``rocksdb``), or the state shipped once more (``hashmap``, whose
state is in the heap anyway), which is of the order of the expiry pass itself.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from types import TracebackType
from typing import Any, Optional

import pyarrow as pa

from .. import constants as C
from ..arrow_chunks import entry_batches
from ..keys.system import SYSTEM_PREFIX
from ..engine.store import VersionedStore

_LOG = logging.getLogger(__name__)

VIEW_ROCKSDB = C.BACKEND_ROCKSDB
VIEW_HASHMAP = C.BACKEND_HASHMAP

#: Exported RocksDB views kept per store: the newest and the one before it (the JVM may still be
#: opening it). Older ones are deleted; the JVM's open handles keep their files readable.
VIEWS_KEPT = 2

#: Keys per record batch of the expired-keys file (:class:`ExpiredKeys`): what the worker holds of
#: them at a time (a few hundred KB).
EXPIRED_BATCH_ROWS = 8_192
#: Record batches of expired keys the JVM applies to its views at most; a commit that expires more
#: makes the JVM reload the version (module docstring). 65,536 keys: a few MB of the JVM's heap.
EXPIRED_BATCHES_APPLIED = 8

#: The expired-keys file (Arrow IPC file format): one column, the data keys TTL expiry deleted.
_KEYS = pa.schema([("key", pa.binary())])
_ENTRIES = pa.schema([("key", pa.binary()), ("value", pa.binary())])


def commit_id(store: VersionedStore) -> str:
    """The identity of the loaded version's content: its manifest's commit id ("" for version 0)."""
    manifest = store.manifest
    return manifest.commit_id if manifest is not None else ""


class ViewExporter:
    """Exports of one provider instance's store for the JVM, in ``directory`` (owned by it);
    ``expired_batch_rows``: keys per record batch of expired-keys files (0:
    :data:`EXPIRED_BATCH_ROWS`; tests set it small)."""

    def __init__(self, kind: str, directory: str, expired_batch_rows: int = 0) -> None:
        self.kind = kind
        self.directory = directory
        self.expired_batch_rows = expired_batch_rows or EXPIRED_BATCH_ROWS
        #: (version, path) of exported RocksDB views, oldest first
        self._views: list[tuple[int, str]] = []
        # A worker restarted after a crash reuses the instance's directory: whatever the previous
        # worker left there is garbage (the JVM keeps open files readable after deletion).
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory, exist_ok=True)

    def export(self, store: VersionedStore) -> dict[str, Any]:
        """The loaded version for the JVM: ``viewPath`` (rocksdb) or ``heapPath`` (hashmap)."""
        if self.kind == VIEW_HASHMAP:
            path, rows = self._ship(store)
            return {"heapPath": path, "heapRows": rows}
        return {"viewPath": self._export_rocksdb(store)}

    def _export_rocksdb(self, store: VersionedStore) -> str:
        version = store.version
        if self._views and self._views[-1][0] == version:
            return self._views[-1][1]
        path = os.path.join(self.directory, f"v{version}-{uuid.uuid4().hex[:12]}")
        store.export_view(path)
        self._views.append((version, path))
        while len(self._views) > VIEWS_KEPT:
            _, old = self._views.pop(0)
            shutil.rmtree(old, ignore_errors=True)
        return path

    def _ship(self, store: VersionedStore) -> tuple[str, int]:
        """Every data entry of the loaded version (system keyspace excluded) as an Arrow IPC file
        the JVM reads once and deletes."""
        path = os.path.join(self.directory, f"ship-v{store.version}-{uuid.uuid4().hex[:12]}.arrow")
        rows = 0
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, _ENTRIES) as writer:
            for batch in entry_batches(store.iterate(None, SYSTEM_PREFIX), _ENTRIES, C.ARROW_BATCH_ROWS,
                                       at_least_one=True):
                writer.write_batch(batch)
                rows += batch.num_rows
        return path, rows

    def expired_keys(self) -> ExpiredKeys:
        """A sink for the keys TTL expiry deletes in one commit, its file in this directory."""
        path = os.path.join(self.directory, f"expired-{uuid.uuid4().hex[:12]}.arrow")
        return ExpiredKeys(path, self.expired_batch_rows)

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        self._views = []


class ExpiredKeys:
    """The data keys TTL expiry deletes in one commit, written to an Arrow IPC file for the JVM's
    views (schema ``key: binary``) as they come: :meth:`append` holds at most ``batch_rows`` keys
    before it writes them as one record batch. Past :data:`EXPIRED_BATCHES_APPLIED` batches the
    file is deleted and keys are only counted: the JVM reloads the version instead.

    The file is created at the first full batch (or at :meth:`finish`); a context manager that
    deletes it if the block raises (a failed commit hands nothing to the JVM)."""

    def __init__(self, path: str, batch_rows: int) -> None:
        self.path = path
        self.batch_rows = batch_rows
        #: keys appended so far
        self.count = 0
        self._limit = batch_rows * EXPIRED_BATCHES_APPLIED
        self._batch: list[bytes] = []
        self._sink: Optional[pa.NativeFile] = None
        self._writer: Optional[pa.ipc.RecordBatchFileWriter] = None

    @property
    def overflowed(self) -> bool:
        """More keys than the JVM applies: the commit is a reload."""
        return self.count > self._limit

    def append(self, key: bytes) -> None:
        self.count += 1
        if self.count > self._limit:
            if self.count == self._limit + 1:
                self.discard()
            return
        self._batch.append(key)
        if len(self._batch) >= self.batch_rows:
            self._flush()

    def finish(self) -> Optional[str]:
        """Close the file and return its path; None (and no file) if no key came or too many."""
        if self.overflowed or self.count == 0:
            self.discard()
            return None
        self._flush()
        assert self._writer is not None and self._sink is not None
        self._writer.close()
        self._sink.close()
        self._writer = self._sink = None
        return self.path

    def discard(self) -> None:
        """Drop what was written and the batch held."""
        self._batch = []
        if self._writer is not None:
            assert self._sink is not None
            self._writer.close()
            self._sink.close()
            self._writer = self._sink = None
        if os.path.exists(self.path):
            os.remove(self.path)

    def _flush(self) -> None:
        if self._writer is None:
            self._sink = pa.OSFile(self.path, "wb")
            self._writer = pa.ipc.new_file(self._sink, _KEYS)
        if self._batch:
            self._writer.write_batch(pa.record_batch([pa.array(self._batch, pa.binary())], schema=_KEYS))
            self._batch = []

    def __enter__(self) -> ExpiredKeys:
        return self

    def __exit__(self, kind: Optional[type[BaseException]], error: Optional[BaseException],
                 trace: Optional[TracebackType]) -> None:
        if kind is not None:
            self.discard()


def commit_view(store: VersionedStore, *, stamped: bool, stamp_ms: int, layout_changed: bool,
                expired: ExpiredKeys) -> dict[str, Any]:
    """How the JVM rebuilds the data changes of the commit just made (``CommitDelta.scala``);
    ``expired`` holds the keys TTL expiry deleted (its file is handed to the JVM or deleted)."""
    if store.last_commit.lost_to_earlier_attempt == "replaced" or layout_changed or expired.overflowed:
        if expired.overflowed:
            _LOG.info("TTL expired %d rows at version %d, more than the JVM applies (%d): its views reload "
                      "the version", expired.count, store.version, expired.batch_rows * EXPIRED_BATCHES_APPLIED)
        expired.discard()
        return {"apply": "reload"}
    if not stamped:
        expired.discard()
        return {"apply": "buffer"}
    return {"apply": "stamped", "stampMs": stamp_ms, "expiredPath": expired.finish()}

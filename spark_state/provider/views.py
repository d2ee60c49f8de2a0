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
layout migration rewrote every row, or an earlier attempt of the run committed other content).
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from typing import Any, Optional, Sequence

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

_KEYS = pa.schema([("key", pa.binary())])
_ENTRIES = pa.schema([("key", pa.binary()), ("value", pa.binary())])


def commit_id(store: VersionedStore) -> str:
    """The identity of the loaded version's content: its manifest's commit id ("" for version 0)."""
    manifest = store.manifest
    return manifest.commit_id if manifest is not None else ""


class ViewExporter:
    """Exports of one provider instance's store for the JVM, in ``directory`` (owned by it)."""

    def __init__(self, kind: str, directory: str) -> None:
        self.kind = kind
        self.directory = directory
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

    def expired_file(self, keys: Sequence[bytes]) -> Optional[str]:
        """The keys TTL expiry deleted in a commit, as an Arrow file for the JVM (None if none)."""
        if not keys:
            return None
        path = os.path.join(self.directory, f"expired-{uuid.uuid4().hex[:12]}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, _KEYS) as writer:
            writer.write_batch(pa.record_batch([pa.array(list(keys), pa.binary())], schema=_KEYS))
        return path

    def close(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        self._views = []


def commit_view(store: VersionedStore, exporter: ViewExporter, *, stamped: bool, stamp_ms: int,
                layout_changed: bool, expired_keys: Sequence[bytes]) -> dict[str, Any]:
    """How the JVM rebuilds the data changes of the commit just made (``CommitDelta.scala``)."""
    if store.last_commit.lost_to_earlier_attempt == "replaced" or layout_changed:
        return {"apply": "reload"}
    if not stamped:
        return {"apply": "buffer"}
    return {"apply": "stamped", "stampMs": stamp_ms, "expiredPath": exporter.expired_file(expired_keys)}

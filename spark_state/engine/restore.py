"""Executing a restore plan on the local copy: a base snapshot brought in, changelogs replayed,
the old local copy discarded.

Functions of explicit inputs; the store (``VersionedStore.load``) owns the local copy, calls
these in the order its :class:`~.restore_plan.RestorePlan` says, and forgets the local copy
if any of them fails (it may then hold half a restore).

Invariants: every file is checked against what the manifest says of it before it is applied
(a snapshot file's size and CRC-32 by ``download_snapshot``, a changelog's size and CRC-32
here); a missing file is reported with the manifest that needs it. A snapshot written by
another backend is converted into this store's backend on the way in, so a query can switch
backends on restart (like a Flink canonical savepoint).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from typing import Optional

import pyarrow.compute as pc

from .. import constants as C
from ..backends import KVBackend, backend_factory
from ..backends.base import BackendFactory, UnsortedChangesError
from ..checkpoint import changelog, layout
from ..checkpoint.checksum import crc32_file
from ..checkpoint.metadata import ChangelogRef, Manifest
from ..checkpoint.snapshots import FetchStats, SharedFileIndex, download_snapshot, read_descriptor
from ..config import EngineConfig
from ..errors import CheckpointCorruptError, CheckpointFileMissingError
from ..storage import CheckpointStorage
from ..storage.local_copy import local_file
from .metrics import RestoreMetrics
from .restore_plan import RestorePlan

_LOG = logging.getLogger(__name__)


def open_base_snapshot(storage: CheckpointStorage, manifest: Manifest, factory: BackendFactory,
                       config: EngineConfig, work_dir: str) -> tuple[KVBackend, SharedFileIndex, FetchStats]:
    """Bring ``manifest``'s base snapshot into ``work_dir`` and open it: ``(backend, shared-file
    index of its SSTs for the next incremental snapshot, what the fetch did)``."""
    base = manifest.base_snapshot
    assert base is not None
    descriptor = read_descriptor(storage, base)
    snapshot_dir = os.path.join(work_dir, f"db-{layout.new_id()}")
    needed_by = storage.full_url(layout.manifest_path(manifest.version, manifest.rank))
    fetched = download_snapshot(storage, descriptor, snapshot_dir, needed_by)
    if descriptor.backend == factory.name:
        backend = factory.open_snapshot(snapshot_dir)
        shared = [f.name for f in descriptor.files if f.path.startswith(C.SHARED_DIR + "/")]
        index = SharedFileIndex.from_descriptor(descriptor, shared)
    else:
        backend = _convert_snapshot(descriptor.backend, snapshot_dir, factory, config, work_dir)
        index = SharedFileIndex()
    return backend, index, fetched


def _convert_snapshot(written_by: str, snapshot_dir: str, factory: BackendFactory, config: EngineConfig,
                      work_dir: str) -> KVBackend:
    """Open a snapshot written by another backend and copy it into a new one of ``factory``'s."""
    _LOG.info("converting a %s snapshot to the %s backend", written_by, factory.name)
    source = backend_factory(written_by, config).open_snapshot(snapshot_dir)
    target = factory.create_empty(os.path.join(work_dir, f"db-{layout.new_id()}"))
    try:
        target.apply(source.iterate())
    finally:
        source.close()
        shutil.rmtree(snapshot_dir, ignore_errors=True)
    return target


def replay_changelog(storage: CheckpointStorage, backend: KVBackend, ref: ChangelogRef, manifest: Manifest,
                     scratch_dir: str) -> None:
    """Apply the changelog ``ref`` (one of ``manifest``'s) to ``backend``, after checking it. The
    file is read from a local copy (:func:`~spark_state.storage.local_copy.local_file`; a download
    goes under ``scratch_dir``), memory-mapped, one record batch at a time: an epoch of any size
    replays in bounded memory. A changelog holds each key of its epoch once; one written in key
    order (the provider's commits sort their keys) goes to the backend in that order
    (:meth:`~spark_state.backends.base.KVBackend.apply_sorted`: RocksDB writes it as one SST file
    and ingests it), any other a batch at a time (``apply_distinct``: puts and deletes as two lists,
    filled from C)."""
    url = storage.full_url(ref.path)
    try:
        with local_file(storage, ref.path, scratch_dir) as path:
            size = os.path.getsize(path)
            if size != ref.size:
                raise CheckpointCorruptError(url, f"size is {size} bytes, expected {ref.size}")
            crc = crc32_file(path)
            if crc != ref.crc32:
                raise CheckpointCorruptError(url, f"CRC-32 is {crc:#010x}, expected {ref.crc32:#010x}")
            try:
                backend.apply_sorted(((keys.to_pylist(), values.to_pylist())
                                      for keys, values in changelog.read_file(path, url, ref.version)), scratch_dir)
            except UnsortedChangesError:
                for keys, values in changelog.read_file(path, url, ref.version):
                    deleted = values.is_null()
                    kept = pc.invert(deleted)
                    backend.apply_distinct(keys.filter(kept).to_pylist(), values.filter(kept).to_pylist(),
                                           keys.filter(deleted).to_pylist())
    except CheckpointFileMissingError:
        raise CheckpointFileMissingError(
            url, needed_by=storage.full_url(layout.manifest_path(manifest.version, manifest.rank))
        ) from None


def restore_metrics(plan: RestorePlan, fetched: FetchStats, started: float, snapshot_done: float) -> RestoreMetrics:
    """What a load that executed ``plan`` did: ``fetched`` by its base snapshot, its start, the end
    of its snapshot part and now (``time.perf_counter()`` values)."""
    done = time.perf_counter()
    return RestoreMetrics(
        version=plan.version, mode=plan.mode, changelogs_replayed=len(plan.replay),
        changelog_bytes_replayed=sum(ref.size for ref in plan.replay),
        snapshot_files_downloaded=fetched.files_fetched, snapshot_bytes_downloaded=fetched.bytes_fetched,
        snapshot_files_linked=fetched.files_linked, snapshot_ms=(snapshot_done - started) * 1000,
        replay_ms=(done - snapshot_done) * 1000, duration_ms=(done - started) * 1000 if plan.manifest else 0.0)


def discard_local_copy(backend: Optional[KVBackend], work_dir: str, store_url: str) -> None:
    """Close ``backend`` and remove the working directory. Never raises: the local copy is
    disposable (checkpoint storage holds the state), and a backend that failed (e.g. RocksDB
    after a full disk, whose close() flushes) must not hide the error that brought the store
    here, nor keep a load from restoring."""
    if backend is not None:
        try:
            backend.close()
        except Exception:
            _LOG.warning("closing the local copy of %s failed; discarding it", store_url, exc_info=True)
    if os.path.isdir(work_dir):
        shutil.rmtree(work_dir, ignore_errors=True)

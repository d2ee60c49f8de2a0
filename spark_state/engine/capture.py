"""Snapshot capture and upload for one store: inline (inside a commit or maintenance call) or
handed to the background thread (:mod:`spark_state.checkpoint.background`).

A snapshot is taken from the local copy (``KVBackend.write_snapshot``: for RocksDB a
checkpoint, one memtable flush and hard links), uploaded incrementally (SSTs already in
checkpoint storage are reused, :class:`~spark_state.checkpoint.snapshots.SharedFileIndex`),
and then named by a manifest.

Invariants:

* **Commit point.** A manifest only names files that are complete in storage: the snapshot's
  descriptor is written after its files, a manifest after the descriptor. A manifest is
  *re-pointed* at a snapshot of its own version (:func:`repoint_manifest`) only while the
  manifest in storage still has the same commit id, keeping its version, rank, run and commit
  id: the re-pointed manifest is the same commit, restorable in fewer steps.
* **Where captures live.** An inline snapshot is written inside the store's working directory
  and removed after its upload. A background capture lives beside the working directory
  (same file system: RocksDB hard-links its SSTs), not in it, because a restore replaces the
  working directory while the upload may still run; the background job removes it.
* **Lineage.** A capture is taken only of the version just committed on the same local copy
  (the store checks this under its lock before calling :func:`capture_local`).
"""

from __future__ import annotations

import os
import shutil
import logging
from typing import Callable, Optional

from .. import constants as C
from ..backends import KVBackend
from ..checkpoint import layout
from ..checkpoint.background import BackgroundSnapshots, Capture
from ..checkpoint.metadata import Manifest, SnapshotRef
from ..checkpoint.retention import read_manifest
from ..checkpoint.snapshots import SharedFileIndex, SnapshotStats, upload_snapshot
from ..errors import CheckpointFileMissingError, SparkStateError
from ..storage import CheckpointStorage
from ..testing import crashpoints
from .localdirs import process_root
from .metrics import CommitMetrics, record_snapshot

_LOG = logging.getLogger(__name__)


def capture_local(backend: KVBackend, version: int, backend_name: str, local_dir: Optional[str]) -> Capture:
    """A local copy of ``backend``'s state (committed ``version``) for the background upload,
    in a new directory of this process's local root."""
    local = os.path.join(process_root(local_dir), f"snapshot-{layout.new_id()}")
    try:
        files = backend.write_snapshot(local)
    except BaseException:
        shutil.rmtree(local, ignore_errors=True)
        raise
    return Capture(version, local, files, backend_name)


def upload_inline(storage: CheckpointStorage, backend: KVBackend, version: int, backend_name: str,
                  work_dir: str, index: SharedFileIndex) -> tuple[SnapshotRef, SnapshotStats]:
    """Snapshot ``backend`` (holding ``version``) and upload it now; the local copy of the
    snapshot is removed whatever happens."""
    local = os.path.join(work_dir, f"snapshot-{layout.new_id()}")
    try:
        files = backend.write_snapshot(local)
        return upload_snapshot(storage, version, backend_name, files, index)
    finally:
        shutil.rmtree(local, ignore_errors=True)


def with_snapshot(manifest: Manifest, ref: SnapshotRef) -> Manifest:
    """The same commit of the same version, restoring from snapshot ``ref`` of that version."""
    return Manifest(
        version=manifest.version, commit_id=manifest.commit_id, backend=manifest.backend,
        changelog=manifest.changelog, base_snapshot=ref, replay=(), num_keys=manifest.num_keys,
        rank=manifest.rank, run_id=manifest.run_id,
    )


def repoint_manifest(storage: CheckpointStorage, manifest: Manifest, ref: SnapshotRef, crashpoint: str,
                     missing_ok: bool = False) -> Optional[Manifest]:
    """Rewrite ``manifest`` in storage to restore from ``ref`` and return the rewritten one, or
    None if the manifest in storage has another commit id by now (a re-commit replaced it) or,
    with ``missing_ok``, is gone (retention removed the version meanwhile)."""
    try:
        current = read_manifest(storage, manifest.version, manifest.rank)
    except CheckpointFileMissingError:
        if not missing_ok:
            raise
        return None
    if current.commit_id != manifest.commit_id:
        return None
    crashpoints.reached(crashpoint)
    rewritten = with_snapshot(manifest, ref)
    storage.write_bytes(layout.manifest_path(manifest.version, manifest.rank), rewritten.to_json())
    return rewritten


def snapshot_due(interval: int, loaded: Optional[Manifest], background: Optional[BackgroundSnapshots]) -> bool:
    """Whether the commit on the version of manifest ``loaded`` snapshots, decided before its epoch:
    its chain (rebased on the newest background snapshot) reaches ``interval`` (0: never) or holds
    changelogs of more than ``constants.SNAPSHOT_REPLAY_BYTES``, and no upload is in flight (one at
    a time; a later commit takes the snapshot). The commit itself also snapshots when its own
    changelog brings the chain past that size (:func:`~.commit.commit_epoch`'s ``replay_limit``),
    so that a restore never replays much more than it, after an epoch of millions of keys too."""
    chain = loaded.replay if loaded else ()
    if background is not None:
        chain = background.rebase(loaded.base_snapshot if loaded else None, chain)[1]
    due = bool(interval) and (len(chain) + 1 >= interval or sum(ref.size for ref in chain) >= C.SNAPSHOT_REPLAY_BYTES)
    if due and background is not None and background.in_flight:
        due = False
    return due


def snapshot_in_place(storage: CheckpointStorage, manifest: Manifest,
                      upload: Callable[[int], tuple[SnapshotRef, SnapshotStats]], invalidate: Callable[[], None],
                      metrics: CommitMetrics) -> Optional[Manifest]:
    """Maintenance: snapshot ``manifest``'s version (held by the local copy) with ``upload`` and
    re-point the manifest at it; returns the rewritten manifest, or None if the version was
    re-committed meanwhile. A local failure (the flush: RocksDB then keeps a background error)
    calls ``invalidate``; a checkpoint storage failure leaves the local copy intact."""
    try:
        base, stats = upload(manifest.version)
    except SparkStateError:
        raise
    except BaseException:
        invalidate()
        raise
    record_snapshot(metrics, stats)
    rewritten = repoint_manifest(storage, manifest, base, "maintenance.snapshot.before-manifest")
    if rewritten is None:
        _LOG.warning("version %d was re-committed meanwhile; keeping its manifest", manifest.version)
    return rewritten

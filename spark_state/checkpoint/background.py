"""Snapshots off the commit path: captured and uploaded in the background.

A commit that is due for a snapshot writes its manifest on the old chain as usual (base
snapshot plus changelogs) and hands the version to a background thread; the commit waits for
its changelog and manifest only. The thread first takes a *local capture* of the version (for
RocksDB a checkpoint: one memtable flush and hard links; for the hashmap backend a copy of its
data file) under the store's lock, then uploads it without the lock (incrementally: SSTs already
in checkpoint storage are reused), then rewrites that version's manifest to restore from the new
snapshot. Later commits *rebase* on it: their chain starts after the snapshot's version.

The capture is off the commit because its flush would be the one part of a snapshot a commit
waits for (docs/provider-backends.md, "Background snapshots", gives the figures). Where a later
commit takes the store's lock first, the capture is skipped and the next due commit takes its
capture itself, inside the commit (:attr:`BackgroundSnapshots.last_capture_skipped`).

Invariants:

* **Crash safety.** A manifest only ever names files that are complete in checkpoint storage:
  the snapshot's descriptor is written after its files, and the manifest rewrite after the
  descriptor. A crash while uploading leaves the version's manifest on its old chain (still
  restorable) and some unreferenced files, which retention removes later.
* **Same commit point.** The rewrite keeps the manifest's version, rank, run and commit id
  (a ranked manifest stays the run's one copy of the version), and happens only if the
  manifest in storage still has that commit id; it runs under the store's lock.
* **Lineage.** The capture is taken only while the store holds exactly the version handed
  over (under the store's lock: that version loaded, on the same local copy); if a later
  commit or a reload came first, the snapshot is skipped and the next due commit takes one. A
  commit rebases only if its chain contains the changelog of the snapshot's version, i.e. the
  store's state descends from exactly the state that was captured.
* **Retention.** Files of the snapshot in flight (everything named with its version or
  later) and of the newest completed snapshot (the rebase target) are never deleted by this
  process's cleanup (:meth:`BackgroundSnapshots.protection`), even where no retained
  manifest names them yet.
* **At most one upload per store at a time.** A snapshot falls due again while one is in flight
  only when uploads take longer than ``snapshot_interval`` commits; the commit then skips it.

Uploads of all stores of the process share a small thread pool (:data:`UPLOAD_THREADS`), so a
worker serving many partitions does not flood its disk or network with concurrent uploads.
"""

from __future__ import annotations

import concurrent.futures
import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from ..backends.base import SnapshotFile
from ..storage import CheckpointStorage
from .metadata import ChangelogRef, Manifest, SnapshotRef
from .snapshots import SharedFileIndex, SnapshotStats, upload_snapshot

_LOG = logging.getLogger(__name__)

#: Threads uploading snapshots, for all stores of this process.
UPLOAD_THREADS = 2

_pool_lock = threading.Lock()
_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(UPLOAD_THREADS, thread_name_prefix="spark-state-snapshot")
        return _pool


@dataclass(frozen=True)
class Capture:
    """A local, immutable copy of one committed version, ready to upload."""

    version: int
    directory: str
    files: list[SnapshotFile]
    backend: str


@dataclass(frozen=True)
class Completed:
    """A snapshot in checkpoint storage that later commits may rebase on."""

    version: int
    #: the changelog that produced the captured state (lineage check)
    changelog_path: str
    ref: SnapshotRef
    #: the snapshot's files in checkpoint storage (descriptor included): kept by cleanup
    paths: frozenset[str]


@dataclass
class _Totals:
    files_uploaded: int = 0
    files_reused: int = 0
    bytes_uploaded: int = 0
    completed: int = 0
    failed: int = 0
    #: versions whose capture found the store moved on (nothing uploaded)
    skipped: int = 0
    last_error: str = ""
    per_snapshot_s: list[float] = field(default_factory=list)


class BackgroundSnapshots:
    """The background snapshot state of one :class:`~spark_state.engine.store.VersionedStore`.

    ``lock`` is the store's lock: completion (the manifest rewrite) takes it, so it is
    serialised with commits, loads and cleanup of the same store.
    """

    def __init__(self, storage: CheckpointStorage, lock: threading.RLock) -> None:
        self._storage = storage
        self._lock = lock
        self._future: Optional[concurrent.futures.Future] = None
        self._in_flight_version: Optional[int] = None
        self._last_capture_skipped = False
        self._completed: Optional[Completed] = None
        self._totals = _Totals()
        self._unreported = SnapshotStats()

    # ------------------------------------------------------------------ commit side
    @property
    def in_flight(self) -> bool:
        return self._future is not None and not self._future.done()

    @property
    def last_capture_skipped(self) -> bool:
        """Whether the last background capture found the store moved on (the next due commit
        then captures inside the commit)."""
        return self._last_capture_skipped

    def rebase(self, base: Optional[SnapshotRef], chain: tuple[ChangelogRef, ...]
               ) -> tuple[Optional[SnapshotRef], tuple[ChangelogRef, ...]]:
        """``(base, chain)`` restarted at the newest completed snapshot if the chain descends
        from its captured state, else unchanged."""
        done = self._completed
        if done is None:
            return base, chain
        for i, ref in enumerate(chain):
            if ref.path == done.changelog_path:
                return done.ref, chain[i + 1:]
        return base, chain

    def submit(self, manifest: Manifest, capture: Callable[[], Optional[Capture]], index: SharedFileIndex,
               on_uploaded: Callable[[Manifest, SnapshotRef], None], then: Callable[[], None]) -> None:
        """Snapshot ``manifest``'s version (already committed) in the background: ``capture()``
        runs under the store's lock and returns the local copy, or None if the store no longer
        holds that version; the copy is uploaded without the lock; then ``on_uploaded(manifest,
        ref)`` runs under the lock, and ``then()`` (cleanup) after it, without the lock."""
        if self.in_flight:
            raise AssertionError("a snapshot upload is already in flight")
        self._in_flight_version = manifest.version
        self._future = _executor().submit(self._run, manifest, capture, index, on_uploaded, then)

    def take_stats(self) -> SnapshotStats:
        """Upload figures of snapshots completed since the previous call (for commit metrics)."""
        stats, self._unreported = self._unreported, SnapshotStats()
        return stats

    # ------------------------------------------------------------------ retention
    def protection(self) -> tuple[frozenset[str], Optional[int]]:
        """``(paths, from_version)`` cleanup must keep: the newest completed snapshot's files, and
        every unreferenced file of the in-flight snapshot's version or later."""
        done = self._completed
        paths = done.paths if done is not None else frozenset()
        # Not ``in_flight``: the cleanup that follows a completed upload runs inside the job, whose
        # future is not done yet, and must not protect the snapshot that just landed.
        return paths, self._in_flight_version

    # ------------------------------------------------------------------ lifecycle
    def wait(self, timeout: Optional[float] = None) -> None:
        """Wait for the upload in flight, if any (its failure is logged, not raised)."""
        future = self._future
        if future is not None:
            try:
                future.result(timeout)
            except concurrent.futures.TimeoutError:
                _LOG.warning("snapshot upload of version %s to %s still running after %s s",
                             self._in_flight_version, self._storage.url, timeout)
            except Exception:  # already logged by the job
                pass

    # ------------------------------------------------------------------ the job
    def _run(self, manifest: Manifest, take_capture: Callable[[], Optional[Capture]], index: SharedFileIndex,
             on_uploaded: Callable[[Manifest, SnapshotRef], None], then: Callable[[], None]) -> None:
        started = time.perf_counter()
        capture: Optional[Capture] = None
        try:
            with self._lock:
                capture = take_capture()
                self._last_capture_skipped = capture is None
            if capture is None:
                self._totals.skipped += 1
                _LOG.info("snapshot of version %d of %s skipped: the store moved on before its capture; the "
                          "next due commit snapshots", manifest.version, self._storage.url)
                return
            ref, stats = upload_snapshot(self._storage, capture.version, capture.backend, capture.files, index)
            with self._lock:
                self._completed = Completed(capture.version, manifest.changelog.path, ref,
                                            frozenset(stats.paths) | {ref.path})
                on_uploaded(manifest, ref)
                self._unreported.files_uploaded += stats.files_uploaded
                self._unreported.files_reused += stats.files_reused
                self._unreported.bytes_uploaded += stats.bytes_uploaded
                self._totals.completed += 1
                self._totals.per_snapshot_s.append(time.perf_counter() - started)
                self._in_flight_version = None  # landed: its files are named by manifests now
            then()
        except Exception as exc:
            self._totals.failed += 1
            self._totals.last_error = f"{type(exc).__name__}: {exc}"
            _LOG.warning("background snapshot of version %d of %s failed; the version stays restorable from "
                         "its changelogs and the next due commit snapshots again", manifest.version,
                         self._storage.url, exc_info=True)
        finally:
            with self._lock:
                self._in_flight_version = None
            if capture is not None:
                shutil.rmtree(capture.directory, ignore_errors=True)

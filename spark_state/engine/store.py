"""A versioned key-value store for one (operator, partition): the facade of the engine room.

Versions follow Spark's state store contract. ``load(v)`` makes the store hold the state
as of version ``v`` (version 0 is the empty state); reads and writes then act on it, and
``commit()`` turns the pending writes into version ``v + 1`` and returns that number.
Spark's micro-batch epochs are the checkpoint barriers: the commit at the end of batch N
is the snapshot of epoch N.

:class:`VersionedStore` owns the local copy (a :class:`~spark_state.backends.KVBackend` in a
working directory, the version it holds and that version's lineage), the epoch's pending
writes (:mod:`.overlay`) and the lock, and delegates the rest to parts of the engine room,
each readable alone:

* :mod:`.access` -- reads and writes of the epoch (a base class: no call layer on the hot path);
* :mod:`.restore_plan` -- which copy of which version a ``load`` brings in, and from what
  (cached, replay on the local copy, restore from a snapshot); :mod:`.restore` executes it;
* :mod:`.commit` -- the commit pipeline (changelog, apply, snapshot due, manifest last, adopting
  an earlier attempt's commit), in the order its docstring gives;
* :mod:`.fencing` -- the one door to the run registry (:mod:`spark_state.checkpoint.runs`),
  asked once by a load's plan and once by a commit or import;
* :mod:`.capture` -- snapshot capture and upload, inline or handed to the background thread
  (:mod:`spark_state.checkpoint.background`);
* :mod:`.transfer` -- ``import_version`` (operations tools), ``export_view`` (read views);
* :mod:`.metrics` -- :class:`CommitMetrics` and :class:`RestoreMetrics`.

Invariants kept here: the manifest is the commit point (written last); a failure anywhere in
a load or commit forgets the local copy (``_invalidate``) and the next ``load`` restores from
checkpoint storage. With ``background_snapshots=True`` (the Spark provider) a due snapshot is
captured by the background thread under the store's lock, only if the store still holds that
version on the same local copy, and the version's manifest is re-pointed at it when uploaded.

Local disk failures of the working directory (no space, read-only, permission, I/O error; from
the file system or from RocksDB) are raised as :class:`~spark_state.errors.LocalDiskError`
naming this store, the local path and the cause; they too leave the local copy untrusted.

Thread-safety: one task thread drives reads and writes; ``snapshot()``, ``cleanup()`` and
``close()`` may come from maintenance threads and are serialised with commits by a lock.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from typing import ContextManager, Iterable, Optional, Union

from .. import constants as C
from ..backends import KVBackend, backend_factory
from ..backends.base import BackendFactory
from ..checkpoint import layout
from ..checkpoint.background import BackgroundSnapshots, Capture
from ..checkpoint.metadata import Manifest, SnapshotRef
from ..checkpoint.retention import CleanupResult, cleanup, list_versions
from ..checkpoint.runs import RunContext
from ..checkpoint.snapshots import FetchStats, SharedFileIndex, SnapshotStats
from ..config import EngineConfig
from ..errors import StoreStateError
from ..storage import CheckpointStorage, open_storage
from ..storage.localdisk import local_disk_errors
from . import capture as snapshots
from .access import EpochAccess, prefix_upper_bound
from . import transfer
from .commit import CommitOutcome, Loaded, commit_epoch
from .epoch_writes import ArrowWrites, EpochWrites, OverlayWrites, SpilledWrites
from .fencing import RunGate
from .localdirs import process_root
from .metrics import CommitMetrics, RestoreMetrics, record_snapshot
from .overlay import WriteOverlay
from .restore import discard_local_copy, open_base_snapshot, replay_changelog, restore_metrics
from .restore_plan import HeldCopy, plan_restore

__all__ = ["CommitMetrics", "RestoreMetrics", "VersionedStore", "prefix_upper_bound"]

_LOG = logging.getLogger(__name__)


class VersionedStore(EpochAccess):
    """One store's versioned state, backed by a local backend and checkpoint storage.

    Args:
        checkpoint: where committed versions live: a local path, ``file://``, ``s3://``
            or ``hdfs://`` URL, or a :class:`CheckpointStorage`.
        config: engine configuration (backend, snapshot interval, retention, memory).
        runs: the query run this store works for (ranked commits, first committer wins,
            copies of abandoned attempts never loaded, fencing of a second writer); None for
            the plain engine API, whose commits are unranked.
        background_snapshots: commits only capture snapshots locally and upload them in
            the background (see :mod:`spark_state.checkpoint.background`).
    """

    def __init__(self, checkpoint: Union[str, CheckpointStorage], config: Optional[EngineConfig] = None,
                 runs: Optional[RunContext] = None, background_snapshots: bool = False) -> None:
        self._config = config or EngineConfig()
        if isinstance(checkpoint, CheckpointStorage):
            self._storage = checkpoint
        else:
            self._storage = open_storage(checkpoint, self._config.storage_options)
        self._gate = RunGate(runs, self._storage)
        self._factory: BackendFactory = backend_factory(self._config.backend, self._config)
        # In this process's directory, which dead processes' successors remove (localdirs).
        with local_disk_errors(store=self._storage.url, path=self._config.local_dir or tempfile.gettempdir(),
                               doing="creating the local working directory"):
            self._work_dir = os.path.join(process_root(self._config.local_dir), f"store-{layout.new_id()}")
        self._lock = threading.RLock()
        resources = getattr(self._factory, "resources", None)  # the process's RocksDB cache, if any
        self._overlay = WriteOverlay(self._config.spill_threshold_bytes, lambda: self._work_dir,
                                     resources.block_cache if resources is not None else None)
        self._backend: Optional[KVBackend] = None
        self._version: Optional[int] = None
        self._manifest: Optional[Manifest] = None
        self._num_keys = 0
        # Identity of the local state: the changelog or snapshot path that produced it
        # ("" for the empty version 0). Lets load(v) replay only newer changelogs.
        self._state_origin: Optional[str] = None
        self._shared_index = SharedFileIndex()
        self._closed = False
        self.last_commit = CommitMetrics()
        self.last_restore = RestoreMetrics()
        # --- background snapshots (None: snapshots are uploaded inside the commit)
        self._background = BackgroundSnapshots(self._storage, self._lock) if background_snapshots else None
        #: snapshot path -> the changelog whose state it captured: the same local state
        self._snapshot_aliases: dict[str, str] = {}
        #: (loaded version, whether its commit snapshots), decided once per epoch
        self._snapshot_decision: Optional[tuple[int, bool]] = None

    # ------------------------------------------------------------------ properties
    @property
    def config(self) -> EngineConfig:
        return self._config

    @property
    def storage(self) -> CheckpointStorage:
        return self._storage

    @property
    def version(self) -> int:
        """The loaded version (the one ``commit()`` builds on)."""
        self._require_loaded()
        return self._version  # type: ignore[return-value]

    @property
    def manifest(self) -> Optional[Manifest]:
        """The manifest of the loaded version (None for the empty version 0)."""
        self._require_loaded()
        return self._manifest

    @property
    def runs(self) -> Optional[RunContext]:
        return self._gate.runs

    def versions(self) -> list[int]:
        """Committed versions in checkpoint storage, ascending (0, the empty state, is implicit)."""
        return list_versions(self._storage)

    def latest_version(self) -> int:
        versions = self.versions()
        return versions[-1] if versions else 0

    # ------------------------------------------------------------------ loading
    def load(self, version: int) -> "VersionedStore":
        """Make the store hold ``version``; uncommitted writes are discarded.

        Raises ``VersionNotFoundError`` (listing the versions that exist) if checkpoint
        storage has no such version, and ``CheckpointCorruptError`` naming the file if
        any file the version needs is missing or damaged.
        """
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"version must be a non-negative integer, got {version!r}")
        with self._lock, self._local_errors(f"loading version {version}"):
            self._require_open()
            started = time.perf_counter()
            self._overlay.clear()
            self._snapshot_decision = None
            # A local copy at this version is the valid one: this run made it or chose it,
            # and runs registered later never change what an earlier reader loads.
            held = HeldCopy(self._version if self._backend is not None else None, self._state_origin,
                            self._snapshot_aliases)
            plan = plan_restore(self._storage, self._gate, version, held)
            if plan.mode == "cached":
                self.last_restore = RestoreMetrics(version=version, mode="cached")
                return self
            manifest = plan.manifest
            base = manifest.base_snapshot if manifest is not None else None
            fetched = FetchStats()
            snapshot_done = started
            try:
                if plan.mode != "replay":  # "empty" or "restore": replace the local copy
                    if base is None:
                        self._reset_to_empty()
                    else:
                        self._close_backend()
                        self._backend, self._shared_index, fetched = open_base_snapshot(
                            self._storage, manifest, self._factory, self._config, self._work_dir)  # type: ignore[arg-type]
                        self._state_origin = base.path
                snapshot_done = time.perf_counter()
                backend = self._backend
                for ref in plan.replay:
                    replay_changelog(self._storage, backend, ref, manifest, self._work_dir)  # type: ignore[arg-type]
            except BaseException:
                self._invalidate()
                raise
            self._version = version
            self._manifest = manifest
            self._num_keys = manifest.num_keys if manifest is not None else 0
            if plan.replay:
                self._state_origin = plan.replay[-1].path
            self.last_restore = restore_metrics(plan, fetched, started, snapshot_done)
            return self

    # ------------------------------------------------------------------ commit
    def commit_takes_snapshot(self) -> bool:
        """Whether the next ``commit()`` will also take a snapshot (TTL's full-snapshot
        cleanup removes every expired entry first, so snapshots hold none)."""
        self._require_loaded()
        return self._snapshot_due()

    def _snapshot_due(self) -> bool:
        """Whether the commit on the loaded version snapshots: its chain (rebased on the newest
        background snapshot) reaches ``snapshot_interval``, and no upload is in flight. Decided
        once per loaded version, so that TTL's full-snapshot cleanup and the commit agree."""
        decided = self._snapshot_decision
        if decided is not None and decided[0] == self._version:
            return decided[1]
        due = snapshots.snapshot_due(self._config.snapshot_interval, self._manifest, self._background)
        self._snapshot_decision = (self._version, due)  # type: ignore[assignment]
        return due

    def commit(self) -> int:
        """Persist the pending writes as version ``loaded + 1`` and return that number."""
        overlay = self._overlay
        return self._commit(SpilledWrites(overlay) if overlay.spill is not None else OverlayWrites(overlay))

    def commit_writes(self, writes: ArrowWrites) -> int:
        """Persist ``writes`` -- a whole epoch, nothing staged besides -- as version ``loaded + 1``
        and return that number (what the provider does with the epoch its shim ships)."""
        with self._lock:
            if len(self._overlay):
                raise StoreStateError(f"{len(self._overlay)} writes are staged already; commit_writes takes "
                                      "a whole epoch")
            return self._commit(writes)

    def _commit(self, writes: EpochWrites) -> int:
        """Run the commit pipeline (:mod:`.commit`) and take its outcome over."""
        with self._lock, self._local_errors(f"committing version {(self._version or 0) + 1}"):
            self._require_loaded()
            started = time.perf_counter()
            assert self._backend is not None and self._version is not None
            snapshot_due = self._snapshot_due()
            self._snapshot_decision = None
            outcome = commit_epoch(
                writes, Loaded(self._backend, self._version, self._manifest, self._num_keys),
                storage=self._storage, gate=self._gate, backend_name=self._factory.name, snapshot_due=snapshot_due,
                background=self._background, capture=self._capture_snapshot, upload=self._upload_snapshot,
                invalidate=self._invalidate, scratch_dir=self._work_dir,
                replay_limit=C.SNAPSHOT_REPLAY_BYTES if self._config.snapshot_interval else 0)
            metrics, manifest = outcome.metrics, outcome.manifest
            if outcome.adopted:
                self._adopt_earlier_commit(outcome)
            else:
                if outcome.capture is not None or outcome.defer_capture:
                    self._hand_off(manifest, outcome.capture)
                    metrics.snapshot_taken = True
                self._overlay.clear()
                self._take_over(manifest, outcome.num_keys, outcome.origin)
                if metrics.snapshot_taken and self._background is None:
                    # New snapshots are what make old files obsolete: clean up right after
                    # (background snapshots clean up when their upload completes).
                    self._cleanup_quietly()
            metrics.duration_ms = (time.perf_counter() - started) * 1000
            self.last_commit = metrics
            return manifest.version

    def _adopt_earlier_commit(self, outcome: CommitOutcome) -> None:
        """Another attempt of this run committed the version first (a retry after its task
        failed late, or a speculative twin): our commit becomes a no-op. If its changes are
        byte-identical to ours, the local copy (which has ours applied) equals the version
        and is kept; otherwise the winner's version is loaded. Files we uploaded are
        orphans that retention removes."""
        winner = outcome.manifest
        if outcome.metrics.snapshot_taken:
            # The index points at SSTs our orphaned snapshot uploaded: never reuse them.
            self._shared_index = SharedFileIndex()
        if outcome.adopted == "identical":
            self._overlay.clear()
            self._take_over(winner, winner.num_keys, outcome.origin)
        else:
            self._load_committed(winner.version)
        _LOG.info("version %d of %s was already committed by another attempt of this run (commit %s); "
                  "this attempt's commit is a no-op (%s changes)", winner.version, self._storage.url,
                  winner.commit_id, "identical" if outcome.adopted == "identical" else "different")

    def _take_over(self, manifest: Manifest, num_keys: int, origin: str) -> None:
        """The local copy now holds ``manifest``'s version, produced by ``origin``."""
        self._version = manifest.version
        self._manifest = manifest
        self._num_keys = num_keys
        self._state_origin = origin

    # ------------------------------------------------------------------ import / export
    def import_version(self, version: int, entries: Iterable[tuple[bytes, bytes]],
                       batch_rows: int = C.ARROW_BATCH_ROWS) -> Manifest:
        """Create committed ``version`` directly from ``entries`` (every ``(key, value)`` of
        the state, system keys included), without committing the versions before it: how
        operations tools (restore, rescale, migrate) start a store at the version that follows
        a query's last committed batch. Entries are applied in batches of ``batch_rows``; the
        version is a full snapshot (:mod:`.transfer` gives the steps).

        With a run (:class:`RunContext` with a run id), the tool registers as a run that
        started at ``version - 1``, so copies of later versions by earlier runs (abandoned
        attempts) are never read, and if this run already committed ``version`` (an
        interrupted tool run again), that copy is kept and returned. Without a run the
        manifest is written unranked (replacing an unranked one).

        The store then holds ``version`` loaded, as after ``load(version)``.
        """
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"an imported version must be a positive integer, got {version!r}")
        with self._lock:
            self._require_open()
            started = time.perf_counter()
            rank = self._gate.import_rank(version)
            if rank != C.UNRANKED and self._storage.exists(layout.manifest_path(version, rank)):
                return self._load_committed(version)
            try:
                self._reset_to_empty()
                assert self._backend is not None
                num_keys = transfer.apply_entries(self._backend, entries, batch_rows)
                written = transfer.write_imported(
                    self._storage, version, num_keys, backend_name=self._factory.name, rank=rank,
                    run_id=self._gate.run_id, upload=self._upload_snapshot)
                if written is None:  # another attempt of this tool run got there first
                    return self._load_committed(version)
            except BaseException:
                self._invalidate()
                raise
            manifest, stats = written
            self._take_over(manifest, num_keys, manifest.base_snapshot.path)  # type: ignore[union-attr]
            metrics = CommitMetrics(version=version)
            record_snapshot(metrics, stats)
            metrics.num_updates = num_keys
            metrics.duration_ms = (time.perf_counter() - started) * 1000
            self.last_commit = metrics
            return manifest

    def _load_committed(self, version: int) -> Manifest:
        """Forget the local copy and load ``version`` as committed in storage."""
        self._invalidate()
        self.load(version)
        assert self._manifest is not None
        return self._manifest

    def export_view(self, directory: str) -> None:
        """Write an immutable, openable copy of the loaded committed version into ``directory``
        (for rocksdb a RocksDB checkpoint: hard-linked SSTs, no WAL), for readers in another
        process. Pending writes are not included."""
        with self._lock, self._local_errors(f"exporting a read view of version {self._version}"):
            backend = self._loaded_backend()
            try:
                transfer.export_view(backend, directory)
            except BaseException:
                # The snapshot flushes the live database first: after a failed flush RocksDB
                # keeps a background error, so the local copy is no longer trusted.
                self._invalidate()
                raise

    # ------------------------------------------------------------------ snapshots (engine/capture.py)
    def _capture_snapshot(self, version: int) -> Capture:
        """A local copy of the version just applied, for the background upload."""
        assert self._backend is not None
        return snapshots.capture_local(self._backend, version, self._factory.name, self._config.local_dir)

    def _capture_if_current(self, version: int, backend: Optional[KVBackend]) -> Optional[Capture]:
        """The background capture of committed ``version`` (called under the lock): a local copy
        if the store still holds exactly that version on the same local copy, else None (a later
        commit, a reload or a close came first)."""
        if self._closed or self._version != version or self._backend is not backend:
            return None
        try:
            with self._local_errors(f"capturing a snapshot of version {version}"):
                return self._capture_snapshot(version)
        except BaseException:
            # The capture flushes the live database first: after a failed flush RocksDB keeps a
            # background error, so the local copy is no longer trusted (the next load restores).
            self._invalidate()
            raise

    def _hand_off(self, manifest: Manifest, taken: Optional[Capture]) -> None:
        """Give committed ``manifest``'s version to the background thread: ``taken`` is a capture
        made inside the commit, else the thread captures once the commit released the lock."""
        assert self._background is not None
        version, backend = manifest.version, self._backend

        def take_capture() -> Optional[Capture]:
            return taken if taken is not None else self._capture_if_current(version, backend)

        self._background.submit(manifest, take_capture, self._shared_index, self._snapshot_uploaded,
                                self._cleanup_quietly)

    def _snapshot_uploaded(self, manifest: Manifest, ref: SnapshotRef) -> None:
        """A background snapshot of ``manifest``'s version is complete (called under the lock):
        point the version's manifest at it, unless that manifest was replaced or removed since
        (later commits rebase on it either way)."""
        self._snapshot_aliases[ref.path] = manifest.changelog.path
        snapshots.repoint_manifest(self._storage, manifest, ref, "snapshot.background.before-manifest",
                                   missing_ok=True)

    def _upload_snapshot(self, version: int) -> tuple[SnapshotRef, SnapshotStats]:
        assert self._backend is not None
        return snapshots.upload_inline(self._storage, self._backend, version, self._factory.name, self._work_dir,
                                       self._shared_index)

    # ------------------------------------------------------------------ maintenance
    def snapshot(self) -> Optional[CommitMetrics]:
        """Snapshot the loaded, committed version now (maintenance).

        Rewrites that version's manifest to restore from the new snapshot, unless another
        commit attempt has replaced the manifest since. Returns None if there is nothing
        to snapshot (version 0, or the version is already a snapshot).
        """
        if self._background is not None:
            self._background.wait()  # one upload at a time, and the shared-file index is not shared
        with self._lock, self._local_errors(f"snapshotting version {self._version}"):
            self._require_loaded()
            manifest = self._manifest
            if manifest is None or not manifest.replay:
                return None
            metrics = CommitMetrics(version=manifest.version)
            rewritten = snapshots.snapshot_in_place(self._storage, manifest, self._upload_snapshot, self._invalidate,
                                                    metrics)
            if rewritten is not None:
                self._manifest = rewritten
                self._state_origin = rewritten.base_snapshot.path  # type: ignore[union-attr]
            return metrics

    def cleanup(self) -> CleanupResult:
        """Delete checkpoint files no retained version needs (see ``checkpoint.retention``)."""
        with self._lock:
            return cleanup(self._storage, self._config.retained_versions, *self._cleanup_protection())

    def _cleanup_protection(self) -> tuple[frozenset[str], Optional[int]]:
        """What a background snapshot needs kept that no retained manifest names yet."""
        return self._background.protection() if self._background is not None else (frozenset(), None)

    def _cleanup_quietly(self) -> None:
        # Cleanup failing must not fail a commit that is already durable.
        try:
            cleanup(self._storage, self._config.retained_versions, *self._cleanup_protection())
        except Exception:
            _LOG.warning("checkpoint cleanup failed; it will be retried after the next snapshot", exc_info=True)

    def close(self) -> None:
        if self._background is not None:
            # Let a stopping query's last snapshot land (bounded: uploads retry for ~30 s at most).
            self._background.wait(timeout=120)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._close_backend()
            shutil.rmtree(self._work_dir, ignore_errors=True)

    def __enter__(self) -> "VersionedStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ the local copy
    def _reset_to_empty(self) -> None:
        self._close_backend()
        self._backend = self._factory.create_empty(os.path.join(self._work_dir, f"db-{layout.new_id()}"))
        self._shared_index = SharedFileIndex()
        self._version = 0
        self._manifest = None
        self._num_keys = 0
        self._state_origin = ""

    def _close_backend(self) -> None:
        """Close the local backend and remove the working directory; never raises."""
        backend, self._backend = self._backend, None
        discard_local_copy(backend, self._work_dir, self._storage.url)

    def _local_errors(self, doing: str) -> ContextManager[None]:
        """Map local disk failures in the block to LocalDiskError naming this store."""
        return local_disk_errors(store=self._storage.url, path=self._work_dir, doing=doing)

    def _invalidate(self) -> None:
        """Forget the local copy: it may not match any committed version any more."""
        try:
            self._close_backend()
        finally:
            self._version = None
            self._manifest = None
            self._state_origin = None
            self._overlay.clear()

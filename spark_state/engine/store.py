"""A versioned key-value store for one (operator, partition): the heart of the engine.

Versions follow Spark's state store contract. ``load(v)`` makes the store hold the state
as of version ``v`` (version 0 is the empty state); reads and writes then act on it, and
``commit()`` turns the pending writes into version ``v + 1`` and returns that number.
Spark's micro-batch epochs are the checkpoint barriers: the commit at the end of batch N
is the snapshot of epoch N.

Durability and atomicity of a commit, in order:

1. the epoch's changelog is written to checkpoint storage (durable, atomic);
2. the changes are applied to the local backend in one atomic batch;
3. every ``snapshot_interval`` commits, a snapshot is uploaded (incrementally);
4. the version's manifest is written, atomically replacing any earlier one.

With ``background_snapshots=True`` (the Spark provider) step 3 moves to a background thread,
after the commit: it captures the version locally (under the store's lock, only if the store
still holds that version), uploads it, then re-points the version's manifest at the snapshot,
and later commits rebase on it (:mod:`spark_state.checkpoint.background`).

The manifest is the commit point. A crash before step 4 leaves the previous version in
force. (The steps carry crash points, ``spark_state.testing.crashpoints``, where crash tests
SIGKILL the process; they do nothing unless a test enables them.) A retried or speculative commit
of the same version writes files under fresh ids;
then, for a store in a query run (a :class:`~spark_state.checkpoint.runs.RunContext`), the
first attempt to create the run's manifest of the version wins and a later attempt's
commit becomes a no-op that adopts the winner (see :mod:`spark_state.checkpoint.runs` for
how copies from different runs are told apart); without a run, the manifest is replaced
atomically. A failure anywhere marks the local copy untrusted, and the next ``load``
restores from checkpoint storage.

Local disk failures of the working directory (no space, read-only, permission, I/O error;
from the file system or from RocksDB) are raised as
:class:`~spark_state.errors.LocalDiskError` naming this store, the local path and the
cause; they too leave the local copy untrusted (it may hold half of an epoch).

Thread-safety: one task thread drives reads and writes; ``snapshot()``, ``cleanup()``
and ``close()`` may come from maintenance threads and are serialised with commits by a
lock.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import ContextManager, Iterable, Iterator, Optional, Sequence, Union

from .. import constants as C
from ..backends import KVBackend, backend_factory
from ..backends.base import BackendFactory
from ..checkpoint import changelog, layout
from ..checkpoint.background import BackgroundSnapshots, Capture
from ..checkpoint.checksum import crc32_bytes
from ..checkpoint.metadata import ChangelogRef, Manifest, SnapshotRef
from ..checkpoint.retention import CleanupResult, cleanup, list_copies, list_versions, read_manifest
from ..checkpoint.runs import RunContext
from ..checkpoint.snapshots import SharedFileIndex, SnapshotStats, download_snapshot, read_descriptor, upload_snapshot
from ..config import EngineConfig
from .epoch_writes import ArrowWrites, EpochWrites, OverlayWrites
from ..errors import (CheckpointCorruptError, CheckpointFileMissingError, ConcurrentWriterError, SparkStateError,
                     StoreStateError, VersionNotFoundError)
from .localdirs import process_root
from .overlay import MISSING, WriteOverlay, merge_sorted
from ..storage import CheckpointStorage, open_storage
from ..storage.localdisk import local_disk_errors
from ..testing import crashpoints

_LOG = logging.getLogger(__name__)


@dataclass
class CommitMetrics:
    """What the last commit did; surfaced as Spark custom metrics by the provider."""

    version: int = 0
    num_updates: int = 0
    num_deletes: int = 0
    changelog_bytes: int = 0
    snapshot_taken: bool = False
    snapshot_files_uploaded: int = 0
    snapshot_files_reused: int = 0
    snapshot_bytes_uploaded: int = 0
    duration_ms: float = 0.0
    #: Another attempt of the same run had committed this version first: "identical" (same
    #: changes; the local copy is kept) or "replaced" (different changes; the winner was
    #: loaded instead). Empty when this commit made the version.
    lost_to_earlier_attempt: str = ""


@dataclass
class RestoreMetrics:
    """How the last ``load`` obtained its version."""

    version: int = 0
    #: "cached" (already there), "replay" (changelogs on top of the local copy),
    #: "restore" (snapshot + changelogs from checkpoint storage) or "empty".
    mode: str = "empty"
    changelogs_replayed: int = 0
    snapshot_files_downloaded: int = 0
    duration_ms: float = 0.0


class VersionedStore:
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
        self._runs = runs
        # Rule 5 found, at the last load, that an earlier run committed past this one; raised at
        # the first commit (see _check_not_behind), since a run that has not committed yet may
        # be a reader: Spark's state data source passes a run id of its own.
        self._behind: Optional[ConcurrentWriterError] = None
        self._runs_checked_at: Optional[int] = None
        if isinstance(checkpoint, CheckpointStorage):
            self._storage = checkpoint
        else:
            self._storage = open_storage(checkpoint, self._config.storage_options)
        self._factory: BackendFactory = backend_factory(self._config.backend, self._config)
        # In this process's directory, which dead processes' successors remove (localdirs).
        with local_disk_errors(store=self._storage.url, path=self._config.local_dir or tempfile.gettempdir(),
                               doing="creating the local working directory"):
            self._work_dir = os.path.join(process_root(self._config.local_dir), f"store-{layout.new_id()}")
        self._lock = threading.RLock()
        self._overlay = WriteOverlay()
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
        return self._runs

    @property
    def has_uncommitted_changes(self) -> bool:
        return len(self._overlay) > 0

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
            cached = self._backend is not None and self._version == version
            if self._runs is not None and not (cached and self._runs_checked_at == version):
                # Once per version: the provider loads again right before it commits.
                self._runs.before_load(version)
                self._runs_checked_at = version
            if cached:
                self.last_restore = RestoreMetrics(version=version, mode="cached")
                return self
            if version == 0:
                if self._runs is not None:  # a new query on a location another one writes?
                    self._check_not_behind(0, list_copies(self._storage))
                try:
                    self._reset_to_empty()
                except BaseException:
                    self._invalidate()
                    raise
                self.last_restore = RestoreMetrics(version=0, mode="empty")
                return self
            manifest = self._read_manifest_or_raise(version)
            replay_from = self._replay_start(manifest)
            if replay_from is not None:
                to_replay = manifest.replay[replay_from:]
                mode, downloaded = "replay", 0
            else:
                downloaded = self._restore_base(manifest)
                to_replay = manifest.replay
                mode = "restore"
            try:
                for ref in to_replay:
                    self._replay(ref, manifest)
            except BaseException:
                self._invalidate()
                raise
            self._version = version
            self._manifest = manifest
            self._num_keys = manifest.num_keys
            if to_replay:
                self._state_origin = to_replay[-1].path
            self.last_restore = RestoreMetrics(
                version=version, mode=mode, changelogs_replayed=len(to_replay),
                snapshot_files_downloaded=downloaded,
                duration_ms=(time.perf_counter() - started) * 1000,
            )
            return self

    def _check_not_behind(self, version: int, copies: dict[int, list[int]]) -> None:
        """Rule 5 of the commit protocol (checkpoint/runs.py) for a load of ``version``. A run
        that has committed here before fails at once; one that has not may only be reading
        (Spark's state data source passes a run id of its own, and reading an old version is
        what it is for), so its failure waits for its first commit, still before it writes."""
        assert self._runs is not None
        self._behind = None
        try:
            self._runs.check_not_behind(version, copies, self._storage.url)
        except ConcurrentWriterError as behind:
            if self._runs.own is not None:
                raise
            self._behind = behind

    def _read_manifest_or_raise(self, version: int) -> Manifest:
        """The manifest of the copy of ``version`` to load: the valid one for this run, or
        (without a run) the unranked one, else the highest-ranked."""
        if self._runs is None:
            try:
                return read_manifest(self._storage, version)
            except CheckpointFileMissingError:
                pass
        copies = list_copies(self._storage)
        ranks = copies.get(version, [])
        if self._runs is not None:
            self._check_not_behind(version, copies)
        rank = self._runs.choose(version, ranks) if self._runs is not None else (max(ranks) if ranks else None)
        if rank is None:
            if ranks:
                raise VersionNotFoundError(
                    version, sorted(copies), self._storage.url,
                    detail=f"its copies (run ranks {ranks}) were all made by attempts that a later run "
                           "superseded, so none of them is a committed state")
            raise VersionNotFoundError(version, sorted(copies), self._storage.url)
        return read_manifest(self._storage, version, rank)

    def _replay_start(self, manifest: Manifest) -> Optional[int]:
        """Index of the first changelog of ``manifest`` to replay on the local copy, or
        None when the local copy is not on this manifest's lineage."""
        if self._backend is None or self._version is None or self._version > manifest.version:
            return None
        origin = self._state_origin
        base = manifest.base_snapshot
        if origin == "" and base is None:
            return 0
        if base is not None and (origin == base.path or self._snapshot_aliases.get(base.path) == origin):
            return 0
        for i, ref in enumerate(manifest.replay):
            if ref.path == origin:
                return i + 1
        return None

    def _restore_base(self, manifest: Manifest) -> int:
        """Replace the local copy with the manifest's base snapshot (or empty state)."""
        base = manifest.base_snapshot
        if base is None:
            self._reset_to_empty()
            return 0
        self._close_backend()
        descriptor = read_descriptor(self._storage, base)
        snapshot_dir = os.path.join(self._work_dir, f"db-{layout.new_id()}")
        needed_by = self._storage.full_url(layout.manifest_path(manifest.version, manifest.rank))
        try:
            download_snapshot(self._storage, descriptor, snapshot_dir, needed_by)
            if descriptor.backend == self._factory.name:
                backend = self._factory.open_snapshot(snapshot_dir)
                shared = [f.name for f in descriptor.files if f.path.startswith(C.SHARED_DIR + "/")]
                self._shared_index = SharedFileIndex.from_descriptor(descriptor, shared)
            else:
                backend = self._convert_snapshot(descriptor.backend, snapshot_dir)
                self._shared_index = SharedFileIndex()
        except BaseException:
            self._invalidate()
            raise
        self._backend = backend
        self._state_origin = base.path
        self._version = base.version
        return len(descriptor.files)

    def _convert_snapshot(self, written_by: str, snapshot_dir: str) -> KVBackend:
        """Open a snapshot written by another backend and copy it into ours, so that a
        query can switch backends on restart (like a Flink canonical savepoint)."""
        _LOG.info("converting a %s snapshot to the %s backend", written_by, self._factory.name)
        source = backend_factory(written_by, self._config).open_snapshot(snapshot_dir)
        target = self._factory.create_empty(os.path.join(self._work_dir, f"db-{layout.new_id()}"))
        try:
            target.apply(source.iterate())
        finally:
            source.close()
            shutil.rmtree(snapshot_dir, ignore_errors=True)
        return target

    def _replay(self, ref: ChangelogRef, manifest: Manifest) -> None:
        url = self._storage.full_url(ref.path)
        try:
            data = self._storage.read_bytes(ref.path)
        except CheckpointFileMissingError:
            raise CheckpointFileMissingError(
                url, needed_by=self._storage.full_url(layout.manifest_path(manifest.version, manifest.rank))
            ) from None
        if len(data) != ref.size:
            raise CheckpointCorruptError(url, f"size is {len(data)} bytes, expected {ref.size}")
        crc = crc32_bytes(data)
        if crc != ref.crc32:
            raise CheckpointCorruptError(url, f"CRC-32 is {crc:#010x}, expected {ref.crc32:#010x}")
        assert self._backend is not None
        self._backend.apply(changelog.decode(data, url, ref.version))

    # ------------------------------------------------------------------ reads
    def get(self, key: bytes) -> Optional[bytes]:
        overlay = self._overlay
        pending = overlay.lookup(key)
        if pending is not MISSING:
            return pending  # type: ignore[return-value]
        value = self._loaded_backend().get(key)
        overlay.note_committed(key, value is not None)
        return value

    def multi_get(self, keys: Sequence[bytes]) -> list[Optional[bytes]]:
        backend = self._loaded_backend()
        lookup = self._overlay.lookup
        pending = [lookup(k) for k in keys]
        missing = [k for k, p in zip(keys, pending) if p is MISSING]
        fetched = backend.multi_get(missing)
        note = self._overlay.note_committed
        for key, value in zip(missing, fetched):
            note(key, value is not None)
        it = iter(fetched)
        return [next(it) if p is MISSING else p for p in pending]  # type: ignore[misc]

    def contains(self, key: bytes) -> bool:
        return self.get(key) is not None

    def iterate(self, start: Optional[bytes] = None, end: Optional[bytes] = None) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key < end`` (``None``: unbounded), ascending, including
        this epoch's uncommitted writes. Do not write while consuming the iterator."""
        backend = self._loaded_backend()
        committed = backend.iterate(start, end)
        if not len(self._overlay):
            return committed
        return merge_sorted(committed, self._overlay.sorted_items(start, end))

    def prefix_scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Entries whose key starts with ``prefix``, ascending."""
        return self.iterate(prefix or None, prefix_upper_bound(prefix))

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        return self.iterate()

    def num_keys(self) -> int:
        """Number of committed keys outside the system keyspace (exact: maintained at every
        commit; see ``constants.SYSTEM_KEY_PREFIX``)."""
        self._require_loaded()
        return self._num_keys

    def memory_bytes(self) -> int:
        return self._loaded_backend().memory_bytes()

    # ------------------------------------------------------------------ writes
    def put(self, key: bytes, value: bytes) -> None:
        if type(key) is not bytes or type(value) is not bytes:
            _reject_write(key, value)
        self._require_loaded()
        self._overlay.put(key, value)

    def delete(self, key: bytes) -> None:
        if type(key) is not bytes:
            _reject_write(key, b"")
        self._require_loaded()
        self._overlay.put(key, None)

    def put_many(self, keys: Iterable[bytes], values: Iterable[bytes]) -> None:
        """Stage many puts at once (cheaper than a loop of ``put``)."""
        self._require_loaded()
        pairs = list(zip(keys, values))
        for key, value in pairs:
            if type(key) is not bytes or type(value) is not bytes:
                _reject_write(key, value)
        self._overlay.put_many(pairs)

    def delete_many(self, keys: Iterable[bytes]) -> None:
        self._require_loaded()
        keys = list(keys)
        for key in keys:
            if type(key) is not bytes:
                _reject_write(key, b"")
        self._overlay.put_many((k, None) for k in keys)

    def stage_changes(
        self,
        keys: Sequence[bytes],
        values: Sequence[Optional[bytes]],
        existed: Optional[Sequence[int]] = None,
    ) -> None:
        """Stage a batch of writes (``None`` value = delete), e.g. an epoch's writes shipped
        from the JVM. ``existed`` optionally tells, per key, whether it existed before the
        epoch (1 / 0, or -1 when unknown); known answers spare the exact key count a lookup."""
        self._require_loaded()
        overlay = self._overlay
        if existed is not None:
            overlay.note_committed_many(keys, existed)
        overlay.put_many(zip(keys, values))

    def abort(self) -> None:
        """Drop this epoch's uncommitted writes; the loaded version stays."""
        self._overlay.clear()

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
        interval = self._config.snapshot_interval
        previous = self._manifest
        chain = previous.replay if previous else ()
        if self._background is not None:
            chain = self._background.rebase(previous.base_snapshot if previous else None, chain)[1]
        due = bool(interval) and len(chain) + 1 >= interval
        if due and self._background is not None and self._background.in_flight:
            due = False  # one upload at a time; a later commit takes the snapshot
        self._snapshot_decision = (self._version, due)  # type: ignore[assignment]
        return due

    def commit(self) -> int:
        """Persist the pending writes as version ``loaded + 1`` and return that number."""
        return self._commit(OverlayWrites(self._overlay))

    def commit_writes(self, writes: ArrowWrites) -> int:
        """Persist ``writes`` -- a whole epoch, nothing staged besides -- as version ``loaded + 1``
        and return that number (what the provider does with the epoch its shim ships)."""
        with self._lock:
            if len(self._overlay):
                raise StoreStateError(f"{len(self._overlay)} writes are staged already; commit_writes takes "
                                      "a whole epoch")
            return self._commit(writes)

    def _commit(self, writes: EpochWrites) -> int:
        with self._lock, self._local_errors(f"committing version {(self._version or 0) + 1}"):
            self._require_loaded()
            started = time.perf_counter()
            assert self._backend is not None and self._version is not None
            new_version = self._version + 1
            commit_id = layout.new_id()
            metrics = CommitMetrics(version=new_version)
            runs = self._runs
            rank = C.UNRANKED
            if runs is not None:
                if self._behind is not None:
                    raise self._behind
                rank = runs.commit_rank(self._version)
                runs.before_commit()
            # A capture taken inside this commit (set before anything can raise: the handler below
            # removes one that never committed), or one the background thread takes after it.
            capture: Optional[Capture] = None
            defer_capture = False
            try:
                crashpoints.reached("commit.before-changelog")
                data = writes.encode_changelog(new_version)
                path = layout.changelog_path(new_version, commit_id)
                self._storage.write_bytes(path, data)
                crashpoints.reached("commit.after-changelog")
                ref = ChangelogRef(path=path, size=len(data), crc32=crc32_bytes(data), version=new_version)
                # Exact key count: a put of a new key adds one, a delete of an existing key
                # removes one. Existence is known from this epoch's reads, and one batched
                # lookup answers for the remaining keys.
                # Keys of the engine's system keyspace (TTL index, markers) are not counted.
                num_keys = (self._num_keys + writes.user_puts()
                            - writes.existing_user_keys(self._backend.count_existing))
                snapshot_due = self._snapshot_due()
                self._snapshot_decision = None
                writes.apply_to(self._backend)
                crashpoints.reached("commit.after-apply")
                previous = self._manifest
                chain = (previous.replay if previous else ()) + (ref,)
                base = previous.base_snapshot if previous else None
                if self._background is not None:
                    base, chain = self._background.rebase(base, chain)
                    _record_background_stats(metrics, self._background.take_stats())
                    if snapshot_due and not self._background.in_flight:
                        if self._background.last_capture_skipped:
                            # Commits came back to back and the previous capture found the store
                            # moved on: take this one now, so that snapshots keep landing.
                            capture = self._capture_snapshot(new_version)
                        else:
                            defer_capture = True  # by the background thread, once this commit returned
                elif snapshot_due:
                    base, stats = self._upload_snapshot(new_version)
                    chain = ()
                    _record_snapshot(metrics, stats)
                manifest = Manifest(
                    version=new_version, commit_id=commit_id, backend=self._factory.name,
                    changelog=ref, base_snapshot=base, replay=chain, num_keys=num_keys,
                    rank=rank, run_id=runs.run_id if runs is not None else None,
                )
                crashpoints.reached("commit.before-manifest")
                try:
                    # Ranked: create-if-absent, the first attempt of the run to get here wins.
                    self._storage.write_bytes(layout.manifest_path(new_version, rank), manifest.to_json(),
                                              overwrite=rank == C.UNRANKED)
                except FileExistsError:
                    if capture is not None:  # ours lost: the capture is not the committed version
                        shutil.rmtree(capture.directory, ignore_errors=True)
                    return self._adopt_earlier_commit(new_version, rank, ref, metrics, started)
                crashpoints.reached("commit.after-manifest")
            except BaseException:
                if capture is not None:
                    shutil.rmtree(capture.directory, ignore_errors=True)
                self._invalidate()
                raise
            if capture is not None or defer_capture:
                assert self._background is not None
                # A deferred capture runs once this commit has released the lock (held until it returns).
                taken, backend = capture, self._backend

                def take_capture() -> Optional[Capture]:
                    return taken if taken is not None else self._capture_if_current(new_version, backend)

                self._background.submit(manifest, take_capture, self._shared_index, self._snapshot_uploaded,
                                        self._cleanup_quietly)
                metrics.snapshot_taken = True
            self._overlay.clear()
            self._version = new_version
            self._manifest = manifest
            self._num_keys = num_keys
            self._state_origin = base.path if metrics.snapshot_taken and self._background is None and base else ref.path
            metrics.num_deletes = writes.num_deletes
            metrics.num_updates = writes.num_puts
            metrics.changelog_bytes = len(data)
            if metrics.snapshot_taken and self._background is None:
                # New snapshots are what make old files obsolete: clean up right after
                # (background snapshots clean up when their upload completes).
                self._cleanup_quietly()
            metrics.duration_ms = (time.perf_counter() - started) * 1000
            self.last_commit = metrics
            return new_version

    def import_version(self, version: int, entries: Iterable[tuple[bytes, bytes]],
                       batch_rows: int = C.ARROW_BATCH_ROWS) -> Manifest:
        """Create committed ``version`` directly from ``entries`` (every ``(key, value)`` of
        the state, system keys included), without committing the versions before it.

        This is how operations tools (restore, rescale, migrate) start a store at the
        version that follows a query's last committed batch. The entries are applied to a
        fresh, empty local backend in batches of ``batch_rows`` (memory stays bounded), a
        full snapshot of the result is uploaded, and the manifest is written last (the
        commit point): ``base_snapshot`` is that snapshot, ``replay`` is empty and
        ``changelog`` is an empty changelog (an imported version has no epoch of its own).

        With a run (:class:`RunContext` with a run id), the tool registers as a run that
        started at ``version - 1`` (as if it had run the batch that made ``version``), so
        copies of later versions by earlier runs -- abandoned attempts -- are never read,
        and the manifest is created with create-if-absent: if this run already committed
        ``version`` (an interrupted tool run again), that copy is kept and returned.
        Without a run the manifest is written unranked (replacing an unranked one).

        The store then holds ``version`` loaded, as after ``load(version)``.
        """
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ValueError(f"an imported version must be a positive integer, got {version!r}")
        with self._lock:
            self._require_open()
            started = time.perf_counter()
            runs = self._runs
            rank = C.UNRANKED
            if runs is not None:
                runs.before_load(version - 1)
                rank = runs.commit_rank(version - 1)
                runs.before_commit()
                if self._storage.exists(layout.manifest_path(version, rank)):
                    self._invalidate()
                    self.load(version)
                    assert self._manifest is not None
                    return self._manifest
            try:
                self._reset_to_empty()
                backend = self._backend
                assert backend is not None
                num_keys = 0
                batch: list[tuple[bytes, Optional[bytes]]] = []
                system = C.SYSTEM_KEY_PREFIX
                for key, value in entries:
                    if type(key) is not bytes or type(value) is not bytes:
                        _reject_write(key, value)
                    batch.append((key, value))
                    if key[:1] != system:
                        num_keys += 1
                    if len(batch) >= batch_rows:
                        backend.apply(batch)
                        batch = []
                if batch:
                    backend.apply(batch)
                commit_id = layout.new_id()
                data = changelog.encode(version, {})
                path = layout.changelog_path(version, commit_id)
                self._storage.write_bytes(path, data)
                ref = ChangelogRef(path=path, size=len(data), crc32=crc32_bytes(data), version=version)
                base, stats = self._upload_snapshot(version)
                manifest = Manifest(
                    version=version, commit_id=commit_id, backend=self._factory.name, changelog=ref,
                    base_snapshot=base, replay=(), num_keys=num_keys, rank=rank,
                    run_id=runs.run_id if runs is not None else None,
                )
                try:
                    self._storage.write_bytes(layout.manifest_path(version, rank), manifest.to_json(),
                                              overwrite=rank == C.UNRANKED)
                except FileExistsError:  # another attempt of this tool run got there first
                    self._invalidate()
                    self.load(version)
                    assert self._manifest is not None
                    return self._manifest
            except BaseException:
                self._invalidate()
                raise
            self._version = version
            self._manifest = manifest
            self._num_keys = num_keys
            self._state_origin = base.path
            metrics = CommitMetrics(version=version)
            _record_snapshot(metrics, stats)
            metrics.num_updates = num_keys
            metrics.duration_ms = (time.perf_counter() - started) * 1000
            self.last_commit = metrics
            return manifest

    def _adopt_earlier_commit(self, version: int, rank: int, ours: ChangelogRef, metrics: CommitMetrics,
                              started: float) -> int:
        """Another attempt of this run committed ``version`` first (a retry after its task
        failed late, or a speculative twin): our commit becomes a no-op. If its changes are
        byte-identical to ours, the local copy (which has ours applied) equals the version
        and is kept; otherwise the winner's version is loaded. Files we uploaded are
        orphans that retention removes."""
        winner = read_manifest(self._storage, version, rank)
        if metrics.snapshot_taken:
            # The index points at SSTs our orphaned snapshot uploaded: never reuse them.
            self._shared_index = SharedFileIndex()
        identical = (winner.changelog.size, winner.changelog.crc32) == (ours.size, ours.crc32)
        if identical:
            self._overlay.clear()
            self._version = version
            self._manifest = winner
            self._num_keys = winner.num_keys
            base = winner.base_snapshot
            self._state_origin = base.path if base is not None and not winner.replay else winner.changelog.path
        else:
            self._invalidate()
            self.load(version)
        _LOG.info("version %d of %s was already committed by another attempt of this run (commit %s); "
                  "this attempt's commit is a no-op (%s changes)", version, self._storage.url,
                  winner.commit_id, "identical" if identical else "different")
        metrics.lost_to_earlier_attempt = "identical" if identical else "replaced"
        metrics.duration_ms = (time.perf_counter() - started) * 1000
        self.last_commit = metrics
        return version

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

    def _capture_snapshot(self, version: int) -> Capture:
        """A local copy of the version just applied, for the background upload. It lives beside
        the working directory (same file system: RocksDB hard-links its SSTs), not in it, because
        a restore replaces the working directory while the upload may still run."""
        assert self._backend is not None
        local = os.path.join(process_root(self._config.local_dir), f"snapshot-{layout.new_id()}")
        try:
            files = self._backend.write_snapshot(local)
        except BaseException:
            shutil.rmtree(local, ignore_errors=True)
            raise
        return Capture(version, local, files, self._factory.name)

    def _snapshot_uploaded(self, manifest: Manifest, ref: SnapshotRef) -> None:
        """A background snapshot of ``manifest``'s version is complete (called under the lock):
        point the version's manifest at it, unless that manifest was replaced or removed since."""
        self._snapshot_aliases[ref.path] = manifest.changelog.path
        try:
            current = read_manifest(self._storage, manifest.version, manifest.rank)
        except CheckpointFileMissingError:
            current = None  # retention removed the version meanwhile: later commits still rebase
        if current is not None and current.commit_id == manifest.commit_id:
            crashpoints.reached("snapshot.background.before-manifest")
            rewritten = Manifest(
                version=manifest.version, commit_id=manifest.commit_id, backend=manifest.backend,
                changelog=manifest.changelog, base_snapshot=ref, replay=(), num_keys=manifest.num_keys,
                rank=manifest.rank, run_id=manifest.run_id,
            )
            self._storage.write_bytes(layout.manifest_path(manifest.version, manifest.rank), rewritten.to_json())

    def _upload_snapshot(self, version: int) -> tuple[SnapshotRef, SnapshotStats]:
        assert self._backend is not None
        local = os.path.join(self._work_dir, f"snapshot-{layout.new_id()}")
        try:
            files = self._backend.write_snapshot(local)
            return upload_snapshot(self._storage, version, self._factory.name, files, self._shared_index)
        finally:
            shutil.rmtree(local, ignore_errors=True)

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
            try:
                base, stats = self._upload_snapshot(manifest.version)
            except SparkStateError:
                raise  # checkpoint storage failed; the local copy is intact
            except BaseException:
                self._invalidate()  # the local flush failed: RocksDB keeps a background error
                raise
            _record_snapshot(metrics, stats)
            current = read_manifest(self._storage, manifest.version, manifest.rank)
            if current.commit_id != manifest.commit_id:
                _LOG.warning("version %d was re-committed meanwhile; keeping its manifest", manifest.version)
                return metrics
            crashpoints.reached("maintenance.snapshot.before-manifest")
            rewritten = Manifest(
                version=manifest.version, commit_id=manifest.commit_id, backend=manifest.backend,
                changelog=manifest.changelog, base_snapshot=base, replay=(), num_keys=manifest.num_keys,
                rank=manifest.rank, run_id=manifest.run_id,
            )
            self._storage.write_bytes(layout.manifest_path(manifest.version, manifest.rank), rewritten.to_json())
            self._manifest = rewritten
            self._state_origin = base.path
            return metrics

    def export_view(self, directory: str) -> None:
        """Write an immutable, openable copy of the loaded committed version into ``directory``
        (for rocksdb a RocksDB checkpoint: hard-linked SSTs, no WAL), for readers in another
        process. Pending writes are not included."""
        with self._lock, self._local_errors(f"exporting a read view of version {self._version}"):
            backend = self._loaded_backend()
            try:
                os.makedirs(os.path.dirname(os.path.abspath(directory)), exist_ok=True)
                backend.write_snapshot(directory)
            except BaseException:
                # The snapshot flushes the live database first: after a failed flush RocksDB
                # keeps a background error, so the local copy is no longer trusted.
                shutil.rmtree(directory, ignore_errors=True)
                self._invalidate()
                raise

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

    # ------------------------------------------------------------------ internals
    def _reset_to_empty(self) -> None:
        self._close_backend()
        self._backend = self._factory.create_empty(os.path.join(self._work_dir, f"db-{layout.new_id()}"))
        self._shared_index = SharedFileIndex()
        self._version = 0
        self._manifest = None
        self._num_keys = 0
        self._state_origin = ""

    def _close_backend(self) -> None:
        """Close the local backend and remove the working directory. Never raises: the local
        copy is disposable (checkpoint storage holds the state), and a backend that failed
        (e.g. RocksDB after a full disk, whose close() flushes) must not hide the error that
        brought us here, nor keep ``load`` from restoring."""
        backend, self._backend = self._backend, None
        if backend is not None:
            try:
                backend.close()
            except Exception:
                _LOG.warning("closing the local copy of %s failed; discarding it", self._storage.url, exc_info=True)
        if os.path.isdir(self._work_dir):
            shutil.rmtree(self._work_dir, ignore_errors=True)

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

    def _require_open(self) -> None:
        if self._closed:
            raise StoreStateError("the store is closed")

    def _require_loaded(self) -> None:
        self._require_open()
        if self._backend is None or self._version is None:
            raise StoreStateError("no version is loaded: call load(version) first")

    def _loaded_backend(self) -> KVBackend:
        self._require_loaded()
        return self._backend  # type: ignore[return-value]


def _reject_write(key: object, value: object) -> None:
    """A write that could not be committed: say so now, not at commit with an Arrow error."""
    if value is None:
        raise TypeError("value must be bytes; use delete() to remove a key")
    for what, obj in (("key", key), ("value", value)):
        if type(obj) is not bytes:
            hint = " (encode text, e.g. .encode('utf-8'))" if isinstance(obj, str) else \
                " (serialize it first; spark_state.state has typed serializers)" if not isinstance(
                    obj, (bytearray, memoryview)) else " (pass bytes(...))"
            raise TypeError(f"store {what}s must be bytes, got {type(obj).__name__} {obj!r:.60}{hint}")


def prefix_upper_bound(prefix: bytes) -> Optional[bytes]:
    """The smallest key greater than every key starting with ``prefix`` (None: no bound)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def _record_background_stats(metrics: CommitMetrics, stats: SnapshotStats) -> None:
    """Background uploads completed since the previous commit count in this commit's metrics."""
    metrics.snapshot_files_uploaded = stats.files_uploaded
    metrics.snapshot_files_reused = stats.files_reused
    metrics.snapshot_bytes_uploaded = stats.bytes_uploaded


def _record_snapshot(metrics: CommitMetrics, stats: SnapshotStats) -> None:
    metrics.snapshot_taken = True
    metrics.snapshot_files_uploaded = stats.files_uploaded
    metrics.snapshot_files_reused = stats.files_reused
    metrics.snapshot_bytes_uploaded = stats.bytes_uploaded

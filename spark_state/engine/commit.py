"""The commit pipeline: one epoch's writes become the next version.

:func:`commit_epoch` runs the steps of a commit on explicit inputs and returns a
:class:`CommitOutcome`; ``VersionedStore`` calls it under its lock and then takes the outcome
over (its loaded version, manifest, key count and lineage; the background hand-off; cleanup).

Steps, in order (crash points in brackets, ``spark_state.testing.crashpoints``):

1. the run gate gives the rank to commit with (:meth:`.fencing.RunGate.commit_rank`: registers
   the run at its first commit, fails a fenced run or one that started behind) -- before
   anything is written, and a failure here leaves the local copy as it was;
2. [``commit.before-changelog``] the epoch's changelog is written to checkpoint storage as
   ``changelogs/<version>-<commit id>.arrow`` (a fresh commit id per attempt, so a retried or
   speculative attempt never overwrites a file another attempt's manifest may name);
3. [``commit.after-changelog``] the writes are applied to the local backend in one batch;
4. [``commit.after-apply``] the new manifest's chain is the loaded one plus this changelog,
   rebased on the newest background snapshot; if a snapshot is due -- decided before the epoch,
   or because the chain's changelogs, this one included, pass ``replay_limit`` bytes (an epoch
   of millions of keys is snapshotted at once, so a restore never replays it) -- it is uploaded
   now (inline) or captured for the background thread;
5. [``commit.before-manifest``] the manifest is written -- the **commit point**. Unranked it
   replaces any earlier one atomically; ranked (a run) it is created if absent, and an attempt
   that finds it present lost to an earlier attempt of its run: its commit becomes a no-op
   that adopts the winner (:attr:`CommitOutcome.adopted`);
6. [``commit.after-manifest``] done.

A crash before step 5 leaves the previous version in force. Any failure after step 1 calls
``invalidate`` (the local copy may hold half an epoch) and re-raises.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Callable, Optional

from .. import constants as C
from ..backends import KVBackend
from ..checkpoint import layout
from ..checkpoint.background import BackgroundSnapshots, Capture
from ..checkpoint.metadata import ChangelogRef, Manifest, SnapshotRef
from ..checkpoint.retention import read_manifest
from ..checkpoint.snapshots import SnapshotStats
from ..storage import CheckpointStorage
from ..storage.spool import SpooledUpload
from ..testing import crashpoints
from .epoch_writes import EpochWrites
from .fencing import RunGate
from .metrics import CommitMetrics, record_snapshot, record_upload_stats


@dataclass(frozen=True)
class Loaded:
    """The committed version a commit builds on: the local ``backend`` holds ``version``, whose
    manifest is ``manifest`` (None for the empty version 0) with ``num_keys`` user keys."""

    backend: KVBackend
    version: int
    manifest: Optional[Manifest]
    num_keys: int


@dataclass
class CommitOutcome:
    """What a commit made. With ``adopted`` set ("identical" or "replaced") another attempt of
    the run had committed the version first: ``manifest`` is the winner's, and the local copy
    holds our changes (equal to the winner's only when "identical")."""

    manifest: Manifest
    metrics: CommitMetrics
    #: user keys of the new version
    num_keys: int
    #: the path that produced the local state now (this changelog, or the inline snapshot)
    origin: str
    #: a capture taken inside the commit, for the background upload
    capture: Optional[Capture] = None
    #: the background thread captures the version once the commit has returned
    defer_capture: bool = False
    adopted: str = ""


def commit_epoch(writes: EpochWrites, loaded: Loaded, *, storage: CheckpointStorage, gate: RunGate,
                 backend_name: str, snapshot_due: bool, background: Optional[BackgroundSnapshots],
                 capture: Callable[[int], Capture], upload: Callable[[int], tuple[SnapshotRef, SnapshotStats]],
                 invalidate: Callable[[], None], scratch_dir: str, replay_limit: int = 0) -> CommitOutcome:
    """Persist ``writes`` as version ``loaded.version + 1`` (steps in the module docstring).

    ``capture(v)`` / ``upload(v)`` snapshot the local copy (for the background thread / now);
    ``invalidate()`` forgets the local copy after a failure; a large changelog is spooled through
    a file in ``scratch_dir`` (local disk) on its way to checkpoint storage.
    """
    backend = loaded.backend
    previous = loaded.manifest
    new_version = loaded.version + 1
    commit_id = layout.new_id()
    metrics = CommitMetrics(version=new_version)
    rank = gate.commit_rank(loaded.version)
    # A capture taken inside this commit (set before anything can raise: the handler below
    # removes one that never committed), or one the background thread takes after it.
    taken: Optional[Capture] = None
    defer_capture = False
    try:
        crashpoints.reached("commit.before-changelog")
        path = layout.changelog_path(new_version, commit_id)
        with SpooledUpload(scratch_dir) as spool:  # in memory unless the epoch is large
            writes.write_changelog(new_version, spool)
            spool.store(storage, path)
            changelog_bytes, changelog_crc = spool.size, spool.crc32
        crashpoints.reached("commit.after-changelog")
        ref = ChangelogRef(path=path, size=changelog_bytes, crc32=changelog_crc, version=new_version)
        # Exact key count: a put of a new key adds one, a delete of an existing key removes one.
        # Existence is known from this epoch's reads, and one batched lookup answers for the
        # remaining keys. Keys of the engine's system keyspace (TTL index, markers) are not counted.
        num_keys = loaded.num_keys + writes.user_puts() - writes.existing_user_keys(backend.count_existing)
        writes.apply_to(backend)
        crashpoints.reached("commit.after-apply")
        chain = (previous.replay if previous else ()) + (ref,)
        base = previous.base_snapshot if previous else None
        origin = ref.path
        if background is not None:
            base, chain = background.rebase(base, chain)
            record_upload_stats(metrics, background.take_stats())
        if replay_limit and sum(r.size for r in chain) >= replay_limit:
            snapshot_due = True
        if background is not None:
            if snapshot_due and not background.in_flight:
                if background.last_capture_skipped:
                    # Commits came back to back and the previous capture found the store moved
                    # on: take this one now, so that snapshots keep landing.
                    taken = capture(new_version)
                else:
                    defer_capture = True  # by the background thread, once this commit returned
        elif snapshot_due:
            base, stats = upload(new_version)
            chain = ()
            origin = base.path
            record_snapshot(metrics, stats)
        manifest = Manifest(
            version=new_version, commit_id=commit_id, backend=backend_name, changelog=ref, base_snapshot=base,
            replay=chain, num_keys=num_keys, rank=rank, run_id=gate.run_id,
        )
        crashpoints.reached("commit.before-manifest")
        try:
            # Ranked: create-if-absent, the first attempt of the run to get here wins.
            storage.write_bytes(layout.manifest_path(new_version, rank), manifest.to_json(),
                                overwrite=rank == C.UNRANKED)
        except FileExistsError:
            if taken is not None:  # ours lost: the capture is not the committed version
                shutil.rmtree(taken.directory, ignore_errors=True)
                taken = None
            winner = read_manifest(storage, new_version, rank)
            identical = (winner.changelog.size, winner.changelog.crc32) == (ref.size, ref.crc32)
            metrics.lost_to_earlier_attempt = "identical" if identical else "replaced"
            return CommitOutcome(winner, metrics, winner.num_keys, adopted_origin(winner),
                                 adopted=metrics.lost_to_earlier_attempt)
        crashpoints.reached("commit.after-manifest")
    except BaseException:
        if taken is not None:
            shutil.rmtree(taken.directory, ignore_errors=True)
        invalidate()
        raise
    metrics.num_deletes = writes.num_deletes
    metrics.num_updates = writes.num_puts
    metrics.changelog_bytes = changelog_bytes
    return CommitOutcome(manifest, metrics, num_keys, origin, taken, defer_capture)


def adopted_origin(winner: Manifest) -> str:
    """The lineage of a local copy that holds exactly ``winner``'s version."""
    base = winner.base_snapshot
    return base.path if base is not None and not winner.replay else winner.changelog.path

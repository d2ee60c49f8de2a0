"""What a store's last commit and last load did: plain values the provider surfaces as Spark
custom metrics (``VersionedStore.last_commit`` / ``last_restore``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..checkpoint.snapshots import SnapshotStats


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


def record_snapshot(metrics: CommitMetrics, stats: SnapshotStats) -> None:
    """A snapshot taken (and uploaded) by this commit or maintenance call."""
    metrics.snapshot_taken = True
    record_upload_stats(metrics, stats)


def record_upload_stats(metrics: CommitMetrics, stats: SnapshotStats) -> None:
    """Upload figures; for background snapshots, those completed since the previous commit."""
    metrics.snapshot_files_uploaded = stats.files_uploaded
    metrics.snapshot_files_reused = stats.files_reused
    metrics.snapshot_bytes_uploaded = stats.bytes_uploaded

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
    #: bytes of the changelogs replayed
    changelog_bytes_replayed: int = 0
    #: the base snapshot's files downloaded (or copied) and their bytes
    snapshot_files_downloaded: int = 0
    snapshot_bytes_downloaded: int = 0
    #: the base snapshot's files hard-linked from a checkpoint on the same file system
    snapshot_files_linked: int = 0
    #: time bringing in and opening the base snapshot, and replaying the changelogs
    snapshot_ms: float = 0.0
    replay_ms: float = 0.0
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


def describe_restore(m: RestoreMetrics) -> str:
    """What a load waited for, in words (the slow-load log line)."""
    if m.mode not in ("restore", "replay"):
        return f"version {m.version} ({m.mode})"
    parts = []
    if m.mode == "restore" and m.snapshot_files_downloaded + m.snapshot_files_linked == 0:
        parts.append("no snapshot yet")
    elif m.mode == "restore":
        parts.append(f"its base snapshot in {m.snapshot_ms:.0f} ms ({m.snapshot_files_downloaded} files, "
                     f"{m.snapshot_bytes_downloaded / 1e6:.1f} MB fetched; {m.snapshot_files_linked} linked)")
    parts.append(f"{m.changelogs_replayed} changelogs ({m.changelog_bytes_replayed / 1e6:.1f} MB) replayed in "
                 f"{m.replay_ms:.0f} ms")
    what = "restored from checkpoint storage" if m.mode == "restore" else "brought up to date"
    return f"version {m.version} {what}: " + ", ".join(parts)

"""Cleanup of checkpoint storage: keep exactly what the retained versions need.

The retained versions are the newest ``retained_versions`` manifests. What they need is
recomputed from their manifests and snapshot descriptors on every cleanup (the approach
of Spark's RocksDB file manager) rather than kept as reference counts, so a crash midway
can never leave a count wrong.

A file nothing references is deleted only if its version (the leading number of its
name: the version a changelog produced, a snapshot captured, or the snapshot that first
uploaded a shared file) is older than the oldest retained version. Unreferenced files at
or above it can belong to a commit or snapshot still being written by another
attempt of the same version (Spark retries and speculative tasks), whose manifest is not
there yet; they become deletable once retention moves past them. In a run without
retries nothing falls in that band, so what remains is exactly what retained versions need.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import constants as C
from ..storage import CheckpointStorage
from . import layout
from .metadata import Manifest
from .snapshots import read_descriptor


@dataclass
class CleanupResult:
    retained_versions: list[int] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    kept: int = 0


def list_versions(storage: CheckpointStorage) -> list[int]:
    """Versions with a manifest, ascending."""
    versions = (layout.parse_manifest_name(n) for n in storage.list_dir(C.MANIFEST_DIR))
    return sorted(v for v in versions if v is not None)


def read_manifest(storage: CheckpointStorage, version: int) -> Manifest:
    path = layout.manifest_path(version)
    return Manifest.from_json(storage.read_bytes(path), storage.full_url(path))


def needed_files(storage: CheckpointStorage, manifests: list[Manifest]) -> set[str]:
    """Every path the given manifests need to restore (manifests, changelogs, snapshots)."""
    needed: set[str] = set()
    seen_snapshots: set[str] = set()
    for manifest in manifests:
        needed.add(layout.manifest_path(manifest.version))
        needed.add(manifest.changelog.path)
        needed.update(c.path for c in manifest.replay)
        base = manifest.base_snapshot
        if base is not None and base.path not in seen_snapshots:
            seen_snapshots.add(base.path)
            needed.add(base.path)
            needed.update(f.path for f in read_descriptor(storage, base).files)
    return needed


def cleanup(storage: CheckpointStorage, retained_versions: int) -> CleanupResult:
    versions = list_versions(storage)
    result = CleanupResult()
    if not versions:
        return result
    retained = versions[-retained_versions:]
    result.retained_versions = retained
    manifests = [read_manifest(storage, v) for v in retained]
    needed = needed_files(storage, manifests)
    oldest_retained = retained[0]
    doomed: list[str] = []
    for directory in (C.MANIFEST_DIR, C.CHANGELOG_DIR, C.SNAPSHOT_DIR, C.SHARED_DIR):
        for name in storage.list_dir(directory):
            path = f"{directory}/{name}"
            if path in needed:
                result.kept += 1
                continue
            if _version_of(path) < oldest_retained:
                doomed.append(path)
            else:
                result.kept += 1
    if doomed:
        storage.delete_many(doomed)
    result.deleted = doomed
    return result


def _version_of(path: str) -> int:
    directory, _, name = path.partition("/")
    if directory == C.MANIFEST_DIR:
        version = layout.parse_manifest_name(name)
    else:
        version = layout.parse_versioned_name(name)
    # Names we do not recognise (temp files of an interrupted upload, foreign files) get
    # a version that is never "older than needed", so cleanup leaves them alone.
    return version if version is not None else 1 << 62

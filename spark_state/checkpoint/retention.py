"""Cleanup of checkpoint storage: keep exactly what the retained versions need.

The retained versions are the newest ``retained_versions`` manifests. What they need is
recomputed from their manifests and snapshot descriptors on every cleanup (the approach
of Spark's RocksDB file manager) rather than kept as reference counts, so a crash midway
can never leave a count wrong.

Every copy of a retained version is kept (runs, see :mod:`.runs`, may leave several: one per
run that made it), with everything it needs.

A file nothing references is deleted only if its version (the leading number of its
name: the version a changelog produced, a snapshot captured, or the snapshot that first
uploaded a shared file) is older than the oldest retained version. Unreferenced files at
or above it can belong to a commit or snapshot still being written by another
attempt of the same version (Spark retries and speculative tasks), whose manifest is not
there yet; they become deletable once retention moves past them. In a run without
retries nothing falls in that band, so what remains is exactly what retained versions need.

Deletes remove obsolete manifests before the files they named, so a crash during cleanup
leaves only unreferenced files (deleted by the next cleanup), never a dangling manifest.
Temp files of writes that a crash interrupted (``.<name>.<token>.tmp``) are deleted by the
same rule, by the version of the file they were being written for.

A store that uploads snapshots in the background (:mod:`.background`) also passes what its
upload in flight and its newest completed snapshot need (``keep``, ``keep_from_version``):
files no retained manifest names yet, which a later manifest will.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .. import constants as C
from ..storage import CheckpointStorage
from ..storage.base import temp_target
from ..testing import crashpoints
from . import layout
from .metadata import Manifest
from .snapshots import read_descriptor


@dataclass
class CleanupResult:
    retained_versions: list[int] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    kept: int = 0


def list_copies(storage: CheckpointStorage) -> dict[int, list[int]]:
    """Every manifest in storage: version -> ranks of its copies (ascending), one listing."""
    copies: dict[int, list[int]] = {}
    for name in storage.list_dir(C.MANIFEST_DIR):
        parsed = layout.parse_manifest_name(name)
        if parsed is not None:
            copies.setdefault(parsed[0], []).append(parsed[1])
    for ranks in copies.values():
        ranks.sort()
    return copies


def list_versions(storage: CheckpointStorage) -> list[int]:
    """Versions with at least one manifest, ascending."""
    return sorted(list_copies(storage))


def read_manifest(storage: CheckpointStorage, version: int, rank: int = C.UNRANKED) -> Manifest:
    path = layout.manifest_path(version, rank)
    return Manifest.from_json(storage.read_bytes(path), storage.full_url(path))


def needed_files(storage: CheckpointStorage, manifests: list[Manifest]) -> set[str]:
    """Every path the given manifests need to restore (manifests, changelogs, snapshots)."""
    needed: set[str] = set()
    seen_snapshots: set[str] = set()
    for manifest in manifests:
        needed.add(layout.manifest_path(manifest.version, manifest.rank))
        needed.add(manifest.changelog.path)
        needed.update(c.path for c in manifest.replay)
        base = manifest.base_snapshot
        if base is not None and base.path not in seen_snapshots:
            seen_snapshots.add(base.path)
            needed.add(base.path)
            needed.update(f.path for f in read_descriptor(storage, base).files)
    return needed


def cleanup(storage: CheckpointStorage, retained_versions: int, keep: frozenset[str] = frozenset(),
            keep_from_version: Optional[int] = None) -> CleanupResult:
    """Delete files the newest ``retained_versions`` versions do not need; never the paths in
    ``keep``, nor unreferenced files of version ``keep_from_version`` or later."""
    copies = list_copies(storage)
    versions = sorted(copies)
    result = CleanupResult()
    if not versions:
        return result
    retained = versions[-retained_versions:]
    result.retained_versions = retained
    manifests = [read_manifest(storage, v, r) for v in retained for r in copies[v]]
    needed = needed_files(storage, manifests) | keep
    oldest_retained = retained[0] if keep_from_version is None else min(retained[0], keep_from_version)
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
        # Temp files of writes a crash cut short would otherwise stay forever (listings leave
        # them out). One of a version past retention can only belong to a dead or obsolete writer.
        for name in storage.list_dir(directory, temp_files=True):
            target = temp_target(name)
            if target is not None and _version_of(f"{directory}/{target}") < oldest_retained:
                doomed.append(f"{directory}/{name}")
    # Manifests go first, in a call of their own (an S3 batch delete has no order): a crash
    # midway then leaves unreferenced files, which the next cleanup deletes, and never a
    # manifest naming deleted files.
    doomed_manifests = [p for p in doomed if p.startswith(C.MANIFEST_DIR + "/")]
    doomed_files = [p for p in doomed if not p.startswith(C.MANIFEST_DIR + "/")]
    if doomed_manifests:
        storage.delete_many(doomed_manifests)
    if doomed_files:
        crashpoints.reached("cleanup.mid-delete")
        storage.delete_many(doomed_files)
    result.deleted = doomed
    return result


def _version_of(path: str) -> int:
    directory, _, name = path.partition("/")
    if directory == C.MANIFEST_DIR:
        parsed = layout.parse_manifest_name(name)
        version = parsed[0] if parsed else None
    else:
        version = layout.parse_versioned_name(name)
    # Names we do not recognise (temp files of an interrupted upload, foreign files) get
    # a version that is never "older than needed", so cleanup leaves them alone.
    return version if version is not None else 1 << 62

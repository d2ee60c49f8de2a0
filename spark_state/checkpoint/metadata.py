"""Manifests and snapshot descriptors: small JSON documents, with their codecs.

A **manifest** (``manifests/<version>.json``, or ``manifests/<version>.r<rank>.json`` when a
run made it, see :mod:`.runs`) is the commit point of a version. It is
self-contained: restoring the version needs only the snapshot it names and the changelogs
it lists under ``replay``, in order. ``changelog`` is the version's own epoch changelog;
it is the last ``replay`` entry unless the version is itself a snapshot, and is kept
while the version is retained so that the changes of every retained version can be read::

    {"kind": "spark-state/manifest", "format_version": 1, "version": 7,
     "commit_id": "3f2a...", "backend": "rocksdb", "num_keys": 1234,
     "changelog": {"version": 7, "path": "changelogs/7-....arrow", "size": 640, "crc32": 99},
     "base_snapshot": {"version": 5, "id": "9c1e...", "path": "snapshots/5-9c1e....json"} | null,
     "replay": [{"version": 6, "path": "changelogs/6-....arrow", "size": 812, "crc32": 1234}, ...],
     "run": {"rank": 2, "id": "4f7c..."}}       (only in ranked manifests)

A **snapshot descriptor** (``snapshots/<v>-<id>.json``) lists every file of one backend
snapshot with where it lives in checkpoint storage (private files as
``snapshots/<v>-<id>-<name>``, SSTs under ``shared/``), its size and CRC-32::

    {"kind": "spark-state/snapshot", "format_version": 1, "version": 5, "id": "9c1e...",
     "backend": "rocksdb", "instance_id": "77ab...",
     "files": [{"name": "000012.sst", "path": "shared/5-77ab...-000012.sst", "size": 1, "crc32": 2}, ...]}

Invariant: a file named by a manifest or descriptor was durably written before the
document naming it, so a readable manifest never points at a file that was never written.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from .. import constants as C
from ..errors import CheckpointCorruptError, IncompatibleFormatError


@dataclass(frozen=True)
class FileRef:
    """A file in checkpoint storage: ``path`` relative to the store root."""

    path: str
    size: int
    crc32: int


@dataclass(frozen=True)
class ChangelogRef(FileRef):
    version: int = 0


@dataclass(frozen=True)
class SnapshotFileRef(FileRef):
    #: The file's name inside the backend's local directory.
    name: str = ""


@dataclass(frozen=True)
class SnapshotRef:
    version: int
    id: str
    path: str


@dataclass(frozen=True)
class Manifest:
    version: int
    commit_id: str
    backend: str
    changelog: ChangelogRef
    base_snapshot: Optional[SnapshotRef]
    replay: tuple[ChangelogRef, ...]
    num_keys: int
    format_version: int = C.FORMAT_VERSION
    #: Rank of the run that committed it (``C.UNRANKED``: no run); also in the file name.
    rank: int = C.UNRANKED
    run_id: Optional[str] = None

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "kind": C.MANIFEST_KIND,
            "format_version": self.format_version,
            "version": self.version,
            "commit_id": self.commit_id,
            "backend": self.backend,
            "num_keys": self.num_keys,
            "changelog": asdict(self.changelog),
            "base_snapshot": asdict(self.base_snapshot) if self.base_snapshot else None,
            "replay": [asdict(c) for c in self.replay],
        }
        if self.rank != C.UNRANKED:
            doc["run"] = {"rank": self.rank, "id": self.run_id}
        return json.dumps(doc, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, path: str) -> "Manifest":
        doc = load_document(data, path, C.MANIFEST_KIND)
        try:
            base = doc["base_snapshot"]
            run = doc.get("run") or {}
            return cls(
                version=int(doc["version"]),
                commit_id=str(doc["commit_id"]),
                backend=str(doc["backend"]),
                changelog=_changelog_ref(doc["changelog"]),
                base_snapshot=SnapshotRef(int(base["version"]), str(base["id"]), str(base["path"])) if base else None,
                replay=tuple(_changelog_ref(c) for c in doc["replay"]),
                num_keys=int(doc["num_keys"]),
                format_version=int(doc["format_version"]),
                rank=int(run.get("rank", C.UNRANKED)),
                run_id=run.get("id"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointCorruptError(path, f"malformed manifest ({exc!r})") from None


@dataclass(frozen=True)
class SnapshotDescriptor:
    version: int
    id: str
    backend: str
    instance_id: str
    files: tuple[SnapshotFileRef, ...] = field(default_factory=tuple)
    format_version: int = C.FORMAT_VERSION

    def to_json(self) -> bytes:
        doc = {
            "kind": C.SNAPSHOT_KIND,
            "format_version": self.format_version,
            "version": self.version,
            "id": self.id,
            "backend": self.backend,
            "instance_id": self.instance_id,
            "files": [asdict(f) for f in self.files],
        }
        return json.dumps(doc, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, path: str) -> "SnapshotDescriptor":
        doc = load_document(data, path, C.SNAPSHOT_KIND)
        try:
            return cls(
                version=int(doc["version"]),
                id=str(doc["id"]),
                backend=str(doc["backend"]),
                instance_id=str(doc["instance_id"]),
                files=tuple(
                    SnapshotFileRef(path=str(f["path"]), size=int(f["size"]), crc32=int(f["crc32"]),
                                    name=str(f["name"]))
                    for f in doc["files"]
                ),
                format_version=int(doc["format_version"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointCorruptError(path, f"malformed snapshot descriptor ({exc!r})") from None


def _changelog_ref(doc: dict[str, Any]) -> ChangelogRef:
    return ChangelogRef(path=str(doc["path"]), size=int(doc["size"]), crc32=int(doc["crc32"]),
                        version=int(doc["version"]))


def load_document(data: bytes, path: str, kind: str) -> dict[str, Any]:
    """Parse one of spark-state's JSON documents, checking its ``kind`` and format version."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointCorruptError(path, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind:
        raise CheckpointCorruptError(path, f"not a {kind} document")
    found = doc.get("format_version")
    if found not in C.SUPPORTED_FORMAT_VERSIONS:
        raise IncompatibleFormatError(path, found, C.SUPPORTED_FORMAT_VERSIONS)
    return doc

"""Incremental snapshot upload and verified snapshot download.

Upload follows Flink's incremental RocksDB checkpoints: a snapshot's *shared* files
(immutable SSTs) are uploaded only if no earlier snapshot of the same local DB instance
already put them in checkpoint storage; every other file is uploaded each time. The
descriptor goes last, so a descriptor never names a file that is not there.

Which files a DB instance has uploaded is known only to that instance (``SharedFileIndex``).
A DB restored from a snapshot starts with the snapshot's shared files in its index, under
a *new* instance id: two instances restored from the same snapshot number their new SSTs
identically, and the instance id in the shared file name keeps them apart.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

from .. import constants as C
from ..backends.base import SnapshotFile
from ..errors import CheckpointCorruptError, CheckpointFileMissingError
from ..storage import CheckpointStorage
from ..testing import crashpoints
from . import layout
from .checksum import crc32_file
from .metadata import SnapshotDescriptor, SnapshotFileRef, SnapshotRef


@dataclass
class SnapshotStats:
    """What one snapshot upload did."""

    files_uploaded: int = 0
    files_reused: int = 0
    bytes_uploaded: int = 0
    #: every file of the snapshot in checkpoint storage (uploaded or reused), descriptor excluded
    paths: list[str] = field(default_factory=list)


@dataclass
class SharedFileIndex:
    """Local shared file name -> its copy in checkpoint storage, for one DB instance."""

    instance_id: str = field(default_factory=layout.new_id)
    uploaded: dict[str, SnapshotFileRef] = field(default_factory=dict)

    @classmethod
    def from_descriptor(cls, descriptor: SnapshotDescriptor, shared_names: Iterable[str]) -> "SharedFileIndex":
        names = set(shared_names)
        return cls(uploaded={f.name: f for f in descriptor.files if f.name in names})


def upload_snapshot(
    storage: CheckpointStorage,
    version: int,
    backend_name: str,
    files: list[SnapshotFile],
    index: SharedFileIndex,
) -> tuple[SnapshotRef, SnapshotStats]:
    """Upload a snapshot written by a backend; returns its reference and what it cost.

    On success the index is replaced by this snapshot's shared files, so the next
    snapshot reuses exactly what this one references (files compacted away locally are
    dropped from the index and are never referenced again by this instance).
    """
    snapshot_id = layout.new_id()
    stats = SnapshotStats()
    refs: list[SnapshotFileRef] = []
    for f in files:
        known = index.uploaded.get(f.name) if f.shared else None
        if known is not None and known.size == f.size:
            refs.append(known)
            stats.files_reused += 1
            stats.paths.append(known.path)
            continue
        if f.shared:
            path = layout.shared_file_path(version, index.instance_id, f.name)
        else:
            path = layout.snapshot_file_path(version, snapshot_id, f.name)
        crc = crc32_file(f.local_path)
        storage.upload_file(f.local_path, path)
        refs.append(SnapshotFileRef(path=path, size=f.size, crc32=crc, name=f.name))
        stats.files_uploaded += 1
        stats.bytes_uploaded += f.size
        stats.paths.append(path)
        crashpoints.reached("snapshot.mid-upload")
    descriptor = SnapshotDescriptor(
        version=version, id=snapshot_id, backend=backend_name,
        instance_id=index.instance_id, files=tuple(refs),
    )
    descriptor_path = layout.snapshot_descriptor_path(version, snapshot_id)
    storage.write_bytes(descriptor_path, descriptor.to_json())
    shared = {f.name for f in files if f.shared}
    index.uploaded = {r.name: r for r in refs if r.name in shared}
    return SnapshotRef(version=version, id=snapshot_id, path=descriptor_path), stats


def read_descriptor(storage: CheckpointStorage, ref: SnapshotRef) -> SnapshotDescriptor:
    data = storage.read_bytes(ref.path)
    return SnapshotDescriptor.from_json(data, storage.full_url(ref.path))


@dataclass
class FetchStats:
    """What bringing a snapshot to local disk did: files and bytes downloaded or copied, and
    files hard-linked from a checkpoint on the same file system (no bytes moved)."""

    files_fetched: int = 0
    bytes_fetched: int = 0
    files_linked: int = 0


#: Snapshot files fetched at once (remote storage: one request each; waiting on the network).
FETCH_THREADS = 8


def download_snapshot(storage: CheckpointStorage, descriptor: SnapshotDescriptor, directory: str,
                      needed_by: str) -> FetchStats:
    """Bring every file of a snapshot into ``directory``, checking its size and CRC-32: its
    immutable shared files (SSTs) hard-linked where checkpoint storage is a directory on the same
    file system (:meth:`~spark_state.storage.CheckpointStorage.fetch_file`), the rest downloaded,
    :data:`FETCH_THREADS` files at a time.

    Raises ``CheckpointFileMissingError`` / ``CheckpointCorruptError`` naming the file.
    """
    os.makedirs(directory, exist_ok=True)

    def fetch(ref: SnapshotFileRef) -> bool:
        local = os.path.join(directory, ref.name)
        url = storage.full_url(ref.path)
        try:
            if ref.path.startswith(C.SHARED_DIR + "/"):
                linked = storage.fetch_file(ref.path, local)
            else:
                storage.download_file(ref.path, local)
                linked = False
        except CheckpointFileMissingError:
            raise CheckpointFileMissingError(url, needed_by=needed_by) from None
        size = os.path.getsize(local)
        if size != ref.size:
            raise CheckpointCorruptError(url, f"size is {size} bytes, expected {ref.size}")
        crc = crc32_file(local)
        if crc != ref.crc32:
            raise CheckpointCorruptError(url, f"CRC-32 is {crc:#010x}, expected {ref.crc32:#010x}")
        return linked

    stats = FetchStats()
    files = list(descriptor.files)
    with ThreadPoolExecutor(max_workers=max(1, min(FETCH_THREADS, len(files))),
                            thread_name_prefix="spark-state-fetch") as pool:
        for ref, linked in zip(files, pool.map(fetch, files)):
            if linked:
                stats.files_linked += 1
            else:
                stats.files_fetched += 1
                stats.bytes_fetched += ref.size
    return stats

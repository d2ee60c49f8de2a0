"""State in and out of a store whole: ``import_version`` for operations tools, ``export_view``
for the provider's read views.

**Import** (restore, rescale, migrate start a store at the version after a query's last
committed batch): every ``(key, value)`` of the state is applied to a fresh, empty local
backend in batches (memory stays bounded), a full snapshot of the result is uploaded, then an
empty changelog named by a fresh commit id, and the manifest is written last -- the commit
point -- with ``base_snapshot`` that snapshot and ``replay`` empty. A ranked manifest (a tool
run, see :mod:`.fencing`) is created if absent: when it exists already, an earlier attempt of
the same tool run committed the version and that copy is kept.

**Export**: an immutable, openable copy of the loaded version in a directory of the caller's
(for rocksdb a RocksDB checkpoint: hard-linked SSTs, no WAL), for readers in another process;
a failed export leaves no directory behind.
"""

from __future__ import annotations

import os
import shutil
from typing import Callable, Iterable, Optional

from .. import constants as C
from ..keys.system import SYSTEM_PREFIX
from ..backends import KVBackend
from ..checkpoint import changelog, layout
from ..checkpoint.checksum import crc32_bytes
from ..checkpoint.metadata import ChangelogRef, Manifest, SnapshotRef
from ..checkpoint.snapshots import SnapshotStats
from ..storage import CheckpointStorage
from .epoch_writes import reject_write


def apply_entries(backend: KVBackend, entries: Iterable[tuple[bytes, bytes]], batch_rows: int) -> int:
    """Apply every ``(key, value)`` of ``entries`` to ``backend`` in batches of ``batch_rows``;
    returns the number of user keys (keys outside ``keys.system.SYSTEM_PREFIX``)."""
    num_keys = 0
    batch: list[tuple[bytes, Optional[bytes]]] = []
    system = SYSTEM_PREFIX
    for key, value in entries:
        if type(key) is not bytes or type(value) is not bytes:
            reject_write(key, value)
        batch.append((key, value))
        if key[:1] != system:
            num_keys += 1
        if len(batch) >= batch_rows:
            backend.apply(batch)
            batch = []
    if batch:
        backend.apply(batch)
    return num_keys


def write_imported(storage: CheckpointStorage, version: int, num_keys: int, *, backend_name: str, rank: int,
                   run_id: Optional[str], upload: Callable[[int], tuple[SnapshotRef, SnapshotStats]]
                   ) -> Optional[tuple[Manifest, SnapshotStats]]:
    """Commit the local copy (holding imported ``version``) to ``storage``: empty changelog,
    full snapshot (``upload``), manifest last. None if a ranked manifest of the version exists
    already (another attempt of this tool run committed it first)."""
    commit_id = layout.new_id()
    data = changelog.encode(version, {})
    path = layout.changelog_path(version, commit_id)
    storage.write_bytes(path, data)
    ref = ChangelogRef(path=path, size=len(data), crc32=crc32_bytes(data), version=version)
    base, stats = upload(version)
    manifest = Manifest(
        version=version, commit_id=commit_id, backend=backend_name, changelog=ref,
        base_snapshot=base, replay=(), num_keys=num_keys, rank=rank, run_id=run_id,
    )
    try:
        storage.write_bytes(layout.manifest_path(version, rank), manifest.to_json(), overwrite=rank == C.UNRANKED)
    except FileExistsError:
        return None
    return manifest, stats


def export_view(backend: KVBackend, directory: str) -> None:
    """Write ``backend``'s state into ``directory`` as an openable snapshot."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(directory)), exist_ok=True)
        backend.write_snapshot(directory)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise

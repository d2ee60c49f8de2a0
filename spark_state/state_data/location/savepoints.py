"""A keyed function's state in a savepoint, as the readers and the transform see it.

A savepoint (:mod:`spark_state.ops.savepoint_format`) holds a keyed function's state as one
Arrow file of entries per partition of its layout, ``process/<name>/<i>.arrow``, and records
its max parallelism, parallelism and key columns in the manifest. Readers load a partition's
entries into a temporary store (the engine's own, so every decoder of a checkpoint's stores
works unchanged); every file is checked against the manifest's size and CRC-32 first, and read
one record batch at a time, never whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping, Optional

from ...engine.store import VersionedStore
from ...ops import savepoint_format as F
from ...ops.savepoint_manifest import read_manifest
from ...ops.state_files import read_state_entries
from ...ops.state_io import reader_config
from ...process.plan import KEYED
from ...storage import open_storage
from ..errors import KeyMismatchError
from ..key_columns import KeyColumns
from ..read_options import OptionError
from .functions import choose_function


def is_savepoint(path: str, storage_options: Optional[Mapping[str, str]] = None) -> bool:
    """Whether ``path`` holds a savepoint (its manifest), rather than a checkpoint."""
    return open_storage(path, dict(storage_options or {})).exists(F.MANIFEST)


def savepoint_batch(url: str, manifest: F.SavepointManifest, batch: Optional[int]) -> int:
    """The savepoint's batch; ``batch``, if given, must be it (the one check of every reader).

    :raises OptionError: another batch (the message names the savepoint's)."""
    held = manifest.batch_id
    if batch is not None and batch != held:
        raise OptionError("batch", f"the savepoint {url} holds the state of batch {held} only, not of batch {batch}: "
                                   f"omit {{option}} or give {held}")
    return held


@dataclass(frozen=True)
class SavepointSource:
    """One keyed function of a savepoint (picklable: tasks load its partitions)."""

    url: str
    storage_options: Mapping[str, str]
    manifest: F.SavepointManifest
    entry: F.ProcessEntry

    @classmethod
    def open(cls, path: str, function: Optional[str] = None,
             storage_options: Optional[Mapping[str, str]] = None) -> "SavepointSource":
        """The keyed function ``function`` of the savepoint at ``path`` (optional when it has one).

        :raises UnknownStateError: no such function, none, or several and none named.
        :raises KeyMismatchError: the savepoint does not record the function's key columns."""
        storage = open_storage(path, dict(storage_options or {}))
        manifest = read_manifest(storage)
        entry = choose_function([p for p in manifest.process if p.kind == KEYED], function,
                                f"the savepoint {storage.url}")
        if not entry.key:
            raise KeyMismatchError(
                f"the savepoint {storage.url} does not record the key columns of {entry.name!r} (it was taken by an "
                "earlier release): restore it, run the query for one batch, and take a new savepoint")
        return cls(storage.url, dict(storage_options or {}), manifest, entry)

    @classmethod
    def open_any(cls, path: str, function: Optional[str] = None,
                 storage_options: Optional[Mapping[str, str]] = None) -> "SavepointSource":
        """The function ``function`` of the savepoint at ``path``, of any kind (keyed or
        checkpointed; optional when it has one): for readers of operator state, which need no
        key columns.

        :raises UnknownStateError: no such function, none, or several and none named."""
        storage = open_storage(path, dict(storage_options or {}))
        manifest = read_manifest(storage)
        entry = choose_function(manifest.process, function, f"the savepoint {storage.url}", kind="function")
        return cls(storage.url, dict(storage_options or {}), manifest, entry)

    @property
    def function(self) -> str:
        return self.entry.name

    @property
    def key_columns(self) -> KeyColumns:
        return KeyColumns.from_record({"key": self.entry.key}, self.url)

    @property
    def max_parallelism(self) -> int:
        assert self.entry.max_parallelism is not None  # keyed functions record it
        return self.entry.max_parallelism

    def entries(self, partition: int, scratch_dir: Optional[str] = None) -> Iterator[tuple[bytes, bytes]]:
        """Every entry of partition ``partition``'s state file, in key order, a record batch at a
        time (checked first; a remote file is downloaded into ``scratch_dir``, default the
        system's temp directory, and deleted when the entries end: :mod:`spark_state.ops.state_files`)."""
        storage = open_storage(self.url, dict(self.storage_options))
        return read_state_entries(storage, self.manifest, F.process_file(self.entry.name, partition), scratch_dir)

    def load(self, partition: int, local_dir: str) -> VersionedStore:
        """Partition ``partition``'s entries in a new store under ``local_dir`` (removed by the caller)."""
        store = VersionedStore(open_storage(f"{local_dir}/store"), reader_config(local_dir=local_dir))
        try:
            store.import_version(1, self.entries(partition, local_dir))
        except BaseException:
            store.close()
            raise
        return store

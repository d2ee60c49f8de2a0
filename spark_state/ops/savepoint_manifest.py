"""The one reader of a savepoint's manifest (``savepoint.json``) and of the small files it lists.

The manifest's format (its fields, the file list with sizes and CRC-32s, the batch check) is
:mod:`.savepoint_format`'s; this module reads it from storage for every tool that opens a
savepoint -- restore, the state readers and lookups on savepoints, transform:

* :func:`read_manifest`: the parsed manifest, checked against its own file list; a savepoint
  without one is a partial (interrupted) savepoint, or no savepoint at all.
* :func:`listed_file`: a file's manifest entry, once the file is known to exist.
* :func:`read_verified`: the bytes of a *small* listed file (Spark's logs and metadata, clock
  files), checked against its entry. State files, which can be GBs, are read in record batches
  by :mod:`.state_files`, checked the same way against :func:`listed_file`'s entry.

Errors are :class:`~.errors.SavepointError`, naming the file and what to do.
"""

from __future__ import annotations

from ..storage import CheckpointStorage
from . import savepoint_format as F
from .errors import SavepointError

__all__ = ["listed_file", "read_manifest", "read_verified"]


def read_manifest(savepoint: CheckpointStorage) -> F.SavepointManifest:
    """The savepoint's manifest, checked against its own file list (see
    :meth:`~.savepoint_format.SavepointManifest.check_batch`); a missing one means a partial
    (interrupted) savepoint."""
    if not savepoint.exists(F.MANIFEST):
        hint = "it holds files but no manifest: a savepoint that was interrupted" if savepoint.list_dir(F.SPARK_DIR) \
            or savepoint.list_dir(F.STATE_DIR) else "the directory holds no savepoint"
        raise SavepointError(f"{savepoint.full_url(F.MANIFEST)} is missing: {hint}. Take a new savepoint")
    where = savepoint.full_url(F.MANIFEST)
    manifest = F.SavepointManifest.from_json(savepoint.read_bytes(F.MANIFEST), where)
    manifest.check_batch(where)
    return manifest


def listed_file(savepoint: CheckpointStorage, manifest: F.SavepointManifest, path: str) -> tuple[F.FileEntry, str]:
    """The manifest entry of ``path`` and the file's URL, once the file is known to exist."""
    entry = manifest.file(path)
    where = savepoint.full_url(path)
    if not savepoint.exists(path):
        raise SavepointError(f"{where} is missing: the savepoint is incomplete or damaged; take a new one")
    return entry, where


def read_verified(savepoint: CheckpointStorage, manifest: F.SavepointManifest, path: str) -> bytes:
    """The whole content of a *small* savepoint file (Spark's logs and metadata, clock files),
    checked against the manifest. State files are read with
    :func:`.state_files.read_state_batches`."""
    entry, where = listed_file(savepoint, manifest, path)
    data = savepoint.read_bytes(path)
    F.verify(data, entry, where)
    return data

"""Savepoint state files in checkpoint storage, in bounded memory: the one writer and the one
verified reader (the byte layout is :mod:`.savepoint_format`'s).

A state file holds a partition of a store, possibly tens of millions of entries (GBs), so it
is never held whole, neither as bytes nor as a list of entries:

* **Writing** (:func:`write_state_file`, used by the savepoint and by bootstrap and transform
  tasks alike): the entries are encoded one record batch at a time into a
  :class:`~spark_state.storage.spool.SpooledUpload`, which keeps a small file in memory and
  spools a large one to a local scratch file, counting size and CRC-32 as the bytes pass; the
  file is then stored with one write (or upload) and its manifest entry returned.
* **Reading** (:func:`read_state_batches`, :func:`read_state_entries`; the schema records
  alone, read from the file's end, :func:`read_record_entries`): the file is taken as a
  local file -- in place on local storage, else downloaded into a scratch directory -- its size
  and CRC-32 are checked against the savepoint manifest by streaming over it, and its record
  batches are read memory-mapped. The downloaded copy is deleted when the reader finishes or is
  closed. Nothing of a file is used before its check passed.
* **Small files** (Spark's logs and metadata, clock files: :func:`write_small_file`) are
  written as bytes; both writers return the file's manifest entry.
* **Copying** (:func:`copy_verified`): a state file goes through the checked local file and
  ``upload_file``; Spark's small files (logs, metadata, clock files) are copied as bytes
  (:func:`.savepoint_manifest.read_verified`).

Errors are the savepoint's: a file the manifest does not list, a missing file, one of another
size or CRC-32, or not a readable Arrow file each raise
:class:`~.errors.SavepointError` naming the file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Callable, Generator, Iterable, Iterator, Optional

import pyarrow as pa

from ..arrow_chunks import batch_entries
from ..checkpoint.checksum import crc32_file
from ..keys import system as syskeys
from ..storage import CheckpointStorage
from ..storage.local_copy import local_file
from ..storage.spool import SpooledUpload
from . import savepoint_format as F
from .savepoint_manifest import listed_file as _listed, read_verified


#: The least key of a schema record: keyed state's records sort below operator state's.
_RECORDS_FROM = syskeys.record_range(syskeys.KEYED_SCHEMA_TAG)[0]


# ------------------------------------------------------------------------------ writing
def write_state_file(storage: CheckpointStorage, path: str, entries: Iterable[tuple[bytes, bytes]], *,
                     scratch_dir: Optional[str] = None,
                     on_batch: Optional[Callable[[int], None]] = None) -> F.FileEntry:
    """Write ``entries`` (in key order) as the state file ``path`` of ``storage``; returns its
    manifest entry (path, size, CRC-32, rows, data keys).

    Memory: one record batch plus the spool's in-memory part (``spool.DEFAULT_MEMORY_BYTES``); a
    larger file goes to a temporary file in ``scratch_dir`` (default: the system's temp directory),
    removed when the file is stored or the write fails. ``on_batch(rows)`` follows the progress."""
    with SpooledUpload(scratch_dir or tempfile.gettempdir()) as out:
        rows, keys = F.write_entries(out, entries, on_batch)
        out.store(storage, path)
        return F.FileEntry(path, out.size, out.crc32, rows, keys)


def write_small_file(storage: CheckpointStorage, path: str, data: bytes) -> F.FileEntry:
    """Write ``data`` (one of Spark's small files, a clock file) at ``path``; returns its manifest
    entry (path, size, CRC-32). State files are written by :func:`write_state_file`."""
    storage.write_bytes(path, data)
    return F.FileEntry(path, len(data), F.crc32(data))


# ------------------------------------------------------------------------------ reading
@contextlib.contextmanager
def verified_file(savepoint: CheckpointStorage, manifest: F.SavepointManifest, path: str,
                  scratch_dir: Optional[str] = None) -> Iterator[str]:
    """A local path of savepoint file ``path`` whose size and CRC-32 match the manifest (see the
    module docstring); a downloaded copy is deleted on exit."""
    entry, where = _listed(savepoint, manifest, path)
    with local_file(savepoint, path, scratch_dir) as local:
        F.check_sums(os.path.getsize(local), lambda: crc32_file(local), entry, where)
        yield local


def read_state_batches(savepoint: CheckpointStorage, manifest: F.SavepointManifest, path: str,
                       scratch_dir: Optional[str] = None) -> Generator[pa.RecordBatch, None, None]:
    """The record batches of state file ``path`` of a savepoint (see the module docstring).

    The file is fetched and checked when this is called (a damaged file fails here, before its
    caller writes anything); the batches are read as the returned iterator is consumed, and the
    local copy is deleted when it is exhausted or closed."""
    stack = contextlib.ExitStack()  # handed to the iterator, which closes it
    local = stack.enter_context(verified_file(savepoint, manifest, path, scratch_dir))
    return _owning(stack, F.read_batches(local, savepoint.full_url(path)))


def read_state_entries(savepoint: CheckpointStorage, manifest: F.SavepointManifest, path: str,
                       scratch_dir: Optional[str] = None) -> Iterator[tuple[bytes, bytes]]:
    """The entries of state file ``path`` of a savepoint, in key order (as :func:`read_state_batches`)."""
    return _rows(read_state_batches(savepoint, manifest, path, scratch_dir))


def read_record_entries(savepoint: CheckpointStorage, manifest: F.SavepointManifest, path: str,
                        scratch_dir: Optional[str] = None) -> Iterator[tuple[bytes, bytes]]:
    """The entries of state file ``path`` from the least schema record key on
    (``[0xFF][KEYED_SCHEMA_TAG]``, :mod:`spark_state.keys.system`), last record batch first: system
    keys sort last, so the batches are read backwards until one starts below the records, and
    the state's data before them is not read (the file is checked first)."""
    with verified_file(savepoint, manifest, path, scratch_dir) as local:
        for batch in F.read_batches(local, savepoint.full_url(path), reverse=True):
            keys = batch.column(0)
            for key, value in batch_entries(keys, batch.column(1)):
                if key >= _RECORDS_FROM:
                    yield key, value
            if len(keys) and keys[0].as_py() < _RECORDS_FROM:
                return


def read_unlisted_entries(storage: CheckpointStorage, path: str,
                          scratch_dir: Optional[str] = None) -> Iterator[tuple[bytes, bytes]]:
    """The entries of a state file no manifest lists yet (one a transform step just wrote, read
    by its next step): as :func:`read_state_entries`, without the check.

    Raises:
        CheckpointFileMissingError: no file at ``path``.
    """
    stack = contextlib.ExitStack()  # handed to the iterator, which closes it
    local = stack.enter_context(local_file(storage, path, scratch_dir))
    return _rows(_owning(stack, F.read_batches(local, storage.full_url(path))))


# ------------------------------------------------------------------------------ copying
def copy_verified(savepoint: CheckpointStorage, manifest: F.SavepointManifest, path: str,
                  target: CheckpointStorage, dest: Optional[str] = None, scratch_dir: Optional[str] = None) -> None:
    """Copy savepoint file ``path`` to ``dest`` (default: the same path) of ``target``, checked
    against the manifest first: a state file through its checked local file and ``upload_file``,
    another (small) file as bytes."""
    if not F.is_state_file(path):
        target.write_bytes(dest or path, read_verified(savepoint, manifest, path))
        return
    with verified_file(savepoint, manifest, path, scratch_dir) as local:
        target.upload_file(local, dest or path)


# ------------------------------------------------------------------------------ helpers
def _owning(stack: contextlib.ExitStack, batches: Iterator[pa.RecordBatch]) -> Generator[pa.RecordBatch, None, None]:
    """``batches``, then ``stack`` closed (the local copy deleted) when they end or this
    iterator is closed. One never started leaves its copy to the temporary directory's own
    finalizer (when it is collected)."""
    with stack:
        yield from batches


def _rows(batches: Generator[pa.RecordBatch, None, None]) -> Generator[tuple[bytes, bytes], None, None]:
    """The entries of ``batches``; closing this closes ``batches`` (and deletes their file) at once."""
    try:
        for batch in batches:
            yield from batch_entries(batch.column(0), batch.column(1))
    finally:
        batches.close()

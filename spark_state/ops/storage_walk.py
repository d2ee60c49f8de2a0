"""Directory walks over checkpoint storage, for the operations that find or move whole trees.

:class:`~spark_state.storage.CheckpointStorage` lists the *files* of one directory only
(the engine never needs more). Finding the keyed functions' state beside a checkpoint
(``<checkpoint>/spark-state/<name>/``) and moving a state location need the subdirectories
too; this module lists them through the storage's own file system -- the directory itself
on local disk, ``ls`` of the fsspec file system for S3 and HDFS (on S3 a "directory" is a
common key prefix, which is what a writer of ``<prefix>/<file>`` creates). A storage of
another kind cannot be walked (:class:`~.errors.UnsupportedCheckpointError` names it).

Paths given and returned are relative to the storage root, ``/``-separated. The storage
layer's own temp files (in-flight writes, crash leftovers) are listed only by
:func:`walk_files` with ``temp_files=True``.
"""

from __future__ import annotations

import os
import posixpath
import tempfile
from typing import Iterator

from ..storage import CheckpointStorage
from ..storage.base import clean_path, join_root
from ..storage.local import LocalStorage
from ..storage.remote import FsspecStorage
from .errors import UnsupportedCheckpointError


def list_subdirs(storage: CheckpointStorage, path: str = "") -> list[str]:
    """Sorted base names of the directories directly inside directory ``path`` (a missing
    directory lists as ``[]``)."""
    rel = clean_path(path, allow_root=True)
    if isinstance(storage, LocalStorage):
        directory = os.path.join(storage.root, *rel.split("/")) if rel else storage.root
        try:
            with os.scandir(directory) as entries:
                return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))
        except (FileNotFoundError, NotADirectoryError):
            return []
    if isinstance(storage, FsspecStorage):
        directory = join_root(storage.root, rel)
        storage.fs.invalidate_cache(directory)  # s3fs caches listings; a walk must see the store as it is now
        try:
            entries = storage.fs.ls(directory, detail=True)
        except FileNotFoundError:
            return []
        parent = directory.rstrip("/") or "/"
        names = []
        for entry in entries:
            name = storage.fs._strip_protocol(entry["name"]).rstrip("/")
            if entry.get("type") == "directory" and (posixpath.dirname(name) or "/") == parent:
                base = posixpath.basename(name)
                if not base.startswith("."):
                    names.append(base)
        return sorted(names)
    raise UnsupportedCheckpointError(
        f"{storage.url}: directories of a {type(storage).__name__} cannot be listed; name each process state "
        "location with --process-location NAME=URL (Python: process_locations={name: url})")


def walk_files(storage: CheckpointStorage, path: str = "", *, temp_files: bool = False) -> Iterator[str]:
    """Every file under directory ``path``, recursively, in sorted order per directory
    (``temp_files=True``: the storage layer's temp files instead)."""
    prefix = f"{path.rstrip('/')}/" if path else ""
    for name in storage.list_dir(path, temp_files=temp_files):
        yield prefix + name
    for sub in list_subdirs(storage, path):
        yield from walk_files(storage, prefix + sub, temp_files=temp_files)


def copy_file(source: CheckpointStorage, target: CheckpointStorage, path: str) -> None:
    """Copy one file, streaming (SST files may be GiBs), with the target's atomic write."""
    if isinstance(source, LocalStorage):
        target.upload_file(os.path.join(source.root, *clean_path(path).split("/")), path)
        return
    fd, tmp = tempfile.mkstemp(prefix="spark-state-copy-")
    os.close(fd)
    try:
        source.download_file(path, tmp)
        target.upload_file(tmp, path)
    finally:
        os.unlink(tmp)


def remove_empty_dirs(storage: CheckpointStorage) -> None:
    """Remove the directories of a local tree that hold nothing any more, the root included
    (object stores have no directories to remove; HDFS keeps the empty ones, which nothing
    reads)."""
    if not isinstance(storage, LocalStorage) or not os.path.isdir(storage.root):
        return
    for directory, _subdirs, _files in os.walk(storage.root, topdown=False):
        try:
            os.rmdir(directory)  # fails on a directory that still holds something: kept
        except OSError:
            pass

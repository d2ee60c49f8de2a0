"""The checkpoint storage interface every backend implements.

The state engine writes changelogs, manifests and SST files through
:class:`CheckpointStorage` and relies on two guarantees from every implementation:

* **Atomic writes.** :meth:`~CheckpointStorage.write_bytes` and
  :meth:`~CheckpointStorage.upload_file` publish a file all at once: a concurrent or
  later reader sees either the previous whole file (or none) or the new whole file,
  never a prefix. A crash in the middle of a write leaves the old state visible. The
  engine depends on this because a manifest that names a half-written changelog would
  make a version unrecoverable.
* **Durable writes.** When a write returns, the file survives a crash of this process
  and of the machine (local disk: fsync of the file and of its directory; S3: the PUT
  was acknowledged; HDFS: the NameNode completed the file). The engine acknowledges a
  commit only after its files are durable, so a committed version never disappears.

``overwrite=False`` turns a write into an atomic *create-if-absent*; of several racing
writers of different content exactly one succeeds and the others get
:class:`FileExistsError`. The engine uses it for commit markers, so two attempts of the
same task cannot both commit. Remote storages retry writes whose answer was lost, and the
repeated request may then find the writer's *own* earlier write; they resolve such a
conflict by reading the file back, so a writer whose content is already stored, byte for
byte, succeeds (writers of identical content may thus all succeed: the stored file is the
same either way). Writers that must learn which of them won write distinct content.

Paths given to the methods are relative to the storage root and ``/``-separated. Paths
that could leave the root (``..`` components, absolute paths) raise :class:`ValueError`
so that a bad file name from a corrupt manifest cannot touch files outside the
checkpoint.
"""

from __future__ import annotations

import posixpath
import re
from abc import ABC, abstractmethod
from typing import Iterable

__all__ = ["CheckpointStorage", "clean_path", "is_temp_name", "join_root", "temp_name", "temp_target"]

# Temp files live next to their target (same directory, hence same file system, so the
# final rename is atomic). The name is hidden (leading '.'), which Hadoop tools also
# skip, and recognisable, so list_dir() can leave out in-flight or crash-orphaned ones.
_TEMP_RE = re.compile(r"^\..+\.[0-9a-f]{16}\.tmp$")


def temp_name(name: str, token: str) -> str:
    """Name of the temp file used while writing *name* (``token`` is 16 hex digits)."""
    return f".{name}.{token}.tmp"


def is_temp_name(name: str) -> bool:
    """True if *name* (a base name) is one of the storage layer's own temp files."""
    return bool(_TEMP_RE.match(name))


def temp_target(name: str) -> str | None:
    """The base name a temp file was being written for (``.x.json.<token>.tmp`` -> ``x.json``),
    or None if *name* is not a temp name."""
    return name[1:-len(".0123456789abcdef.tmp")] if is_temp_name(name) else None


def clean_path(path: str, *, allow_root: bool = False) -> str:
    """Validate a root-relative path and return it in canonical form.

    A single trailing ``/`` is tolerated (``"dir/"`` names the directory ``dir``).
    ``""`` means the root itself and is only accepted when *allow_root* is true (for
    :meth:`CheckpointStorage.list_dir` and :meth:`CheckpointStorage.child`).

    Raises:
        ValueError: the path is absolute, contains ``..``, ``.``, empty components,
            backslashes or NUL bytes, or is empty where a file name is needed.
    """
    if not isinstance(path, str):
        raise TypeError(f"storage path must be a str, got {type(path).__name__}")
    stripped = path[:-1] if path.endswith("/") and path != "/" else path
    if stripped == "":
        if allow_root:
            return ""
        raise ValueError("storage path is empty; a file name relative to the root is needed")
    if stripped.startswith("/") or "://" in stripped:
        raise ValueError(f"storage path {path!r} is absolute; paths must be relative to the storage root")
    if "\\" in stripped or "\x00" in stripped:
        raise ValueError(f"storage path {path!r} contains a backslash or NUL byte; use '/' separators")
    for part in stripped.split("/"):
        if part in ("", ".", ".."):
            raise ValueError(
                f"storage path {path!r} has an empty, '.' or '..' component; "
                "paths must stay inside the storage root"
            )
    return stripped


class CheckpointStorage(ABC):
    """A directory tree of checkpoint files, rooted at :attr:`url`.

    Implementations: :class:`~spark_state.storage.LocalStorage` (local disk) and
    :class:`~spark_state.storage.FsspecStorage` (S3 via s3fs, HDFS via hdfs-native).
    Get one with :func:`~spark_state.storage.open_storage`.

    Only files are first-class: directories are created implicitly by writes and are
    never listed, so the object stores (which have no directories) and file systems
    behave the same. Errors are from :mod:`spark_state.errors`:
    :class:`~spark_state.errors.CheckpointFileMissingError` for a file that is not
    there, :class:`~spark_state.errors.StorageUnavailableError` when the backend cannot
    be reached and :class:`~spark_state.errors.StorageError` for other failures.
    """

    url: str
    """Root URL as given (normalised: no trailing ``/``), e.g. ``s3://bucket/state``."""

    # ---- reading -------------------------------------------------------------------

    @abstractmethod
    def read_bytes(self, path: str) -> bytes:
        """Return the whole content of the file at *path*.

        Raises:
            CheckpointFileMissingError: no file at *path* (the message names :meth:`full_url`).
        """

    @abstractmethod
    def download_file(self, path: str, local_path: str) -> None:
        """Copy the file at *path* to the local file *local_path*, streaming.

        The local file is written to a temp name next to it, fsynced and renamed into
        place, so *local_path* is never left half-written (an SST file that RocksDB
        ingests must be complete).

        Raises:
            CheckpointFileMissingError: no file at *path*.
        """

    def fetch_file(self, path: str, local_path: str) -> bool:
        """Make the new local file *local_path* hold the immutable file at *path*, for a local
        working copy that only reads it (a snapshot's SST): where this storage is a directory on
        the local path's file system, a hard link, which copies nothing; otherwise a download
        (:meth:`download_file`). Returns True when linked.

        Raises:
            CheckpointFileMissingError: no file at *path*.
        """
        self.download_file(path, local_path)
        return False

    @abstractmethod
    def exists(self, path: str) -> bool:
        """True if a file (not a directory) exists at *path*."""

    def root_exists(self) -> bool:
        """True unless nothing is at this storage's root: a local directory that does not
        exist, or a prefix under which no object is stored. Storages that cannot tell say
        True (the caller then reports what it misses, not a missing location)."""
        return True

    @abstractmethod
    def size(self, path: str) -> int:
        """Size in bytes of the file at *path*.

        Raises:
            CheckpointFileMissingError: no file at *path*.
        """

    @abstractmethod
    def list_dir(self, path: str = "", *, temp_files: bool = False) -> list[str]:
        """Sorted base names of the files directly inside directory *path*.

        Subdirectories and the storage layer's own temp files are left out; with
        ``temp_files=True`` only the temp files are listed (in-flight writes, or writes a
        crash cut short, which cleanup removes once their version is past retention). A
        directory that does not exist lists as ``[]`` (object stores cannot tell the
        difference).
        """

    # ---- writing -------------------------------------------------------------------

    @abstractmethod
    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = True) -> None:
        """Atomically and durably write *data* as the file at *path*.

        Parent directories are created as needed. With ``overwrite=False`` the write is
        an atomic create-if-absent.

        Raises:
            FileExistsError: ``overwrite=False`` and a file already exists at *path*.
        """

    @abstractmethod
    def upload_file(self, local_path: str, path: str) -> None:
        """Copy local file *local_path* to *path* with the guarantees of :meth:`write_bytes`.

        The content is streamed (memory use is bounded by a chunk size, not the file
        size), so multi-GiB SST files can be uploaded. An existing file is replaced.
        """

    @abstractmethod
    def delete(self, path: str) -> None:
        """Delete the file at *path*; a missing file is not an error."""

    def delete_many(self, paths: Iterable[str]) -> None:
        """Delete several files; missing files are not errors.

        Backends with a batch call (S3 DeleteObjects) override this; the default
        deletes one by one.
        """
        for path in paths:
            self.delete(path)

    def delete_empty_dir(self, path: str) -> None:  # noqa: B027 - an optional hook: object stores have no directories
        """Remove directory *path* if it is empty; a missing or non-empty directory is not an
        error. Directories are implicit (created by writes), so a storage that has them (a file
        system) keeps them after their last file is deleted until this is called; object
        stores have none, and this default does nothing."""

    # ---- navigation and lifecycle --------------------------------------------------

    @abstractmethod
    def child(self, subpath: str) -> "CheckpointStorage":
        """Storage rooted at ``root/subpath``, sharing this one's connection.

        The child does not own the connection: :meth:`close` on a child is a no-op and
        the child stops working once its parent is closed.
        """

    def full_url(self, path: str) -> str:
        """The URL of *path* under this root, for error messages and logs."""
        rel = clean_path(path, allow_root=True)
        if not rel:
            return self.url
        # Only a bare root such as "/" or "file:///" keeps its trailing slash.
        return f"{self.url}{rel}" if self.url.endswith("/") else f"{self.url}/{rel}"

    def close(self) -> None:  # noqa: B027 - an optional hook: storages without connections keep this no-op
        """Release connections held by this storage (a no-op where there are none)."""

    def __enter__(self) -> "CheckpointStorage":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def join_root(root: str, rel: str) -> str:
    """Join a backend-native root path and a cleaned relative path."""
    if not rel:
        return root
    if not root:
        return rel
    return posixpath.join(root, rel)

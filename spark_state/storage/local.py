"""Checkpoint storage on a local (or locally mounted) directory.

How the guarantees of :class:`~spark_state.storage.CheckpointStorage` are met:

* **Atomicity** - every write goes to a temp file in the *target's own directory*
  (same file system, so the final step is a rename, not a copy) and is published with
  ``os.replace``, which POSIX makes atomic: readers see the old or the new inode.
* **Durability** - the temp file is fsynced before it is published, and the directory
  is fsynced after, because on ext4/xfs a rename is only durable once the directory
  entry is. Newly created parent directories are fsynced into their parents for the
  same reason.
* **Create-if-absent** (``overwrite=False``) - the fully written temp file is
  ``os.link``-ed to the target name. ``link(2)`` fails with ``EEXIST`` if the name
  exists, atomically, so of two racing writers exactly one wins and no reader ever sees
  a partial file (an ``O_EXCL`` create of the target itself would expose the file while
  it is still being written).

Deletes are not fsynced: a crash may bring a deleted file back, which costs disk space
but no correctness (deleted files are old versions that nothing references any more).

Failures of the disk itself (no space, read-only, permission, I/O error) become
:class:`~spark_state.errors.LocalDiskError` naming the store, the file, the cause and the
fix (:mod:`.localdisk`). They are not retried: a write that failed left the old file (or
none) in place, so nothing partial is ever visible.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from typing import BinaryIO, Callable, Iterator
from urllib.parse import quote, unquote, urlsplit

from ..errors import CheckpointFileMissingError, ConfigError, SparkStateError, StorageError
from .base import CheckpointStorage, clean_path, is_temp_name, temp_name
from .localdisk import disk_errno, local_disk_error

__all__ = ["LocalStorage", "atomic_local_copy", "atomic_local_write"]

_COPY_CHUNK = 1 << 20  # 1 MiB: large enough for throughput, small enough to stream
#: Why a hard link cannot be made where a copy can: another file system, no links supported or
#: allowed, too many links to the inode.
_NO_LINK = frozenset({errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EACCES})


def _fsync_dir(path: str) -> None:
    """Make directory entries (renames, links, new children) of *path* durable."""
    if os.name == "nt":  # Windows cannot open directories; NTFS journals metadata itself
        return
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _makedirs_durable(path: str) -> None:
    """``os.makedirs(path, exist_ok=True)``, fsyncing each new directory into its parent.

    Without the parent fsync a crash could lose a new directory, and every durable file
    inside it with it.
    """
    if os.path.isdir(path):
        return
    missing: list[str] = []
    cur = path
    while not os.path.isdir(cur):
        missing.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory)
        except FileExistsError:
            if not os.path.isdir(directory):
                # Not FileExistsError: that is reserved for "the target file exists".
                raise NotADirectoryError(errno.ENOTDIR, "a file is in the way of a directory", directory) from None
        _fsync_dir(os.path.dirname(directory))


def atomic_local_write(target: str, fill: Callable[[BinaryIO], object], *, overwrite: bool = True) -> None:
    """Write a local file atomically and durably.

    *fill* writes the content to the file object it is given (a temp file next to
    *target*); then the temp file is fsynced and published by rename (or hard link
    when ``overwrite=False``), and the directory is fsynced. On any failure the temp
    file is removed and *target* is untouched.

    Raises:
        FileExistsError: ``overwrite=False`` and *target* exists.
        OSError: any failure of the local file system (callers map it).
    """
    directory, name = os.path.split(os.path.abspath(target))
    _makedirs_durable(directory)
    tmp = os.path.join(directory, temp_name(name, secrets.token_hex(8)))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        if overwrite:
            os.replace(tmp, target)
        else:
            # link(2) refuses an existing target atomically; the temp name is dropped after.
            os.link(tmp, target)
            os.unlink(tmp)
        _fsync_dir(directory)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_local_copy(read: Callable[[int], bytes], target: str, *, store: str, source: str) -> None:
    """Stream ``read(n)`` chunks into the local file ``target`` with :func:`atomic_local_write`.

    Failures of the local disk (``target``'s side) become a LocalDiskError of the working
    directory naming ``store``, ``target`` and the cause (a SparkStateError, so a retrying
    caller never retries them and never mistakes them for a missing checkpoint file);
    failures of ``read`` (the checkpoint side) propagate unchanged, their cause chain
    included (a storage's retry policy reads the S3 error code there), so the caller can map
    or retry them.
    """
    source_failures: list[BaseException] = []

    def fill(dst: BinaryIO) -> None:
        while True:
            try:
                chunk = read(_COPY_CHUNK)
            except BaseException as exc:
                source_failures.append(exc)
                raise
            if not chunk:
                return
            dst.write(chunk)

    try:
        atomic_local_write(target, fill)
    except OSError as exc:
        if isinstance(exc, SparkStateError) or any(exc is failure for failure in source_failures):
            raise
        raise local_disk_error(exc, store=store, path=target, doing=f"downloading {source}") from exc


class LocalStorage(CheckpointStorage):
    """Checkpoint storage in a local directory, given as a path or a ``file://`` URL.

    The root directory need not exist; it is created by the first write.
    """

    def __init__(self, url: str) -> None:
        if url.startswith("file:"):
            parts = urlsplit(url)
            if parts.netloc not in ("", "localhost"):
                raise ConfigError(
                    f"file URL {url!r} names host {parts.netloc!r}; only local paths "
                    "(file:///path) are supported"
                )
            path = unquote(parts.path)
            if not path:
                raise ConfigError(f"file URL {url!r} has no path")
            self.root = os.path.abspath(os.path.expanduser(path))
            # Quoted, so that the URL parses back to this root (a '#', '?' or '%' in a directory name)
            self.url = "file://" + quote(self.root, safe="/")
        else:
            if not url:
                raise ConfigError("checkpoint location is empty")
            self.root = os.path.abspath(os.path.expanduser(url))
            self.url = self.root

    # ---- helpers -------------------------------------------------------------------

    def _abs(self, path: str, *, allow_root: bool = False) -> str:
        rel = clean_path(path, allow_root=allow_root)
        return os.path.join(self.root, *rel.split("/")) if rel else self.root

    @contextlib.contextmanager
    def _errors(self, op: str, path: str) -> Iterator[None]:
        """Turn unexpected OSErrors into StorageError naming the operation and file.

        FileExistsError passes through unchanged because the interface promises it for
        ``overwrite=False``; our own errors (some of which are OSErrors) pass too.
        """
        try:
            yield
        except (SparkStateError, FileExistsError):
            raise
        except OSError as e:
            url = self.full_url(path)
            if disk_errno(e) is not None:
                raise local_disk_error(e, store=self.url, path=self._abs(path, allow_root=True),
                                       doing=f"{op} {url}", kind="checkpoint") from e
            raise StorageError(f"checkpoint storage {self.url}: cannot {op} {url}: {e}") from e

    def _missing(self, path: str, e: BaseException) -> CheckpointFileMissingError:
        err = CheckpointFileMissingError(self.full_url(path))
        err.__cause__ = e
        return err

    # ---- reading -------------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        target = self._abs(path)
        with self._errors("read", path):
            try:
                with open(target, "rb") as f:
                    return f.read()
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
                raise self._missing(path, e) from e

    def download_file(self, path: str, local_path: str) -> None:
        source = self._abs(path)
        with self._errors("download", path):
            try:
                src = open(source, "rb")
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
                raise self._missing(path, e) from e
        with src:
            def read(n: int) -> bytes:
                with self._errors("read", path):
                    return src.read(n)
            # The local side is the caller's working directory: its failures are reported
            # as such, not as failures of checkpoint storage.
            atomic_local_copy(read, local_path, store=self.url, source=self.full_url(path))

    def fetch_file(self, path: str, local_path: str) -> bool:
        # Checkpoint files are never written in place (writes go to a temp name and are renamed,
        # deletes unlink), so the working copy may share the inode; another file system, or one
        # without hard links, gets a copy.
        source = self._abs(path)
        try:
            os.link(source, local_path)
            return True
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
            if not os.path.isfile(source):
                raise self._missing(path, e) from e
            raise  # the local side is missing: the caller's working directory
        except OSError as e:
            if e.errno not in _NO_LINK:
                raise
        self.download_file(path, local_path)
        return False

    def exists(self, path: str) -> bool:
        return os.path.isfile(self._abs(path))

    def root_exists(self) -> bool:
        return os.path.isdir(self.root)

    def size(self, path: str) -> int:
        target = self._abs(path)
        with self._errors("stat", path):
            try:
                st = os.stat(target)
            except (FileNotFoundError, NotADirectoryError) as e:
                raise self._missing(path, e) from e
            if not stat.S_ISREG(st.st_mode):
                raise CheckpointFileMissingError(self.full_url(path))
            return st.st_size

    def list_dir(self, path: str = "", *, temp_files: bool = False) -> list[str]:
        directory = self._abs(path, allow_root=True)
        with self._errors("list", path):
            try:
                with os.scandir(directory) as it:
                    names = [e.name for e in it if e.is_file() and is_temp_name(e.name) == temp_files]
            except (FileNotFoundError, NotADirectoryError):
                return []
        return sorted(names)

    # ---- writing -------------------------------------------------------------------

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = True) -> None:
        target = self._writable(path)
        with self._errors("write", path):
            try:
                atomic_local_write(target, lambda f: f.write(data), overwrite=overwrite)
            except FileExistsError as e:
                raise FileExistsError(f"{self.full_url(path)} already exists (overwrite=False)") from e

    def upload_file(self, local_path: str, path: str) -> None:
        target = self._writable(path)
        # Opened outside _errors: a missing *local* source is the caller's FileNotFoundError,
        # not a checkpoint storage failure.
        with open(local_path, "rb") as src, self._errors("upload to", path):
            atomic_local_write(target, lambda dst: shutil.copyfileobj(src, dst, _COPY_CHUNK))

    def _writable(self, path: str) -> str:
        target = self._abs(path)
        if is_temp_name(os.path.basename(target)):
            raise ValueError(f"storage path {path!r} has the form of an internal temp file name")
        return target

    def delete(self, path: str) -> None:
        target = self._abs(path)
        with self._errors("delete", path):
            try:
                os.unlink(target)
            except (FileNotFoundError, NotADirectoryError):
                pass

    def delete_empty_dir(self, path: str) -> None:
        target = self._abs(path)
        with self._errors("delete the directory", path):
            try:
                os.rmdir(target)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise

    # ---- navigation ----------------------------------------------------------------

    def child(self, subpath: str) -> "LocalStorage":
        return LocalStorage(self.full_url(clean_path(subpath, allow_root=True)))

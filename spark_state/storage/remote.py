"""Checkpoint storage on remote file systems through fsspec: S3 (s3fs) and HDFS (hdfs-native).

:class:`FsspecStorage` does path handling and error mapping; a small :class:`~.fs_backend.Backend`
object supplies what differs between an object store and a file system (:mod:`.s3`, :mod:`.hdfs`).

How the guarantees of :class:`~spark_state.storage.CheckpointStorage` are met:

* **S3** - a PUT (or the completion of a multipart upload) is atomic by definition: the
  object appears whole or not at all, and S3 has been strongly read-after-write
  consistent since 2020. So files are written directly under their final key; a rename
  would be a non-atomic copy + delete on S3 and is never used. Durability is S3's own
  once the PUT is acknowledged. ``overwrite=False`` sends ``If-None-Match: *``, which
  the server evaluates atomically (one racing writer wins, the others get HTTP 412,
  mapped to :class:`FileExistsError`).
* **HDFS** - a file being written is visible to readers with a growing length, so files
  are written under a hidden temp name in the target directory and then renamed. HDFS
  ``rename`` with the OVERWRITE option is a single atomic NameNode operation; without
  it, the rename fails if the target exists, which gives an atomic create-if-absent.
  Durability: closing the file waits until every DataNode in the write pipeline has
  acknowledged all packets and the NameNode has completed the file, i.e. the data is
  replicated ``dfs.replication`` times - the same guarantee Spark's own HDFS checkpoint
  manager relies on. (Surviving a simultaneous power loss of all replicas additionally
  needs ``dfs.datanode.synconclose=true`` on the DataNodes.)

Errors are mapped to :mod:`spark_state.errors`: missing files to
:class:`~spark_state.errors.CheckpointFileMissingError`, connection failures to
:class:`~spark_state.errors.StorageUnavailableError` (saying what to check), transient
failures that outlasted the retry budget to
:class:`~spark_state.errors.StorageRetriesExhaustedError`, everything else to
:class:`~spark_state.errors.StorageError`; every message names the storage root (the store),
the operation, the file and the cause.

Retries (:mod:`.retry`): every operation runs under the storage's :class:`RetryPolicy`; the
backend says which failures are transient (:mod:`.s3_faults` for S3). Uploads that fail
leave no visible partial object (S3 publishes a multipart upload only when it is
completed; a failed one is aborted, by s3fs and again by :meth:`.s3.S3Backend.after_failed_upload`
should that abort itself have failed).
"""

from __future__ import annotations

import errno
import logging
import os
import posixpath
import threading
import time
from typing import Any, Callable, Iterable, Literal, Optional, TypeVar

from ..errors import (
    CheckpointFileMissingError,
    SparkStateError,
    StorageError,
    StorageRetriesExhaustedError,
    StorageUnavailableError,
)
from .base import CheckpointStorage, clean_path, is_temp_name, join_root
from .fs_backend import Backend
from .local import atomic_local_copy
from .retry import RetryBudget, RetryPolicy, RetryStats

_LOG = logging.getLogger(__name__)

__all__ = ["FsspecStorage"]

T = TypeVar("T")

PROBE_TIMEOUT_S = 10.0
"""How long :meth:`FsspecStorage.probe` waits for an answer. Connection refusals are
reported much sooner; this bounds the case of a server that accepts connections but
never answers, where hdfs-native would otherwise wait forever."""

_Missing = Literal["raise", "none", "error"]

_READ_MISSING = (FileNotFoundError, IsADirectoryError, NotADirectoryError)


class FsspecStorage(CheckpointStorage):
    """Checkpoint storage on an fsspec file system (S3 via s3fs, HDFS via hdfs-native).

    Args:
        fs: the fsspec file system instance (use :func:`~spark_state.storage.open_storage`
            rather than building one by hand).
        url: the root URL as the user gave it, used in messages.
        root: the same root in the file system's own path syntax (``bucket/prefix`` for
            s3fs, ``/path`` for hdfs-native).
        backend: the :class:`Backend` matching *fs*.
        owns_fs: whether :meth:`close` releases *fs* (false for :meth:`child` storages).
        retry: how operations are retried (:mod:`.retry`); children share it.
        stats: retry counters; children add to their parent's.
    """

    def __init__(self, fs: Any, url: str, root: str, backend: Backend, *, owns_fs: bool = True,
                 retry: Optional[RetryPolicy] = None, stats: Optional[RetryStats] = None) -> None:
        self.fs = fs
        self.url = url
        self.root = root
        self.backend = backend
        self.retry = retry or RetryPolicy()
        self.stats = stats if stats is not None else RetryStats()
        self._owns_fs = owns_fs

    # ---- helpers -------------------------------------------------------------------

    def _p(self, path: str, *, allow_root: bool = False) -> str:
        return join_root(self.root, clean_path(path, allow_root=allow_root))

    def _run(self, op: str, path: str, fn: Callable[..., T], *args: Any, missing: _Missing = "raise",
             create: Optional[bytes] = None, after_failure: Optional[Callable[[], None]] = None,
             **kwargs: Any) -> Optional[T]:
        """Call *fn* under the retry policy, mapping its exceptions for operation *op* on *path*.

        *missing* says what "not found" means here: ``"raise"`` ->
        CheckpointFileMissingError, ``"none"`` -> return None, ``"error"`` -> a
        StorageError (for writes, where a missing bucket or parent is a failure).

        *create* is the content of a create-if-absent write: a conflict (the file exists) is
        resolved by reading the file back (see :meth:`write_bytes`).

        *after_failure* runs after each failed attempt (e.g. to abort a cut upload).
        """
        budget = RetryBudget(self.retry)
        while True:
            try:
                result = fn(*args, **kwargs)
                self._count(budget)
                return result
            except SparkStateError:
                raise
            except Exception as raw:
                exc = self.backend.normalize(raw)
                if after_failure is not None:
                    after_failure()
                if isinstance(exc, FileExistsError) and create is not None and self._holds(path, create):
                    self._count(budget)
                    self.stats.add(create_conflicts_resolved=1)
                    _LOG.info("create-if-absent of %s found the file holding exactly the bytes written (an "
                              "earlier attempt of this write was applied but its answer was lost, or an "
                              "identical write won): success", self.full_url(path))
                    return None
                transient = self.backend.is_transient(raw)
                if transient:
                    delay = budget.next_delay()
                    if delay is not None:
                        _LOG.info("%s %s failed (%s); attempt %d of %d in %.2f s", op, self.full_url(path),
                                  self.backend.describe(raw), budget.attempts, self.retry.attempts, delay)
                        self.stats.add(retries=1, slept_s=delay)
                        time.sleep(delay)
                        continue
                self._count(budget, exhausted=transient)
                if isinstance(exc, _READ_MISSING) and missing != "error" and not transient:
                    if missing == "none":
                        return None
                    raise CheckpointFileMissingError(self.full_url(path)) from raw
                raise self._translate(op, path, exc, raw, budget, exhausted=transient) from raw

    def _count(self, budget: RetryBudget, exhausted: bool = False) -> None:
        retried = budget.attempts > 1
        self.stats.add(operations=1, retried_operations=int(retried), exhausted=int(exhausted))

    def _holds(self, path: str, data: bytes) -> bool:
        """True if the file at *path* holds exactly *data* (read with retries)."""
        try:
            return self.read_bytes(path) == data
        except CheckpointFileMissingError:
            return False

    def _translate(self, op: str, path: str, exc: BaseException, raw: BaseException, budget: RetryBudget,
                   exhausted: bool) -> BaseException:
        url = self.full_url(path)
        if isinstance(exc, FileExistsError):
            return FileExistsError(errno.EEXIST, f"{url} already exists (overwrite=False)")
        detail = self.backend.describe(raw)
        where = f"{self.backend.name} checkpoint storage {self.url}: {op} {url}"
        tries = f" after {budget.attempts} attempts in {budget.elapsed_s:.1f} s" if budget.attempts > 1 else ""
        if exhausted:
            return StorageRetriesExhaustedError(
                f"{where} failed{tries} with errors that are normally temporary; last: {detail}. The "
                f"storage kept failing for the whole retry budget ({self.retry.describe()}; options "
                f"storage.retry.*). Check {self.backend.what_to_check}, and its request rate and health.",
                budget.attempts, budget.elapsed_s,
            )
        if self.backend.is_unavailable(exc):
            return StorageUnavailableError(
                f"{self.backend.name} checkpoint storage {self.url} is unreachable: {op} {url} "
                f"failed{tries} with {detail}. Check {self.backend.what_to_check}."
            )
        if isinstance(exc, PermissionError):
            return StorageError(
                f"{where} was denied{tries} ({detail}); check the credentials and the permissions "
                "on the checkpoint location. Not retried: access errors do not pass by themselves"
            )
        return StorageError(f"{where} failed{tries}: {detail}{self.backend.hint(exc)}")

    def _writable(self, path: str) -> str:
        p = self._p(path)
        if is_temp_name(posixpath.basename(p)):
            raise ValueError(f"storage path {path!r} has the form of an internal temp file name")
        return p

    # ---- reading -------------------------------------------------------------------

    def read_bytes(self, path: str) -> bytes:
        data = self._run("read", path, self.fs.cat_file, self._p(path))
        return bytes(data)  # type: ignore[arg-type]

    def download_file(self, path: str, local_path: str) -> None:
        source = self._p(path)

        def attempt() -> None:
            # One attempt = open + the whole copy: a stream cut half-way is retried from the
            # start into a fresh temp file, so local_path is never left half-written. Local
            # failures (a full local disk) are LocalDiskErrors, never retried.
            with self.fs.open(source, "rb") as src:
                atomic_local_copy(src.read, local_path, store=self.url, source=self.full_url(path))

        self._run("download", path, attempt)

    def _info(self, path: str) -> Optional[dict[str, Any]]:
        return self._run("stat", path, self.fs.info, self._p(path), missing="none")

    def exists(self, path: str) -> bool:
        info = self._info(path)
        return info is not None and info.get("type") == "file"

    def root_exists(self) -> bool:
        # An object store's "directory" exists while an object is stored under its prefix.
        root = self._p("", allow_root=True)
        return bool(self._run("exists", "", self.fs.exists, root, missing="none"))

    def size(self, path: str) -> int:
        info = self._info(path)
        if info is None or info.get("type") != "file":
            raise CheckpointFileMissingError(self.full_url(path))
        return int(info["size"])

    def list_dir(self, path: str = "", *, temp_files: bool = False) -> list[str]:
        directory = self._p(path, allow_root=True)
        entries = self._run("list", path, self.fs.ls, directory, detail=True, missing="none") or []
        parent = directory.rstrip("/") or "/"
        names = []
        for entry in entries:
            name = self.fs._strip_protocol(entry["name"]).rstrip("/")
            # Listing a file path returns the file itself on some backends; keep children only.
            if entry.get("type") != "file" or (posixpath.dirname(name) or "/") != parent:
                continue
            base = posixpath.basename(name)
            if is_temp_name(base) == temp_files:
                names.append(base)
        return sorted(names)

    # ---- writing -------------------------------------------------------------------

    def write_bytes(self, path: str, data: bytes, *, overwrite: bool = True) -> None:
        """See :meth:`CheckpointStorage.write_bytes`.

        Create-if-absent (``overwrite=False``) and retries: a request whose answer was lost
        may have been applied, and aiohttp or botocore may resend it without telling us
        (:mod:`.s3_faults`); the resent request then fails with "exists" against *our own*
        object. So a conflict is resolved by reading the file back: if it holds exactly
        *data*, the write succeeded; otherwise :class:`FileExistsError` (another writer won).
        Among writers of different content exactly one succeeds; writers of identical
        content may all succeed (the stored file is the same either way). The engine's
        commit documents carry a random commit id, so their writers always differ.
        """
        payload = bytes(data)
        self._run("write", path, self.backend.put, self.fs, self._writable(path), payload, overwrite,
                  missing="error", create=None if overwrite else payload)

    def upload_file(self, local_path: str, path: str) -> None:
        target = self._writable(path)
        if not os.path.isfile(local_path):  # the caller's problem, not the storage's
            raise FileNotFoundError(errno.ENOENT, "local file to upload does not exist", local_path)
        big = self.backend.upload_may_leave_parts(os.path.getsize(local_path))
        cleanup = (lambda: self.backend.after_failed_upload(self.fs, target)) if big else None
        self._run("upload to", path, self.backend.upload, self.fs, local_path, target, missing="error",
                  after_failure=cleanup)

    def delete(self, path: str) -> None:
        self._run("delete", path, self.fs.rm_file, self._p(path), missing="none")

    def delete_many(self, paths: Iterable[str]) -> None:
        targets = [self._p(p) for p in paths]  # validate all before deleting any
        if targets:
            self._run(f"delete {len(targets)} files under", "", self.backend.delete_many, self.fs, targets,
                      missing="none")

    def delete_empty_dir(self, path: str) -> None:
        self._run("delete the directory", path, self.backend.delete_empty_dir, self.fs, self._p(path), missing="none")

    # ---- navigation and lifecycle --------------------------------------------------

    def child(self, subpath: str) -> "FsspecStorage":
        rel = clean_path(subpath, allow_root=True)
        return FsspecStorage(self.fs, self.full_url(rel), join_root(self.root, rel), self.backend, owns_fs=False,
                             retry=self.retry, stats=self.stats)

    def probe(self, timeout: Optional[float] = None) -> None:
        """Check that the backend answers, by a metadata lookup of the root.

        The root not existing yet is fine. The lookup runs in a daemon thread so that a
        server that accepts connections but never replies cannot hang the caller; in that
        case the thread is abandoned (the native call cannot be interrupted).

        Args:
            timeout: seconds to wait; default :data:`PROBE_TIMEOUT_S`.

        Raises:
            StorageUnavailableError: the backend could not be reached within *timeout*.
            StorageError: it answered with another failure (e.g. access denied).
        """
        timeout = PROBE_TIMEOUT_S if timeout is None else timeout
        outcome: list[Optional[BaseException]] = []

        def lookup() -> None:
            try:
                self.fs.info(self.root or "/")
                outcome.append(None)
            except BaseException as e:  # handed to the calling thread
                outcome.append(e)

        thread = threading.Thread(target=lookup, name=f"spark-state-probe {self.url}", daemon=True)
        thread.start()
        thread.join(timeout)
        if not outcome:
            raise StorageUnavailableError(
                f"{self.backend.name} checkpoint storage {self.url} did not answer within {timeout:g} s. "
                f"Check {self.backend.what_to_check}."
            )
        raw = outcome[0]
        if raw is None:
            return
        exc = self.backend.normalize(raw)
        if isinstance(exc, FileNotFoundError):
            return
        raise self._translate("connect to", "", exc, raw, RetryBudget(self.retry), exhausted=False) from raw

    def close(self) -> None:
        if self._owns_fs:
            self.backend.close(self.fs)

"""What differs between remote file systems, behind :class:`~spark_state.storage.remote.FsspecStorage`.

:class:`Backend` is the interface: error classification (unavailable, transient, hints), the
atomic write primitives (``put``, ``upload``) and bulk delete. :mod:`.s3` and :mod:`.hdfs`
implement it; :class:`~spark_state.storage.remote.FsspecStorage` calls nothing else that
depends on the file system.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any

__all__ = ["Backend", "COPY_CHUNK"]

COPY_CHUNK = 1 << 20
"""Streaming copy buffer (1 MiB)."""


class Backend:
    """What differs between remote file systems; subclassed per fsspec implementation."""

    name = "remote"

    def __init__(self, what_to_check: str) -> None:
        self.what_to_check = what_to_check
        """Advice appended to StorageUnavailableError messages."""

    def normalize(self, exc: BaseException) -> BaseException:
        """Map a backend-specific exception to a builtin one where there is a match."""
        return exc

    def is_unavailable(self, exc: BaseException) -> bool:
        """True if *exc* means the service could not be reached at all."""
        return isinstance(exc, (ConnectionError, TimeoutError))

    def hint(self, exc: BaseException) -> str:
        """Extra advice for a StorageError caused by *exc* ('' if none)."""
        return ""

    def is_transient(self, exc: BaseException) -> bool:
        """True if retrying the operation that raised *exc* can help."""
        return False

    def describe(self, exc: BaseException) -> str:
        """*exc* as text for messages (type, server error code, message)."""
        return f"{type(exc).__name__}: {exc}"

    def after_failed_upload(self, fs: Any, path: str) -> None:
        """Clean up what a failed upload to *path* may have left (best effort)."""

    def put(self, fs: Any, path: str, data: bytes, overwrite: bool) -> None:
        raise NotImplementedError

    def upload(self, fs: Any, local_path: str, path: str) -> None:
        raise NotImplementedError

    def delete_many(self, fs: Any, paths: list[str]) -> None:
        for path in paths:
            with suppress(FileNotFoundError):
                fs.rm_file(path)

    def delete_empty_dir(self, fs: Any, path: str) -> None:
        """Remove the empty directory *path* where the file system has directories (see
        :meth:`~spark_state.storage.CheckpointStorage.delete_empty_dir`); object stores have
        none, so the default does nothing."""

    def close(self, fs: Any) -> None:
        """Release the file system's connections (best effort)."""

    def upload_may_leave_parts(self, size: int) -> bool:
        """Whether a failed upload of *size* bytes may leave pieces behind that
        :meth:`after_failed_upload` must remove (S3 multipart uploads)."""
        return False

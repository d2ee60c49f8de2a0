"""Failures of a local file system, as :class:`~spark_state.errors.LocalDiskError` messages that
say which store, which path, what went wrong and what to do.

Two kinds of local directory fail this way, with different advice:

* ``"checkpoint"``: checkpoint storage on local disk (:class:`~spark_state.storage.LocalStorage`);
* ``"working"``: a store's local working copy under ``localDir`` (RocksDB files, hashmap
  snapshots, downloaded snapshot files, the provider's read views).

Recognised causes: ENOSPC, EDQUOT, EROFS, EACCES/EPERM and EIO, from ``OSError`` or, for
RocksDB (rocksdict raises plain ``Exception``), from its ``IO error: ...`` message. Nothing is
retried: waiting does not free space or fix permissions, and Spark's task retry (or a
restart after the operator fixed the disk) restores the state from checkpoint storage.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from typing import Iterator, Optional

from ..errors import LocalDiskError, SparkStateError

__all__ = ["disk_errno", "local_disk_errors", "local_disk_error"]

LOCAL_DIR_CONF = "spark.sql.streaming.stateStore.sparkState.localDir"

#: errno -> (what it means, what to do for a working directory, what to do for a checkpoint)
_CAUSES: dict[int, tuple[str, str, str]] = {
    errno.ENOSPC: ("No space left on device",
                   f"free space there, or set localDir ({LOCAL_DIR_CONF} / EngineConfig.local_dir) "
                   "to a directory on a larger disk",
                   "free space on that disk, or move the checkpoint location"),
    errno.EDQUOT: ("Disk quota exceeded",
                   f"raise the quota, or set localDir ({LOCAL_DIR_CONF}) to another disk",
                   "raise the quota, or move the checkpoint location"),
    errno.EROFS: ("Read-only file system",
                  f"remount it read-write, or set localDir ({LOCAL_DIR_CONF}) to a writable directory",
                  "remount it read-write, or move the checkpoint location"),
    errno.EACCES: ("Permission denied",
                   f"let user {os.getuid() if hasattr(os, 'getuid') else '?'} write there, or set localDir "
                   f"({LOCAL_DIR_CONF}) to a directory it may write",
                   "give this process write permission there, or move the checkpoint location"),
    errno.EIO: ("Input/output error",
                "the device reported an I/O error: check the disk (kernel log), or set localDir "
                f"({LOCAL_DIR_CONF}) to another disk",
                "the device reported an I/O error: check the disk (kernel log)"),
}
_CAUSES[errno.EPERM] = ("Operation not permitted",) + _CAUSES[errno.EACCES][1:]

# rocksdict raises plain Exception: RocksDB's "IO error: No space left on device: While appending
# to file: ..." or, from its Rust side (e.g. writing rocksdict-config.json), std::io::Error's
# "No space left on device (os error 28)".
_ROCKSDB_IO = re.compile(r"\bIO error\b", re.IGNORECASE)
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")
_BY_TEXT = [(re.compile(re.escape(text), re.IGNORECASE), code) for code, (text, _, _) in _CAUSES.items()]


def disk_errno(exc: BaseException) -> Optional[int]:
    """The local-disk errno ``exc`` stands for (``errno.ENOSPC``, ...), or None if it is not a
    recognised local file system failure."""
    if isinstance(exc, SparkStateError):
        return None
    code = getattr(exc, "errno", None)
    if isinstance(exc, OSError) and code in _CAUSES:
        return code
    text = str(exc)
    rust = _RUST_OS_ERROR.search(text)
    if rust and int(rust.group(1)) in _CAUSES:
        return int(rust.group(1))
    if isinstance(exc, OSError) or _ROCKSDB_IO.search(text):
        for pattern, value in _BY_TEXT:
            if pattern.search(text):
                return value
    return None


def _mount_point(path: str) -> str:
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    while not os.path.ismount(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def _space(path: str) -> str:
    try:
        usage = shutil.disk_usage(_mount_point(path))
    except OSError:
        return ""
    return f" ({_size(usage.free)} free of {_size(usage.total)})"


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def local_disk_error(exc: BaseException, *, store: str, path: str, doing: str, kind: str = "working",
                     code: Optional[int] = None) -> LocalDiskError:
    """A LocalDiskError for ``exc``; recognised causes (:func:`disk_errno`, or ``code``) get
    their specific advice, others the generic "check the local disk".

    Args:
        store: the store (its checkpoint URL) whose files these are.
        path: the local file or directory that failed.
        doing: what was being done, e.g. ``"writing the snapshot of version 7"``.
        kind: ``"working"`` (a local working directory) or ``"checkpoint"`` (checkpoint storage).
    """
    if code is None:
        code = disk_errno(exc)
    if code is None and isinstance(getattr(exc, "errno", None), int):
        code = exc.errno  # type: ignore[attr-defined]
    unknown = (str(exc), "check the local disk", "check the local disk")
    text, working_advice, checkpoint_advice = _CAUSES.get(code, unknown) if code is not None else unknown
    advice = checkpoint_advice if kind == "checkpoint" else working_advice
    where = "checkpoint storage on local disk" if kind == "checkpoint" else "local working directory"
    return LocalDiskError(
        f"store {store}: {doing} failed: {text} on {_mount_point(path)}{_space(path)} ({where}: {path}); "
        f"{advice}. [{type(exc).__name__}: {exc}]",
        path, code,
    )


@contextlib.contextmanager
def local_disk_errors(*, store: str, path: str, doing: str, kind: str = "working") -> Iterator[None]:
    """Turn recognised local file system failures raised inside the block into LocalDiskError
    (see :func:`local_disk_error`); everything else passes unchanged."""
    try:
        yield
    except LocalDiskError:
        raise
    except Exception as exc:
        code = disk_errno(exc)
        if code is None:
            raise
        failing = getattr(exc, "filename", None)
        raise local_disk_error(exc, store=store, path=failing if isinstance(failing, str) else path,
                               doing=doing, kind=kind, code=code) from exc

"""Every exception spark-state raises on purpose.

All of them derive from :class:`SparkStateError`, so callers can catch the family.
Messages are written for the person operating the query: they name the file, the
version or the option at fault, and where possible say what to do about it.
"""

from __future__ import annotations

from typing import Iterable, Optional


class SparkStateError(Exception):
    """Base class of all spark-state errors."""


class ConfigError(SparkStateError, ValueError):
    """An unknown option, or an option with a value that cannot be used."""


class ConnectUnsupportedError(ConfigError):
    """Something that needs a classic PySpark driver (a ``SparkContext``, the Py4J gateway,
    or the driver's start-up confs) was used with a Spark Connect session or builder; the
    message says what to do instead (see ``spark_state.spark.connect``)."""


class VersionNotFoundError(SparkStateError, LookupError):
    """A version was asked for that checkpoint storage does not hold."""

    def __init__(self, version: int, available: Iterable[int], location: str, detail: str = "") -> None:
        self.version = version
        self.available = sorted(available)
        self.location = location
        super().__init__(
            f"state version {version} not found in {location}"
            + (f": {detail}" if detail else "")
            + f"; available versions: {describe_versions(self.available)}"
        )


class CheckpointCorruptError(SparkStateError):
    """A checkpoint file exists but cannot be trusted (bad checksum, truncated, unparsable)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"corrupt checkpoint file {path}: {reason}")


class CheckpointFileMissingError(CheckpointCorruptError):
    """A file that a committed version references is absent from checkpoint storage."""

    def __init__(self, path: str, needed_by: Optional[str] = None) -> None:
        reason = "file is missing" + (f" (needed by {needed_by})" if needed_by else "")
        super().__init__(path, reason)


class IncompatibleFormatError(SparkStateError):
    """A checkpoint was written in a format version this release cannot read."""

    def __init__(self, path: str, found: object, supported: Iterable[int]) -> None:
        self.path = path
        self.found = found
        self.supported = sorted(supported)
        super().__init__(
            f"checkpoint file {path} has format version {found!r}, but this spark-state "
            f"release reads format versions {self.supported}; restore it with the release "
            "that wrote it, or start the query from a new checkpoint location"
        )


class StorageError(SparkStateError, OSError):
    """Checkpoint storage failed an operation."""


class StorageUnavailableError(StorageError):
    """Checkpoint storage cannot be reached at all (no NameNode, no S3 endpoint, ...)."""


class ConcurrentWriterError(SparkStateError, RuntimeError):
    """Two runs of a query are writing one checkpoint; the later one is fenced off."""


class StorageRetriesExhaustedError(StorageUnavailableError):
    """An operation kept failing with errors that are normally temporary (throttling, server
    errors, dropped connections, timeouts) until its retry budget ran out
    (``storage.retry.attempts`` / ``storage.retry.timeoutMs``)."""

    def __init__(self, message: str, attempts: int, elapsed_s: float) -> None:
        self.attempts = attempts
        self.elapsed_s = elapsed_s
        super().__init__(message)


class LocalDiskError(StorageError):
    """A local file system refused a write: no space left, read-only, permission denied, I/O
    error. Raised for checkpoint storage on local disk and for a store's local working
    directory (``localDir``); never retried, because waiting does not free space or fix
    permissions. ``path`` is the local path, ``errno`` the cause (``errno.ENOSPC``, ...)."""

    def __init__(self, message: str, path: str, errno_: Optional[int]) -> None:
        self.path = path
        self.errno = errno_
        super().__init__(message)
        # OSError.__init__ with one argument leaves errno/filename unset; keep ours.
        self.errno = errno_


class StoreStateError(SparkStateError, RuntimeError):
    """An operation was called in a state of the store that does not allow it."""


def describe_versions(versions: list[int]) -> str:
    """Render a sorted version list compactly: ``[]`` -> 'none', runs as 'a..b'."""
    if not versions:
        return "none"
    runs: list[str] = []
    start = prev = versions[0]
    for v in versions[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        runs.append(str(start) if start == prev else f"{start}..{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(runs)

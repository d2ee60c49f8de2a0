"""HDFS through hdfs-native: write under a hidden temp name, then an atomic NameNode rename.

See :mod:`spark_state.storage.remote` for how :class:`HdfsBackend` meets the storage contract.
"""

from __future__ import annotations

import errno
import posixpath
import re
import secrets
import shutil
from contextlib import suppress
from typing import Any, Callable

from .base import temp_name
from .fs_backend import COPY_CHUNK, Backend

__all__ = ["HdfsBackend"]


_HDFS_UNAVAILABLE = re.compile(
    r"connection refused|os error (101|104|110|111|113)|no route to host|network is unreachable"
    r"|timed out|rpc listener disconnected|connection reset|broken pipe|failed to lookup address"
    r"|name or service not known|temporary failure in name resolution|standbyexception",
    re.IGNORECASE,
)


_HDFS_TRANSIENT = re.compile(r"connection reset|broken pipe|os error (32|104)|rpc listener disconnected",
                             re.IGNORECASE)


class HdfsBackend(Backend):
    """HDFS (and viewfs) through hdfs-native: temp file + atomic NameNode rename."""

    name = "HDFS"

    def __init__(self, namenode: str, failover_attempts: str) -> None:
        super().__init__(
            f"that the NameNode {namenode} is running and reachable from this host (host, port, "
            "firewall); for an HA name service or viewfs, that its NameNode addresses are in the "
            "Hadoop configuration (HADOOP_CONF_DIR or hdfs.* options). Retries are capped at "
            f"dfs.client.failover.max.attempts={failover_attempts} so that an outage fails fast; "
            "set option hdfs.dfs.client.failover.max.attempts higher to wait longer"
        )

    def normalize(self, exc: BaseException) -> BaseException:
        # hdfs-native surfaces most NameNode exceptions as RuntimeError('RPCError("<java class>", ...)').
        if isinstance(exc, RuntimeError):
            text = str(exc)
            if "FileAlreadyExistsException" in text:
                return FileExistsError(errno.EEXIST, text)
            if "FileNotFoundException" in text:
                return FileNotFoundError(errno.ENOENT, text)
            if "AccessControlException" in text:
                return PermissionError(errno.EACCES, text)
        return exc

    def is_unavailable(self, exc: BaseException) -> bool:
        if super().is_unavailable(exc):
            return True
        if isinstance(exc, (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError)):
            return False
        return isinstance(exc, (OSError, RuntimeError)) and bool(_HDFS_UNAVAILABLE.search(str(exc)))

    def hint(self, exc: BaseException) -> str:
        if isinstance(exc, FileNotFoundError):
            return " (a parent path component is missing or is a file)"
        return ""

    def is_transient(self, exc: BaseException) -> bool:
        # Only a connection lost in the middle of a call. A refused or unresolvable NameNode
        # stays a fast failure (hdfs-native's failover settings already retried it).
        return isinstance(exc, (OSError, RuntimeError)) and bool(_HDFS_TRANSIENT.search(str(exc)))

    def put(self, fs: Any, path: str, data: bytes, overwrite: bool) -> None:
        self._write_then_rename(fs, path, lambda f: f.write(data), overwrite)

    def upload(self, fs: Any, local_path: str, path: str) -> None:
        with open(local_path, "rb") as src:
            self._write_then_rename(fs, path, lambda f: shutil.copyfileobj(src, f, COPY_CHUNK), True)

    def delete_empty_dir(self, fs: Any, path: str) -> None:
        # The NameNode refuses to remove a directory that still has entries (non-recursive).
        with suppress(FileNotFoundError):
            fs.rmdir(path)

    @staticmethod
    def _write_then_rename(fs: Any, path: str, fill: Callable[[Any], object], overwrite: bool) -> None:
        directory, name = posixpath.split(path)
        tmp = posixpath.join(directory, temp_name(name, secrets.token_hex(8)))
        created = False
        try:
            # overwrite=False on the temp name: never clobber anything, even a colliding temp.
            # Parent directories are created by the NameNode (WriteOptions.create_parent).
            with fs.open(tmp, "wb", overwrite=False) as f:
                created = True
                fill(f)
            # close() returned: the NameNode has completed the file; now publish it.
            fs.mv(tmp, path, overwrite=overwrite)
        except BaseException:
            if created:
                with suppress(Exception):
                    fs.rm_file(tmp)
            raise

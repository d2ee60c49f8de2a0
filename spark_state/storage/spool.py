"""A file written to checkpoint storage whose size is not known up front, in bounded memory.

:class:`SpooledUpload` is a writable binary file object. What is written is kept in memory up to
``memory_bytes``; past that it goes to a temporary file in a local scratch directory. When the
writer is done, :meth:`SpooledUpload.store` puts it at its path in checkpoint storage: from memory
with one ``write_bytes`` (the common, small case costs no local file), or from the local file with
``upload_file``. Its size and CRC-32 are counted as the bytes pass, so nothing is read back.

Invariant: the temporary file is removed by :meth:`close` (a ``with`` block), stored or not.
"""

from __future__ import annotations

import io
import os
import tempfile
import zlib
from typing import Optional

from .base import CheckpointStorage

#: What a file may hold in memory before it spools to local disk (a changelog of ~150k keys).
DEFAULT_MEMORY_BYTES = 8 << 20


class SpooledUpload(io.RawIOBase):
    """A writable binary file that becomes one file of checkpoint storage (see the module docstring)."""

    def __init__(self, scratch_dir: str, memory_bytes: Optional[int] = None) -> None:
        super().__init__()
        self._scratch_dir = scratch_dir
        self._memory_bytes = DEFAULT_MEMORY_BYTES if memory_bytes is None else memory_bytes
        self._buffer: Optional[io.BytesIO] = io.BytesIO()
        self._file: Optional[io.BufferedWriter] = None
        self._path: Optional[str] = None
        self.size = 0
        self._crc = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        n = len(view)
        self._crc = zlib.crc32(view, self._crc)
        self.size += n
        if self._buffer is not None and self._buffer.tell() + n > self._memory_bytes:
            self._spool()
        if self._buffer is not None:
            self._buffer.write(view)
        else:
            assert self._file is not None
            self._file.write(view)
        return n

    def _spool(self) -> None:
        assert self._buffer is not None
        os.makedirs(self._scratch_dir, exist_ok=True)
        fd, self._path = tempfile.mkstemp(prefix="spool-", dir=self._scratch_dir)
        self._file = os.fdopen(fd, "wb")
        self._file.write(self._buffer.getbuffer())
        self._buffer = None

    @property
    def crc32(self) -> int:
        return self._crc & 0xFFFFFFFF

    @property
    def spooled(self) -> bool:
        """Whether the bytes went to a local file (past ``memory_bytes``)."""
        return self._buffer is None

    def store(self, storage: CheckpointStorage, path: str, *, overwrite: bool = True) -> None:
        """Put what was written at ``path`` of ``storage``. A spooled file is uploaded, and
        ``overwrite=False`` is only taken from memory (storages create-if-absent from bytes only)."""
        if self._buffer is not None:
            storage.write_bytes(path, self._buffer.getvalue(), overwrite=overwrite)
            return
        if not overwrite:
            raise ValueError("a spooled upload always overwrites")
        assert self._file is not None and self._path is not None
        self._file.flush()
        storage.upload_file(self._path, path)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._path is not None:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            self._path = None
        self._buffer = None
        super().close()

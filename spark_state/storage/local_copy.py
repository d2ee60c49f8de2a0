"""A file of checkpoint storage as a local path, to be read memory-mapped rather than as bytes.

Large files (changelogs of big epochs, savepoint state files) are read a record batch at a time
from a memory-mapped local file: on local storage that is the file itself (checkpoint files are
never rewritten in place: writes go to a temporary name and are renamed), on remote storage a
download into a temporary directory that is removed when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator, Optional

from ..errors import CheckpointFileMissingError
from .base import CheckpointStorage, clean_path
from .local import LocalStorage


@contextlib.contextmanager
def local_file(storage: CheckpointStorage, path: str, scratch_dir: Optional[str] = None) -> Iterator[str]:
    """A local path holding file ``path`` of ``storage`` for the ``with`` block (see the module
    docstring); a download goes to a temporary directory under ``scratch_dir`` (default: the
    system's temp directory).

    Raises:
        CheckpointFileMissingError: no file at ``path``.
    """
    if isinstance(storage, LocalStorage):
        local = os.path.join(storage.root, *clean_path(path).split("/"))
        if not os.path.isfile(local):
            raise CheckpointFileMissingError(storage.full_url(path))
        yield local
        return
    if scratch_dir is not None:
        os.makedirs(scratch_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spark-state-copy-", dir=scratch_dir) as work:
        local = os.path.join(work, os.path.basename(clean_path(path)) or "file")
        storage.download_file(path, local)
        yield local

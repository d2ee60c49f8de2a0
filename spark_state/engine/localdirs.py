"""Local working directories of a process, and the removal of those of dead processes.

Every process keeps its stores' working copies (and the provider's read views) in one
*process directory* ``<parent>/spark-state-<random>/``, where ``<parent>`` is the configured
``localDir`` or the system temp dir. The process removes it at a normal exit (``atexit``).

But Python workers rarely exit normally: PySpark's daemon SIGKILLs an idle or unwanted worker
and SIGHUPs them all at shutdown, and a crash test or an OOM kill sends SIGKILL. ``atexit``
never runs then, and each such process would leave its working copies (whole RocksDB
databases) behind for good: local disk would grow with every worker ever started.

Invariant: a process directory holds a ``.owner`` file on which its process keeps an
exclusive ``flock`` for its whole life. The kernel releases the lock when the process dies,
however it dies. So a directory whose lock can be taken belongs to nobody, and
:func:`process_root` removes every such sibling when it creates a process's directory. A
directory is created under a staging name, locked, and only then renamed to its visible
name, so a reaper never sees a live directory unlocked. Directories without ``.owner`` (made
by earlier releases, or by someone else) are left alone.
"""

from __future__ import annotations

import atexit
import fcntl
import logging
import os
import shutil
import tempfile
import threading
from typing import Optional

_LOG = logging.getLogger(__name__)

PREFIX = "spark-state-"
OWNER_FILE = ".owner"
_STAGING_PREFIX = ".spark-state-staging-"

_roots: dict[str, str] = {}
_owner_fds: list[int] = []
_lock = threading.Lock()


def process_root(configured: Optional[str] = None) -> str:
    """This process's directory under ``configured`` (default: the system temp dir), created
    on first use; dead processes' directories there are removed at that moment."""
    parent = os.path.abspath(configured or tempfile.gettempdir())
    with _lock:
        root = _roots.get(parent)
        if root is None:
            os.makedirs(parent, exist_ok=True)
            root = _roots[parent] = _create(parent)
            atexit.register(shutil.rmtree, root, True)
            reap_dead(parent, keep=root)
        return root


def _forget_in_child() -> None:
    # A forked child is another process: it must not share (or outlive the lock of) its
    # parent's directory. Its inherited copies of the owner fds keep the parent's locks held
    # while it lives, which only delays the parent's reaping.
    global _lock
    _roots.clear()
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def _create(parent: str) -> str:
    staging = tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=parent)
    fd = os.open(os.path.join(staging, OWNER_FILE), os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a new file: nobody else can hold it
    os.write(fd, f"{os.getpid()}\n".encode())
    _owner_fds.append(fd)  # kept open, so the lock lives as long as the process
    root = os.path.join(parent, PREFIX + os.path.basename(staging)[len(_STAGING_PREFIX):])
    os.rename(staging, root)
    return root


def reap_dead(parent: str, keep: Optional[str] = None) -> list[str]:
    """Remove every ``spark-state-*`` directory under ``parent`` whose owner is dead; return them."""
    removed: list[str] = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        if not name.startswith(PREFIX) or path == keep:
            continue
        try:
            fd = os.open(os.path.join(path, OWNER_FILE), os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
        except OSError:  # no owner file: not ours to judge
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # its process is alive (or another reaper is at it)
            os.close(fd)
            continue
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    if removed:
        _LOG.info("removed %d working director%s of dead processes under %s", len(removed),
                  "y" if len(removed) == 1 else "ies", parent)
    return removed

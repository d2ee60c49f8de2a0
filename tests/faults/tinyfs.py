"""A tiny real file system for local disk faults: a tmpfs of a few MiB.

* a full disk: :meth:`TinyFs.fill` writes a filler file until the kernel answers ENOSPC;
  :meth:`TinyFs.free` deletes it;
* a disk that turns read-only half-way: :meth:`TinyFs.remount_ro` / :meth:`TinyFs.remount_rw`.

Mounting needs CAP_SYS_ADMIN. :func:`mount_mode` finds what this machine allows:

``"direct"``
    we may mount here (root in the container, as on the CI machines): the test mounts in
    the current mount namespace, so Spark's JVM and its Python workers see the mount too;
``"userns"``
    we may not, but ``unshare --user --map-root-user --mount`` works: :func:`needs_mount`
    runs the test again in a child pytest inside a new user + mount namespace, where it is
    "root" and may mount tmpfs (its Spark session, if any, starts inside that namespace);
``None``
    neither: the test is skipped, with the reason.

``SPARK_STATE_TEST_MOUNT=userns`` forces the second way (to test the fallback itself).
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Callable, Optional

import pytest

_INSIDE = "SPARK_STATE_TEST_IN_MOUNT_NS"
_FORCE = "SPARK_STATE_TEST_MOUNT"
_mode_cache: list[Optional[str]] = []


def _try(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def mount_mode() -> Optional[str]:
    """``"direct"``, ``"userns"`` or None (see the module docstring); probed once."""
    if os.environ.get(_INSIDE) == "1":
        return "direct"
    if not _mode_cache:
        forced = os.environ.get(_FORCE)
        probe = tempfile.mkdtemp(prefix="tinyfs-probe-")
        try:
            direct = forced != "userns" and _try(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", probe])
            if direct:
                _try(["umount", probe])
                mode: Optional[str] = "direct"
            elif shutil.which("unshare") and _try(
                    ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                     f"mount -t tmpfs -o size=1m tmpfs {probe}"]):
                mode = "userns"
            else:
                mode = None
        finally:
            os.rmdir(probe)
        _mode_cache.append(mode)
    return _mode_cache[0]


def needs_mount(test: Callable) -> Callable:
    """Decorator for tests that mount a :class:`TinyFs` (see the module docstring)."""

    @functools.wraps(test)
    def wrapper(*args, **kwargs):
        mode = mount_mode()
        if mode == "direct":
            return test(*args, **kwargs)
        if mode is None:
            pytest.skip("cannot mount a tmpfs here: not root with CAP_SYS_ADMIN, and unprivileged user "
                        "namespaces (unshare --user --map-root-user --mount) are not available")
        node = os.environ["PYTEST_CURRENT_TEST"].rsplit(" ", 1)[0]
        env = dict(os.environ, **{_INSIDE: "1"})
        env.pop("PYTEST_CURRENT_TEST", None)
        proc = subprocess.run(
            ["unshare", "--user", "--map-root-user", "--mount", sys.executable, "-m", "pytest", node, "-q",
             "-p", "no:cacheprovider", "-x"],
            env=env, capture_output=True, text=True, timeout=1200,
        )
        if proc.returncode != 0:
            pytest.fail(f"{node} failed inside a user + mount namespace:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}")
        if " passed" not in proc.stdout:
            pytest.fail(f"{node} did not pass inside a user + mount namespace:\n{proc.stdout[-3000:]}")

    return wrapper


class TinyFs:
    """A tmpfs of ``size`` bytes mounted on ``path`` (created if needed)."""

    def __init__(self, path: str, size: int) -> None:
        self.path = path
        self.size = size
        self.filler = os.path.join(path, ".filler")
        os.makedirs(path, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", path], check=True)

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.path).free

    def fill(self) -> int:
        """Write a filler file until the file system is full (ENOSPC); return its size."""
        written = 0
        with open(self.filler, "ab", buffering=0) as f:
            for chunk in (1 << 20, 1 << 16, 1 << 12, 1 << 9):
                block = b"\0" * chunk
                while True:
                    try:
                        written += f.write(block)
                    except OSError as e:
                        if e.errno != errno.ENOSPC:
                            raise
                        break
        assert self.free_bytes() < 4096, f"{self.path} still has {self.free_bytes()} bytes free"
        return written

    def free(self) -> None:
        """Delete the filler: the space is back."""
        if os.path.exists(self.filler):
            os.unlink(self.filler)

    def remount_ro(self) -> None:
        subprocess.run(["mount", "-o", "remount,ro", self.path], check=True)

    def remount_rw(self) -> None:
        subprocess.run(["mount", "-o", "remount,rw", self.path], check=True)

    def unmount(self) -> None:
        # Lazily if busy: a Spark worker or JVM may still hold a file open there.
        if subprocess.run(["umount", self.path], stderr=subprocess.DEVNULL).returncode != 0:
            subprocess.run(["umount", "-l", self.path], check=False)

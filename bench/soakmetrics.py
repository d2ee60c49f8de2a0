"""Measurements for the soak test (``bench/soak.py``): files and bytes under a directory (the
processes' memory and open files are :mod:`harness.processes`'s).

Bytes are disk use (allocated blocks), each inode counted once: a provider's read views and
RocksDB checkpoints are hard links to the store's SST files and use no extra space.
"""

from __future__ import annotations

import glob
import os
from dataclasses import asdict, dataclass


@dataclass
class DirStats:
    files: int = 0
    bytes: int = 0

    def add(self, other: "DirStats") -> "DirStats":
        return DirStats(self.files + other.files, self.bytes + other.bytes)


def dir_stats(*roots: str) -> DirStats:
    """Files (each name) and disk bytes (each inode once) under ``roots``; missing roots count 0."""
    files, seen, used = 0, set(), 0
    for root in roots:
        for base, _, names in os.walk(root):
            for name in names:
                try:
                    st = os.lstat(os.path.join(base, name))
                except FileNotFoundError:  # deleted while we walk: the system is running
                    continue
                files += 1
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    used += st.st_blocks * 512
    return DirStats(files, used)


def subdir_stats(root: str) -> dict[str, dict]:
    """``dir_stats`` of each entry directly under ``root`` (files directly in it: ``"."``)."""
    out: dict[str, dict] = {}
    if not os.path.isdir(root):
        return out
    loose = DirStats()
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.is_dir(follow_symlinks=False):
            out[entry.name] = asdict(dir_stats(entry.path))
        else:
            loose = loose.add(DirStats(1, entry.stat(follow_symlinks=False).st_blocks * 512))
    if loose.files:
        out["."] = asdict(loose)
    return out


def dirs_matching(pattern: str) -> list[str]:
    return sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isdir(p))

"""Measurements for the soak test (``bench/soak.py``): files and bytes under a directory, and the
memory and open files of the processes of a Spark application. Linux only (reads ``/proc``).

Bytes are disk use (allocated blocks), each inode counted once: a provider's read views and
RocksDB checkpoints are hard links to the store's SST files and use no extra space.
"""

from __future__ import annotations

import glob
import os
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Iterable


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


# ------------------------------------------------------------------------------------ processes
@dataclass
class Proc:
    pid: int
    ppid: int
    cmdline: str
    rss_kb: int
    fds: int


def _read_proc(pid: int) -> Proc | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    ppid = int(stat[stat.rindex(")") + 2:].split()[1])
    return Proc(pid, ppid, cmdline, rss, fds)


def descendants(root: int) -> list[Proc]:
    """Every live process below ``root``."""
    procs = [p for p in (_read_proc(int(n)) for n in os.listdir("/proc") if n.isdigit()) if p is not None]
    children: dict[int, list[Proc]] = defaultdict(list)
    for p in procs:
        children[p.ppid].append(p)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child.pid)
    return found


def classify(procs: Iterable[Proc]) -> dict[str, list[Proc]]:
    """``jvm``, ``provider_workers`` (spark-state's state workers), ``pyspark_daemon`` and
    ``pyspark_workers`` (PySpark's Python workers: forks of the daemon, same command line)."""
    procs = list(procs)
    kinds: dict[str, list[Proc]] = {"jvm": [], "provider_workers": [], "pyspark_daemon": [], "pyspark_workers": []}
    daemons = {p.pid for p in procs if "pyspark.daemon" in p.cmdline
               and not any(q.pid == p.ppid and "pyspark.daemon" in q.cmdline for q in procs)}
    for p in procs:
        if "spark_state.provider.worker" in p.cmdline:
            kinds["provider_workers"].append(p)
        elif p.pid in daemons:
            kinds["pyspark_daemon"].append(p)
        elif "pyspark.daemon" in p.cmdline or "pyspark.worker" in p.cmdline:
            kinds["pyspark_workers"].append(p)
        elif p.cmdline.split(" ", 1)[0].endswith("java"):
            kinds["jvm"].append(p)
    return kinds


def process_summary(root: int) -> dict[str, dict]:
    """Per kind of process: count, total and largest RSS (MB), open file descriptors."""
    out = {}
    for kind, procs in classify(descendants(root)).items():
        out[kind] = {
            "count": len(procs),
            "rss_mb": round(sum(p.rss_kb for p in procs) / 1024, 1),
            "max_rss_mb": round(max((p.rss_kb for p in procs), default=0) / 1024, 1),
            "fds": sum(p.fds for p in procs),
            "pids": sorted(p.pid for p in procs),
        }
    me = _read_proc(os.getpid())
    out["driver_python"] = {"count": 1, "rss_mb": round(me.rss_kb / 1024, 1) if me else 0.0,
                            "max_rss_mb": round(me.rss_kb / 1024, 1) if me else 0.0,
                            "fds": me.fds if me else 0, "pids": [os.getpid()]}
    return out


def native_memory(pid: int) -> dict[str, float]:
    """The JVM's committed memory by Native Memory Tracking category (MB; ``jcmd VM.native_memory
    summary``), empty if the JVM does not track it (``-XX:NativeMemoryTracking=summary``)."""
    import re
    import subprocess

    try:
        out = subprocess.run(["jcmd", str(pid), "VM.native_memory", "summary"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for name, committed in re.findall(r"^-\s+(.+?) \(reserved=\d+KB, committed=(\d+)KB\)", out, re.M):
        found[name.strip()] = round(int(committed) / 1024, 1)
    return found

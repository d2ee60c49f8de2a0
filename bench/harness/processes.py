"""Memory and open files of a Spark application's processes, read from ``/proc`` (Linux only).

A local-mode application is a tree: the benchmark's Python process, the JVM it starts, and below
the JVM the Python workers -- spark-state's provider workers (``spark_state.provider.worker``)
and PySpark's daemon with its forked workers (``pyspark.daemon``, ``pyspark.worker``), which run
keyed functions. :func:`classify` sorts a tree into those kinds, so that every benchmark names
the same processes the same way.

RSS comes from ``VmRSS``; ``RssAnon`` is the part that is not pages of mapped files (a commit's
changes file, which the kernel drops when it needs the memory), so it is what a worker really
holds.
"""

from __future__ import annotations

import os
import threading
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Optional

#: The kinds :func:`classify` sorts an application's processes into.
KINDS = ("jvm", "provider_workers", "pyspark_daemon", "pyspark_workers")
#: Clock ticks a second: the unit of ``/proc/<pid>/stat``'s CPU times.
_TICKS = os.sysconf("SC_CLK_TCK")
#: The kinds that are Python workers of the JVM.
WORKER_KINDS = ("provider_workers", "pyspark_daemon", "pyspark_workers")


@dataclass
class Proc:
    pid: int
    ppid: int
    cmdline: str
    rss_kb: int
    fds: int
    rss_anon_kb: int = 0
    #: CPU time spent so far, user and system (``/proc/<pid>/stat``'s utime and stime), seconds
    cpu_s: float = 0.0


def read_proc(pid: int) -> Optional[Proc]:
    """One process's figures, or None if it is gone (or not ours to read)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        rss = anon = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # from the state on: ppid is [1], utime [11], stime [12]
    return Proc(pid, int(fields[1]), cmdline, rss, fds, anon, (int(fields[11]) + int(fields[12])) / _TICKS)


def descendants(root: int) -> list[Proc]:
    """Every live process below ``root``."""
    procs = [p for p in (read_proc(int(n)) for n in os.listdir("/proc") if n.isdigit()) if p is not None]
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
    kinds: dict[str, list[Proc]] = {kind: [] for kind in KINDS}
    daemons = {p.pid for p in procs if "pyspark.daemon" in p.cmdline
               and not any(q.pid == p.ppid and "pyspark.daemon" in q.cmdline for q in procs)}
    for p in procs:
        if "spark_state.provider.worker" in p.cmdline:
            kinds["provider_workers"].append(p)
        elif p.pid in daemons:
            kinds["pyspark_daemon"].append(p)
        elif "pyspark.daemon" in p.cmdline or "pyspark/daemon" in p.cmdline or "pyspark.worker" in p.cmdline:
            kinds["pyspark_workers"].append(p)
        elif p.cmdline.split(" ", 1)[0].endswith("java"):
            kinds["jvm"].append(p)
    return kinds


def cpu_seconds(root: int) -> dict[str, float]:
    """CPU time (user + system, seconds) spent so far by each kind of process below ``root`` (a
    worker that has ended no longer counts)."""
    return {kind: sum(p.cpu_s for p in procs) for kind, procs in classify(descendants(root)).items()}


def process_summary(root: int) -> dict[str, dict]:
    """Per kind of process below ``root``: count, total and largest RSS (MB), open file descriptors;
    and ``driver_python``, this process."""
    out = {}
    for kind, procs in classify(descendants(root)).items():
        out[kind] = {
            "count": len(procs),
            "rss_mb": round(sum(p.rss_kb for p in procs) / 1024, 1),
            "max_rss_mb": round(max((p.rss_kb for p in procs), default=0) / 1024, 1),
            "fds": sum(p.fds for p in procs),
            "pids": sorted(p.pid for p in procs),
        }
    me = read_proc(os.getpid())
    out["driver_python"] = {"count": 1, "rss_mb": round(me.rss_kb / 1024, 1) if me else 0.0,
                            "max_rss_mb": round(me.rss_kb / 1024, 1) if me else 0.0,
                            "fds": me.fds if me else 0, "pids": [os.getpid()]}
    return out


def watch_peak_rss(root: int, stop: threading.Event, peaks: dict, interval_s: float = 0.25) -> None:
    """Until ``stop``: the peak RSS (bytes) below ``root`` of the JVM (``jvm``), of one Python
    worker (``workers``: a provider worker, or PySpark's daemon or workers for keyed functions)
    and of one worker's anonymous RSS (``workers_anon``), sampled every ``interval_s``."""
    while not stop.is_set():
        kinds = classify(descendants(root))
        workers = [p for kind in WORKER_KINDS for p in kinds[kind]]
        for key, values in (("jvm", [p.rss_kb for p in kinds["jvm"]]), ("workers", [p.rss_kb for p in workers]),
                            ("workers_anon", [p.rss_anon_kb for p in workers])):
            if values:
                peaks[key] = max(peaks.get(key, 0), max(values) * 1024)
        stop.wait(interval_s)


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

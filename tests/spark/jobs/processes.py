"""The processes of this job's own Spark application, found by parentage (so that another Spark
application on the machine, such as the test session's, is never counted)."""

from __future__ import annotations

import os
import subprocess


def state_workers() -> list[int]:
    """pids of the spark-state Python workers descending from this process (driver JVM ->
    [executor JVMs ->] workers)."""
    return _descendants("spark_state.provider.worker")


def pyspark_workers() -> list[int]:
    """pids of PySpark's Python workers (and their daemon) descending from this process: where
    keyed functions run."""
    return _descendants("pyspark.daemon")


def _descendants(marker: str) -> list[int]:
    table = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    children: dict[int, list[tuple[int, str]]] = {}
    for line in table.splitlines():
        pid, ppid, args = line.strip().split(None, 2) + [""] * (3 - len(line.strip().split(None, 2)))
        children.setdefault(int(ppid), []).append((int(pid), args))
    found, stack = [], [os.getpid()]
    while stack:
        for pid, args in children.get(stack.pop(), []):
            stack.append(pid)
            if marker in args:
                found.append(pid)
    return sorted(found)


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def thread_nices(pid: int, prefix: str) -> list[int]:
    """The nice values of process ``pid``'s threads whose name starts with ``prefix``."""
    nices = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if not f.read().startswith(prefix):
                    continue
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                nices.append(int(f.read().rsplit(")", 1)[1].split()[16]))  # field 19: nice
        except OSError:  # the thread ended meanwhile
            continue
    return sorted(nices)

"""The processes of this job's own Spark application, found by parentage (so that another Spark
application on the machine, such as the test session's, is never counted)."""

from __future__ import annotations

import os
import subprocess


def state_workers() -> list[int]:
    """pids of the spark-state Python workers descending from this process (driver JVM ->
    [executor JVMs ->] workers)."""
    table = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    children: dict[int, list[tuple[int, str]]] = {}
    for line in table.splitlines():
        pid, ppid, args = line.strip().split(None, 2) + [""] * (3 - len(line.strip().split(None, 2)))
        children.setdefault(int(ppid), []).append((int(pid), args))
    found, stack = [], [os.getpid()]
    while stack:
        for pid, args in children.get(stack.pop(), []):
            stack.append(pid)
            if "spark_state.provider.worker" in args:
                found.append(pid)
    return sorted(found)


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

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

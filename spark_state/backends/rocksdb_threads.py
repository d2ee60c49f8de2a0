"""RocksDB's compaction threads at a low CPU priority (Linux), so they use the CPU tasks leave idle.

Why. A compaction rewrites every entry of the levels it merges: keys here start with their key
group and a hash, so each new L0 file overlaps the whole of L1 and a compaction rewrites the
store. Measured at 10M keys (``bench/scale_bench.py``, 4 partitions of 2.5M entries, ``local[2]``):
each partition's L0->L1 compaction took 1.8 s of a core, all four in the same batch (the stores
flush in step), while that batch's tasks needed both cores -- the batch took 1.5x the median.
Compaction has a lot of slack (L0 files arrive one per view refresh, snapshot or full
memtable, and RocksDB slows writes only at 20), so nothing is lost by running it when the tasks
leave a core idle.
RocksDB offers this as ``Env::LowerThreadPoolCPUPriority``, which rocksdict does not expose;
this module does the same from outside.

How. RocksDB's thread pools are process-wide (``Env::Default``) and created when a database
opens; RocksDB names their threads: ``rocksdb:low`` (compactions), ``rocksdb:bottom`` (bottommost
compactions, when configured) and ``rocksdb:high`` (flushes). The first two get the nice value
asked for (Linux: ``setpriority(PRIO_PROCESS, tid)`` sets one thread's). Flushes keep their
priority: a commit that exports a view or takes a snapshot waits for its flush. A thread whose
nice is already at least the one asked for is left alone, so calling again after every open is
cheap (one ``/proc`` read per thread) and never raises a priority; the setting is therefore
per process: the lowest priority any store asked for wins. Elsewhere than Linux: nothing.
"""

from __future__ import annotations

import logging
import os
import sys

_LOG = logging.getLogger(__name__)

#: Thread names (prefixes) of RocksDB's compaction pools.
COMPACTION_THREAD_PREFIXES = ("rocksdb:low", "rocksdb:bottom")
_TASKS = "/proc/self/task"


def compaction_threads() -> list[int]:
    """Linux thread ids of this process's RocksDB compaction threads ([] elsewhere)."""
    if not sys.platform.startswith("linux"):
        return []
    tids = []
    try:
        entries = os.listdir(_TASKS)
    except OSError:
        return []
    for entry in entries:
        try:
            with open(f"{_TASKS}/{entry}/comm") as f:
                name = f.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if name.startswith(COMPACTION_THREAD_PREFIXES):
            tids.append(int(entry))
    return tids


def lower_compaction_priority(nice: int) -> int:
    """Give this process's RocksDB compaction threads at least ``nice`` (0-19; 0 changes nothing).

    Returns how many threads were changed. Never fails a caller: a thread that ended, or a
    refusal by the system (a container without permission), is logged at debug level and skipped.
    """
    if nice <= 0:
        return 0
    changed = 0
    for tid in compaction_threads():
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                changed += 1
        except OSError as exc:
            _LOG.debug("could not lower the priority of RocksDB thread %d: %s", tid, exc)
    return changed

"""The executor's one state memory budget, and how it is split; sizes as Spark writes them.

The budget is ``spark.sql.streaming.stateStore.sparkState.memory.budget`` (a size, read from the
executor's Spark conf), by default :data:`DEFAULT_FRACTION` of the executor's memory
(``spark.executor.memory``; in local mode the driver's, ``spark.driver.memory``), at least
:data:`MIN_BUDGET`. It is split into :data:`PARTS` equal parts, named by what draws on them:

1. the JVM heap that the provider's epochs of pending writes and its read views' layers may hold,
   every store of the executor together (past it, pending writes spill to local disk);
2. the native block cache of the JVM's RocksDB handles (read views, spilled writes);
3. the provider's Python workers: each one's RocksDB (block cache, memtables charged to it) and
   pending writes, the part split evenly between the workers;
4. keyed functions (``keyed_process`` and friends): each Python process's stores, the part split
   between the executor's task slots.

A process's part (3 or 4) is divided by :func:`process_settings` into its RocksDB block cache
(:data:`CACHE_SHARE`, memtables charged to it up to :data:`WRITE_BUFFER_SHARE`) and the pending
writes of the store a task is writing (the rest, at least :data:`MIN_SPILL_THRESHOLD`), past which
they spill.

Why a quarter of the executor's memory: the rest of the heap is Spark's own (its unified memory,
60% of it by default, and user objects), and the three native parts live outside the heap, in
the memory Spark reserves beside it for such use (``spark.executor.memoryOverhead``: 10% of the
executor's memory, at least 384 MB); a quarter of a 1 GB executor gives 192 MB of native memory,
which fits there beside the JVM's own.

The JVM shim's ``MemoryBudget.scala`` holds the same rule for parts 1 to 3 (a unit test compares
the constants); this module is the Python side's, and computes part 4 on the driver.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

from .constants import CONF_PREFIX

#: The conf of the budget (a Spark conf: read when the executor starts).
BUDGET_CONF = CONF_PREFIX + "memory.budget"
#: The budget without :data:`BUDGET_CONF`: this share of the executor's memory.
DEFAULT_FRACTION = 0.25
#: The smallest default budget.
MIN_BUDGET = 64 << 20
#: Equal parts of the budget (see the module docstring).
PARTS = 4
#: Executor memory when no conf says (Spark's default).
DEFAULT_EXECUTOR_MEMORY = "1g"
#: Of a Python process's part: its RocksDB block cache (memtables included) ...
CACHE_SHARE = 0.5
#: ... of which memtables may take at most this share of the process's part ...
WRITE_BUFFER_SHARE = 0.25
#: ... and the rest for the pending writes of the store its task is writing.
PENDING_SHARE = 1 - CACHE_SHARE
#: Pending writes of a store spill past this when no budget applies (the engine API).
DEFAULT_SPILL_THRESHOLD = 64 << 20
#: The smallest spill threshold a process's part gives. Below it ordinary batches spill: on a 1 GB
#: executor with two slots a keyed function's part gives 16 MB, which 100k writes and reads of one
#: task pass (the overlay counts 120 bytes per dict entry beside its key and value), and writing
#: and reading back their runs cost a quarter of such a batch's time.
MIN_SPILL_THRESHOLD = 32 << 20
#: The engine options a process's part sets (names relative to the conf prefix).
SPILL_THRESHOLD_OPTION = "memory.spillThreshold"
BLOCK_CACHE_OPTION = "rocksdb.blockCacheSizeMB"
WRITE_BUFFER_OPTION = "rocksdb.writeBufferManagerMB"

_SIZE = re.compile(r"^(\d+)\s*([kmgtp]?b?)$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}


def parse_size(raw: str) -> int:
    """Bytes of a size as Spark's byte confs take it (``JavaUtils.byteStringAsBytes``): a number,
    optionally followed by b, k, kb, m, mb, g, gb, t, tb, p or pb (case-insensitive; no suffix:
    bytes), e.g. ``512m``, ``2g`` or ``1048576``; ValueError if it is not one."""
    match = _SIZE.match(str(raw).strip())
    if not match:
        raise ValueError(raw)
    unit = match.group(2).lower()
    return int(match.group(1)) * _UNITS[unit[:1] if unit not in ("", "b") else unit]


def budget_bytes(conf: Mapping[str, str]) -> int:
    """The budget a Spark conf gives an executor (see the module docstring); ValueError naming the
    conf for a bad size."""
    raw = conf.get(BUDGET_CONF)
    if raw is not None:
        try:
            value = parse_size(raw)
        except ValueError:
            value = -1
        if value < PARTS:
            raise ValueError(f"{BUDGET_CONF} must be a size such as 256m or 1g, got {raw!r}")
        return value
    return max(MIN_BUDGET, int(executor_memory(conf) * DEFAULT_FRACTION))


def executor_memory(conf: Mapping[str, str]) -> int:
    """The executor's heap as its conf says: the driver's in local mode (the executor is the driver)."""
    local = str(conf.get("spark.master", "")).startswith("local")
    key = "spark.driver.memory" if local else "spark.executor.memory"
    return parse_size(conf.get(key, DEFAULT_EXECUTOR_MEMORY))


def task_slots(conf: Mapping[str, str]) -> int:
    """Tasks one executor runs at once: ``spark.executor.cores``, or the cores of ``local[n]``."""
    master = str(conf.get("spark.master", ""))
    local = re.match(r"^local(?:\[(\d+|\*)(?:,\s*\d+)?\])?$", master)
    if local:
        n = local.group(1)
        if n is None:
            return 1
        if n == "*":
            import os

            return os.cpu_count() or 1
        return max(1, int(n))
    cluster = re.match(r"^local-cluster\[\d+,\s*(\d+),", master)
    if cluster:
        return max(1, int(cluster.group(1)))
    return max(1, int(conf.get("spark.executor.cores", "1")))


def function_process_share(conf: Mapping[str, str]) -> int:
    """Part 4 for one keyed function's Python process: the part split between the task slots."""
    return budget_bytes(conf) // PARTS // task_slots(conf)


@dataclass(frozen=True)
class ProcessSettings:
    """What a Python process's part of the budget becomes (:func:`process_settings`)."""

    block_cache_mb: int
    write_buffer_mb: int
    spill_threshold_bytes: int


def process_settings(share_bytes: int) -> ProcessSettings:
    """A process's part split into its RocksDB block cache, the memtables' share of it, and the
    pending writes of a store (see the module docstring)."""
    mb = 1 << 20
    cache = max(4, int(share_bytes * CACHE_SHARE) // mb)
    write_buffer = max(2, min(cache, int(share_bytes * WRITE_BUFFER_SHARE) // mb))
    return ProcessSettings(cache, write_buffer, max(MIN_SPILL_THRESHOLD, int(share_bytes * PENDING_SHARE)))


def with_process_defaults(options: Mapping[str, str], share_bytes: Optional[int]) -> dict[str, str]:
    """Engine ``options`` (relative names) with what a process's part of the budget sets where the
    user set nothing: the spill threshold, and the RocksDB cache and memtables together (one of
    them set by the user keeps both as the user and the engine's defaults say)."""
    out = dict(options)
    if share_bytes is None:
        return out
    settings = process_settings(share_bytes)
    out.setdefault(SPILL_THRESHOLD_OPTION, str(settings.spill_threshold_bytes))
    if BLOCK_CACHE_OPTION not in out and WRITE_BUFFER_OPTION not in out:
        out[BLOCK_CACHE_OPTION] = str(settings.block_cache_mb)
        out[WRITE_BUFFER_OPTION] = str(settings.write_buffer_mb)
    return out

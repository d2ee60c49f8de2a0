"""The executor's one state memory budget, and how it is split; sizes as Spark writes them.

The budget is ``spark.sql.streaming.stateStore.sparkState.memory.budget`` (a size, read from the
executor's Spark conf), by default :data:`DEFAULT_FRACTION` of the executor's memory
(:func:`executor_memory`), at least :data:`MIN_BUDGET`. It is split by weight, in twelfths
(:data:`TOTAL_WEIGHT`), into named parts (:data:`WEIGHTS`), by what draws on them:

- ``heapMaps`` (8/12): the ``hashmap`` backend's state in the executor JVM's heap, every store
  together (a store's ``heap.maxBytes`` overrides it for that store);
- ``heap`` (1/12): the JVM heap that the provider's epochs of pending writes and its read views'
  layers hold, every store of the executor together; one store's pending writes spill past the
  part split between the task slots (``memory.spillThreshold`` overrides it), one store's layers
  are refreshed past the part (``rocksdb.viewLayers.maxBytes`` overrides it), and an operations
  export in the driver sorts half of it at a time;
- ``jvmCache`` (1/12): the native block cache of the JVM's RocksDB handles (read views, spilled
  writes);
- ``workers`` (1/12): the provider's Python workers: each one's RocksDB (block cache, memtables
  charged to it) and pending writes, the part split evenly between the workers;
- ``functions`` (1/12): keyed functions (``keyed_process`` and friends): each Python process's
  stores, the part split between the executor's task slots.

A process's part (``workers`` or ``functions``) is divided by :func:`process_settings` into its
RocksDB block cache (:data:`CACHE_SHARE`, memtables charged to it up to :data:`WRITE_BUFFER_SHARE`)
and the pending writes of the store a task is writing (the rest, at least
:data:`MIN_SPILL_THRESHOLD`), past which they spill.

Why these weights: the parts besides the heap maps are a quarter of the executor's memory by
default. The rest of the heap is Spark's own (its unified memory, 60% of it by default, and user
objects), and the three native parts live outside the heap, in the memory Spark reserves beside it
for such use (``spark.executor.memoryOverhead``: 10% of the executor's memory, at least 384 MB); they
are 192 MB of a 1 GB executor, which fits there beside the JVM's own. The heap maps are half the
executor's memory: the ``hashmap`` backend keeps whole states in the heap, by design; an executor on
the ``rocksdb`` backend leaves that part unused.

The JVM shim's ``MemoryBudget.scala`` holds the same rule (a unit test compares the constants) and
is its owner on an executor: every part the JVM uses is asked of it, and ``TaskSlots.scala`` counts
the executor's task slots and publishes them with the budget to the executor's Python processes
(:func:`executor_figures`). This module computes the ``functions`` part in a keyed function's task
from those figures, and falls back to the same rule on the Spark conf where the JVM published
nothing.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional

from .constants import CONF_PREFIX

#: The conf of the budget (a Spark conf: read when the executor starts).
BUDGET_CONF = CONF_PREFIX + "memory.budget"
#: The budget without :data:`BUDGET_CONF`: this share of the executor's memory.
DEFAULT_FRACTION = 0.75
#: The smallest default budget: 16 MB for each twelfth.
MIN_BUDGET = 192 << 20
#: The parts of the budget and their weights, in twelfths (see the module docstring); the JVM's
#: ``MemoryBudget.<Name>Weight`` are the same.
WEIGHTS = {"heapMaps": 8, "heap": 1, "jvmCache": 1, "workers": 1, "functions": 1}
TOTAL_WEIGHT = sum(WEIGHTS.values())
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

#: The file the executor's JVM writes its task slots and budget to, in its first local directory
#: (``TaskSlots.scala``, ``FileName``).
EXECUTOR_FILE = "spark-state-executor.json"
#: The confs the fallback rule reads (a keyed function's definition carries them to its tasks).
RULE_CONFS = (BUDGET_CONF, "spark.master", "spark.driver.memory", "spark.executor.memory",
              "spark.executor.cores", "spark.task.cpus")

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
        if value < TOTAL_WEIGHT:
            raise ValueError(f"{BUDGET_CONF} must be a size such as 256m or 1g, got {raw!r}")
        return value
    return max(MIN_BUDGET, int(executor_memory(conf) * DEFAULT_FRACTION))


def executor_memory(conf: Mapping[str, str]) -> int:
    """The executor's heap as its conf says: in local mode (``local``, ``local[n]``) the executor is
    the driver, ``spark.driver.memory``; else ``spark.executor.memory``, which Spark also gives each
    executor of ``local-cluster[N,c,m]`` (its ``m`` is a worker's memory, which Spark checks the
    executor's fits in)."""
    master = str(conf.get("spark.master", ""))
    local = master == "local" or master.startswith("local[")
    key = "spark.driver.memory" if local else "spark.executor.memory"
    return parse_size(conf.get(key, DEFAULT_EXECUTOR_MEMORY))


def part_bytes(name: str, budget: int) -> int:
    """The part ``name`` (a key of :data:`WEIGHTS`) of ``budget`` bytes, as the JVM's
    ``MemoryBudget.part`` computes it."""
    return budget * WEIGHTS[name] // TOTAL_WEIGHT


def task_slots(conf: Mapping[str, str], processors: Optional[int] = None) -> int:
    """Tasks one executor runs at once, by the JVM's rule (``TaskSlots.scala``) as far as a conf
    shows it: ``spark.executor.cores``; else the cores of ``local[n]`` (``local``: 1, ``local[*]``:
    the processors); else of ``local-cluster[N,c,m]``; else ``processors`` (this machine's by
    default: on an executor, the cores a standalone executor takes); divided by ``spark.task.cpus``.
    The fallback of :func:`executor_task_slots` when the JVM has not published its count."""
    cpus = processors if processors is not None else (os.cpu_count() or 1)
    master = str(conf.get("spark.master", ""))
    if "spark.executor.cores" in conf:
        cores = int(conf["spark.executor.cores"])
    elif master == "local":
        cores = 1
    elif (local := re.match(r"^local\[(\d+|\*)(?:,\s*\d+)?\]$", master)) is not None:
        cores = cpus if local.group(1) == "*" else int(local.group(1))
    elif (cluster := re.match(r"^local-cluster\[\d+,\s*(\d+),", master)) is not None:
        cores = int(cluster.group(1))
    else:
        cores = cpus
    return max(1, cores // max(1, int(conf.get("spark.task.cpus", "1"))))


@dataclass(frozen=True)
class ExecutorFigures:
    """What the executor's JVM published for its Python processes (``TaskSlots.publish``)."""

    task_slots: int
    budget_bytes: int


def executor_figures() -> Optional[ExecutorFigures]:
    """The JVM's task slots and budget, in a process Spark started for a task (it names the
    executor's local directories in ``SPARK_LOCAL_DIRS``, and the JVM wrote :data:`EXECUTOR_FILE`
    in the first); None elsewhere (the driver, tests) or when the plugin did not write it."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS")
    if not dirs:
        return None
    path = os.path.join(dirs.split(",")[0], EXECUTOR_FILE)
    figures = _read_figures.get(path)
    if figures is None:
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
            figures = _read_figures[path] = ExecutorFigures(int(raw["taskSlots"]), int(raw["budgetBytes"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None  # not cached: a later task of a reused worker may find it
    return figures


#: The figures read, by file (the JVM writes them once per executor; a Python worker is reused).
_read_figures: dict[str, ExecutorFigures] = {}


def executor_task_slots(conf: Mapping[str, str]) -> int:
    """This executor's task slots: the JVM's count when it published one, else :func:`task_slots`."""
    figures = executor_figures()
    return figures.task_slots if figures is not None else task_slots(conf)


def function_process_share(conf: Mapping[str, str]) -> int:
    """One keyed function's Python process's share: the ``functions`` part split between the task
    slots, both as the executor's JVM published them, else as ``conf`` gives them."""
    figures = executor_figures()
    if figures is not None:
        return part_bytes("functions", figures.budget_bytes) // figures.task_slots
    return part_bytes("functions", budget_bytes(conf)) // task_slots(conf)


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


def budget_defaults(options: Mapping[str, str]) -> frozenset[str]:
    """The engine options (relative names) a process's part of the budget sets on ``options``:
    those the user left unset -- the spill threshold, and the RocksDB cache and memtables together
    (one of them set by the user keeps both as the user and the engine's defaults say)."""
    out = set()
    if SPILL_THRESHOLD_OPTION not in options:
        out.add(SPILL_THRESHOLD_OPTION)
    if BLOCK_CACHE_OPTION not in options and WRITE_BUFFER_OPTION not in options:
        out.update((BLOCK_CACHE_OPTION, WRITE_BUFFER_OPTION))
    return frozenset(out)


def setting_values(settings: ProcessSettings) -> dict[str, int]:
    """The engine options (relative names) of a process's part, by name."""
    return {SPILL_THRESHOLD_OPTION: settings.spill_threshold_bytes, BLOCK_CACHE_OPTION: settings.block_cache_mb,
            WRITE_BUFFER_OPTION: settings.write_buffer_mb}


def with_process_defaults(options: Mapping[str, str], share_bytes: Optional[int]) -> dict[str, str]:
    """Engine ``options`` (relative names) with what a process's part of the budget sets where the
    user set nothing (:func:`budget_defaults`)."""
    out = dict(options)
    if share_bytes is None:
        return out
    values = setting_values(process_settings(share_bytes))
    for name in budget_defaults(options):
        out[name] = str(values[name])
    return out


@dataclass(frozen=True)
class FunctionMemory:
    """A keyed function's part of the budget, resolved again in each task's process.

    The definition, on the driver, cannot count an executor's task slots (on standalone the conf
    does not say them): it carries the confs of the rule (:data:`RULE_CONFS`) and the engine options
    the budget set, and each task's process sets them from :func:`function_process_share`, which
    takes the executor JVM's count and budget when it published them.
    """

    conf: tuple[tuple[str, str], ...]
    #: the engine options (relative names) the budget sets (:func:`budget_defaults`)
    defaulted: frozenset[str]

    def values(self) -> dict[str, int]:
        """The defaulted options' values in this process."""
        values = setting_values(process_settings(function_process_share(dict(self.conf))))
        return {name: values[name] for name in self.defaulted}

"""Options of the Spark provider that are not engine options, in one place.

They are set like every spark-state option (``spark.sql.streaming.stateStore.sparkState.<key>``,
or ``spark_state.configure(builder, options={...})``) but are read by the JVM shim or by the
worker's fault injection, never by :class:`~spark_state.config.EngineConfig`:

``workersPerExecutor``
    Python workers per executor JVM (default: the executor's task slots, at most 4). Read by
    ``PythonWorker.scala`` when the executor starts its first worker.
``prestartWorkers``
    ``true`` (default) or ``false``: whether :data:`spark_state.spark.jvm.PLUGIN_CLASS` (the Spark plugin
    ``configure`` adds to ``spark.plugins``) starts the executor's Python workers when the executor
    starts, so the first batch does not wait for them. ``false``: they start at the first store load.
``heap.maxBytes``
    ``backend=hashmap``: the executor-wide budget of heap state (a size: ``512m``, ``2g``, or
    bytes); default the heap maps part of ``memory.budget`` (``MemoryBudget.heapMapsBytes`` in the
    shim: half the executor's memory). A store that would grow past it fails its task naming this
    conf (``MemoryBudget.HeapMaps``).
``rocksdb.viewLayers.maxEpochs`` / ``rocksdb.viewLayers.maxBytes``
    ``backend=rocksdb``: how many committed epochs (default 16), and how many bytes of them per
    store (default the heap part of ``memory.budget``, ``MemoryBudget.viewLayersPerStoreBytes``),
    the JVM layers over its exported RocksDB view before the next load asks the worker for a
    fresh export (``RocksViews`` in the shim).
``testing.crashOnCommit``
    Fault injection for tests, ``<version>:<marker dir>:once|always``: a worker exits abruptly
    while committing ``<version>``. Never set it in production.
``testing.expiredKeysBatchRows``
    Test hook: keys per record batch of the file of keys a commit's TTL expiry deleted, which
    also scales how many the JVM applies before it reloads the version instead
    (:mod:`spark_state.provider.views`). Never set it in production.
"""

from __future__ import annotations

import re
from typing import Mapping

from ..constants import CONF_PREFIX
from ..errors import ConfigError
from ..memory import parse_size
from ..options import parse_bool

WORKERS_PER_EXECUTOR = "workersPerExecutor"
PRESTART_WORKERS = "prestartWorkers"
CRASH_ON_COMMIT = "testing.crashOnCommit"
HEAP_MAX_BYTES = "heap.maxBytes"
VIEW_LAYER_EPOCHS = "rocksdb.viewLayers.maxEpochs"
VIEW_LAYER_BYTES = "rocksdb.viewLayers.maxBytes"
EXPIRED_BATCH_ROWS = "testing.expiredKeysBatchRows"
PROVIDER_ONLY = (WORKERS_PER_EXECUTOR, PRESTART_WORKERS, CRASH_ON_COMMIT, HEAP_MAX_BYTES, VIEW_LAYER_EPOCHS,
                 VIEW_LAYER_BYTES, EXPIRED_BATCH_ROWS)
#: Upper bound of workersPerExecutor: more workers than that only cost memory.
MAX_WORKERS_PER_EXECUTOR = 64

_CRASH_SPEC = re.compile(r"^\d+:.+:(once|always)$")


def split_provider_options(options: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(provider-only options, the rest)``."""
    mine = {k: str(v) for k, v in options.items() if k in PROVIDER_ONLY}
    rest = {k: str(v) for k, v in options.items() if k not in PROVIDER_ONLY}
    return mine, rest


def validate_provider_options(options: Mapping[str, str]) -> None:
    """Raise :class:`ConfigError` naming the conf for a value the shim or worker cannot use."""
    if WORKERS_PER_EXECUTOR in options:
        raw = str(options[WORKERS_PER_EXECUTOR]).strip()
        if not raw.isdigit() or not 1 <= int(raw) <= MAX_WORKERS_PER_EXECUTOR:
            raise ConfigError(
                f"option {CONF_PREFIX}{WORKERS_PER_EXECUTOR} must be a whole number of Python workers "
                f"per executor, 1 to {MAX_WORKERS_PER_EXECUTOR}, got {options[WORKERS_PER_EXECUTOR]!r}")
    if PRESTART_WORKERS in options and parse_bool(options[PRESTART_WORKERS]) is None:
        raise ConfigError(f"option {CONF_PREFIX}{PRESTART_WORKERS} must be true or false, "
                          f"got {options[PRESTART_WORKERS]!r}")
    for key in (HEAP_MAX_BYTES, VIEW_LAYER_BYTES):
        if key in options:
            try:
                ok = parse_size(options[key]) >= 1
            except ValueError:
                ok = False
            if not ok:
                raise ConfigError(f"option {CONF_PREFIX}{key} must be a size such as 512m, 2g or a number of "
                                  f"bytes, got {options[key]!r}")
    for key in (VIEW_LAYER_EPOCHS, EXPIRED_BATCH_ROWS):
        if key in options:
            raw = str(options[key]).strip()
            if not raw.isdigit() or int(raw) < 1:
                raise ConfigError(f"option {CONF_PREFIX}{key} must be a whole number of 1 or more, "
                                  f"got {options[key]!r}")
    if CRASH_ON_COMMIT in options and not _CRASH_SPEC.match(str(options[CRASH_ON_COMMIT]).strip()):
        raise ConfigError(
            f"option {CONF_PREFIX}{CRASH_ON_COMMIT} (testing only) must be <version>:<marker dir>:once|always, "
            f"got {options[CRASH_ON_COMMIT]!r}")

"""spark-state: Flink-grade state management for PySpark Structured Streaming.

The engine: :class:`VersionedStore` keeps one (operator, partition)'s state in a
``rocksdb`` or ``hashmap`` backend, commits epochs durably to checkpoint storage (local
directory, ``s3://``, ``hdfs://``) as changelogs plus incremental snapshots, and restores
any retained version from checkpoint storage alone.
"""

from __future__ import annotations

from .config import EngineConfig
from .errors import (
    CheckpointCorruptError,
    CheckpointFileMissingError,
    ConfigError,
    ConnectUnsupportedError,
    IncompatibleFormatError,
    LocalDiskError,
    SparkStateError,
    StorageError,
    StorageRetriesExhaustedError,
    StorageUnavailableError,
    StoreStateError,
    VersionNotFoundError,
)
from .engine.store import CommitMetrics, RestoreMetrics, VersionedStore
from .spark.session import configure, server_confs
from .version import __version__

__all__ = [
    "EngineConfig", "VersionedStore", "CommitMetrics", "RestoreMetrics",
    "SparkStateError", "ConfigError", "ConnectUnsupportedError", "VersionNotFoundError", "CheckpointCorruptError",
    "CheckpointFileMissingError", "IncompatibleFormatError", "StorageError",
    "StorageUnavailableError", "StorageRetriesExhaustedError", "LocalDiskError", "StoreStateError",
    "__version__", "configure", "server_confs",
    "keyed_process", "checkpointed_process", "KeyedProcessFunction", "CheckpointedFunction",
    "keyed_co_process", "keyed_broadcast_process", "KeyedCoProcessFunction", "KeyedBroadcastProcessFunction",
    "TimeDomain",
]

#: The Python-function API (``spark_state.process``) imports pyspark, so it loads on first use.
_PROCESS_EXPORTS = ("keyed_process", "checkpointed_process", "KeyedProcessFunction", "CheckpointedFunction",
                    "keyed_co_process", "keyed_broadcast_process", "KeyedCoProcessFunction",
                    "KeyedBroadcastProcessFunction", "TimeDomain")


def __getattr__(name: str):
    if name in _PROCESS_EXPORTS:
        from . import process

        return getattr(process, name)
    raise AttributeError(f"module 'spark_state' has no attribute {name!r}")

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
    "TimeDomain", "register_data_sources",
]

#: Names that import pyspark, so they load on first use: the Python-function API
#: (``spark_state.process``) and the data sources' registration, kept beside :func:`configure`.
_LAZY_EXPORTS = dict.fromkeys(
    ("keyed_process", "checkpointed_process", "KeyedProcessFunction", "CheckpointedFunction", "keyed_co_process",
     "keyed_broadcast_process", "KeyedCoProcessFunction", "KeyedBroadcastProcessFunction", "TimeDomain"),
    "process")
_LAZY_EXPORTS["register_data_sources"] = "state_data.datasource.register"


def __getattr__(name: str):
    module = _LAZY_EXPORTS.get(name)
    if module is not None:
        import importlib

        return getattr(importlib.import_module(f".{module}", __name__), name)
    raise AttributeError(f"module 'spark_state' has no attribute {name!r}")

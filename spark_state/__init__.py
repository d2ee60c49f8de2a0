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
    IncompatibleFormatError,
    SparkStateError,
    StorageError,
    StorageUnavailableError,
    StoreStateError,
    VersionNotFoundError,
)
from .session import configure
from .store import CommitMetrics, RestoreMetrics, VersionedStore

__version__ = "0.1.0"

__all__ = [
    "EngineConfig", "VersionedStore", "CommitMetrics", "RestoreMetrics",
    "SparkStateError", "ConfigError", "VersionNotFoundError", "CheckpointCorruptError",
    "CheckpointFileMissingError", "IncompatibleFormatError", "StorageError",
    "StorageUnavailableError", "StoreStateError", "__version__", "configure",
]

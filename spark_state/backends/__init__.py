"""State backends: ``rocksdb`` (default) and ``hashmap``, behind :class:`KVBackend`."""

from __future__ import annotations

from .. import constants as C
from ..config import EngineConfig
from ..errors import ConfigError
from .base import BackendFactory, Change, KVBackend, SnapshotFile
from .hashmap import HashMapBackend, HashMapBackendFactory
from .rocksdb import RocksDBBackend, RocksDBBackendFactory

__all__ = [
    "BackendFactory", "Change", "KVBackend", "SnapshotFile", "HashMapBackend",
    "HashMapBackendFactory", "RocksDBBackend", "RocksDBBackendFactory", "backend_factory",
]


def backend_factory(name: str, config: EngineConfig) -> BackendFactory:
    """The factory for backend ``name``, sized from ``config``."""
    if name == C.BACKEND_ROCKSDB:
        return RocksDBBackendFactory(config.block_cache_mb, config.write_buffer_mb, config.rocksdb_wal,
                                     compaction_nice=config.compaction_nice)
    if name == C.BACKEND_HASHMAP:
        return HashMapBackendFactory()
    raise ConfigError(f"unknown state backend {name!r}; choose one of {', '.join(C.BACKENDS)}")

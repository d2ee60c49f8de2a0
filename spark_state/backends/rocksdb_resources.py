"""Process-wide RocksDB memory: one block cache and one write-buffer manager for every
RocksDB store of the process.

Without this, memory multiplies by the number of stores (one per operator partition):
the failure Spark users report as SPARK-39781 / SPARK-43311 and Quix as #1137. Memtables
are charged to the block cache, so ``block_cache_mb`` bounds both.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Optional

import rocksdict

_LOG = logging.getLogger(__name__)
_MB = 1024 * 1024


@dataclass
class SharedRocksDBResources:
    """The cache and write-buffer manager every RocksDB store in this process uses."""

    block_cache: rocksdict.Cache
    write_buffer_manager: rocksdict.WriteBufferManager
    block_cache_mb: int
    write_buffer_mb: int

    def usage_bytes(self) -> int:
        """Bytes currently held in the shared block cache (memtables included)."""
        return int(self.block_cache.get_usage())


_lock = threading.Lock()
_shared: Optional[SharedRocksDBResources] = None


def shared_resources(block_cache_mb: int, write_buffer_mb: int) -> SharedRocksDBResources:
    """The process-wide resources, created on first use.

    A later call with other sizes resizes the shared objects (the newest configuration
    wins) rather than creating a second budget, and logs that it did.
    """
    global _shared
    with _lock:
        if _shared is None:
            cache = rocksdict.Cache(block_cache_mb * _MB)
            wbm = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
                write_buffer_mb * _MB, False, cache
            )
            _shared = SharedRocksDBResources(cache, wbm, block_cache_mb, write_buffer_mb)
        elif (_shared.block_cache_mb, _shared.write_buffer_mb) != (block_cache_mb, write_buffer_mb):
            _LOG.info(
                "resizing the shared RocksDB memory from cache=%d MB, write buffers=%d MB "
                "to cache=%d MB, write buffers=%d MB",
                _shared.block_cache_mb, _shared.write_buffer_mb, block_cache_mb, write_buffer_mb,
            )
            _shared.block_cache.set_capacity(block_cache_mb * _MB)
            _shared.write_buffer_manager.set_buffer_size(write_buffer_mb * _MB)
            _shared.block_cache_mb = block_cache_mb
            _shared.write_buffer_mb = write_buffer_mb
        return _shared

"""Process-wide RocksDB memory: one block cache and one write-buffer manager for every
RocksDB store of the process.

Without this, memory multiplies by the number of stores (one per operator partition):
the failure Spark users report as SPARK-39781 / SPARK-43311 and Quix as #1137. Memtables
are charged to the block cache, so ``block_cache_mb`` bounds both. Past ``write_buffer_mb`` the
write-buffer manager flushes the memtables of the database being written; it does not stall
writes until the memory is back under it: with several databases in a process, one that is not
being written (a store between batches) keeps its memtable, and a stall waiting for it to shrink
never ends (seen: a keyed task's restore hung so). Each database's memtables are bounded instead
(:func:`memtable_bytes`), so a commit of millions of keys cannot pile memtables up beyond
``write_buffer_mb`` while they wait for their flush.
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


def memtable_bytes(write_buffer_mb: int) -> int:
    """One memtable of one database: half the process's memtable budget (a database has at most
    two, the active one and one being flushed), at least 1 MB."""
    return max(_MB, write_buffer_mb * _MB // 2)


def current_resources() -> Optional[SharedRocksDBResources]:
    """The process-wide resources, if a RocksDB store of this process created them."""
    return _shared


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
                write_buffer_mb * _MB, False, cache  # no stall: see the module docstring
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

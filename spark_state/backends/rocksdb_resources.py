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

It also owns the one table policy of every RocksDB database spark-state opens, in Python (the
stores' backends, the engine's spill runs) and in the JVM (``RocksResources.scala``, the same
settings; a unit test compares them): :func:`table_options`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Optional

import rocksdict

_LOG = logging.getLogger(__name__)
_MB = 1024 * 1024

#: Bloom filter bits per key (about 1% false positives): reads of absent keys, frequent for
#: deduplication, new aggregation keys and spilled epochs, skip the data blocks.
BLOOM_BITS_PER_KEY = 10
#: The block cache's share kept for index and filter blocks (charged with high priority): RocksDB's
#: default for the caches its C API creates, which rocksdict's ``Cache`` takes (it has no setter);
#: the JVM passes the same to its ``LRUCache``, whose Java default is none.
HIGH_PRIORITY_POOL_RATIO = 0.5
#: Block-based table format of the SST files written: every supported Spark line's RocksDB reads it
#: (the JVM opens exported views with Spark's own rocksdbjni, and Spark 3.5's, 8.3, reads formats up
#: to 5, while RocksDB writes 6 by default since 9.0).
TABLE_FORMAT_VERSION = 5


def table_options(cache: rocksdict.Cache) -> rocksdict.BlockBasedOptions:
    """The one table policy: data blocks, and index and filter blocks too, read through ``cache``,
    so that the memory budget bounds them (as Spark's bounded-memory RocksDB mode does).

    Why each setting:

    * index and filter blocks in the cache with high priority (a pool of
      :data:`HIGH_PRIORITY_POOL_RATIO`), L0's pinned there: outside the cache they cost 1.25 to 2
      bytes per key of native memory that grows with the state and no budget counts;
    * partitioned filters and a two-level index, whose top level is pinned: a file's filter is cut
      into blocks of about 4 KB, so a lookup brings one small partition into the cache, not the
      file's whole filter. Whole filter blocks of a few megabytes in a cache smaller than the
      filters evicted each other on every read (measured: 1M reads over a 10M-key read view took
      100 s instead of 10; a spilled first batch of 10M keys 300 s instead of 100);
    * :data:`BLOOM_BITS_PER_KEY` full-key bloom filters, :data:`TABLE_FORMAT_VERSION`.
    """
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    table.set_cache_index_and_filter_blocks(True)  # with high priority: RocksDB's default
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    table.set_partition_filters(True)
    table.set_index_type(rocksdict.BlockBasedIndexType.two_level_index_search())
    table.set_pin_top_level_index_and_filter(True)
    table.set_format_version(TABLE_FORMAT_VERSION)
    return table


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

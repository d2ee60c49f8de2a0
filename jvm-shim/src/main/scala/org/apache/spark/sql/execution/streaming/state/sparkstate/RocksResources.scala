package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.rocksdb.{BlockBasedTableConfig, BloomFilter, InfoLogLevel, LRUCache, Logger, Options, RocksDB, Slice}

/**
 * What every RocksDB handle of this JVM shares: the native library, one block cache sized by the
 * executor's memory budget ([[MemoryBudget.jvmNativeShare]]; read views and spill runs both draw on
 * it, so their memory does not grow with the number of stores), a logger that writes no LOG file,
 * and the bound that ends every scan before the engine's system keyspace.
 */
private[sparkstate] object RocksResources {
  RocksDB.loadLibrary()

  /** One block cache for every RocksDB handle of this JVM. */
  lazy val blockCache: LRUCache = new LRUCache(MemoryBudget.jvmNativeShare)

  /** First key of the system keyspace; shared by every iterator's read options, never closed. */
  lazy val systemKeyspaceStart: Slice = new Slice(Array(0xff.toByte))

  // Logger(Options): the constructor every line's RocksDB JNI has (8.3 for Spark 3.5 lacks Logger(InfoLogLevel)).
  lazy val silentLogger: Logger = new Logger(new Options().setInfoLogLevel(InfoLogLevel.ERROR_LEVEL)) {
    override protected def log(level: InfoLogLevel, message: String): Unit = ()
  }

  /**
   * Block-based tables whose data blocks are read through [[blockCache]], with bloom filters. Index
   * and filter blocks are held by each open file, not charged to the cache: in a cache smaller than
   * the filters (about 1.25 bytes per key), whole filter blocks of a few megabytes were evicted by
   * data blocks and read again for every lookup. Measured (`bench/large_state_bench.py`): a batch of
   * 1M reads over a 10M-key read view took 100 s instead of 10; a `dropDuplicates` batch of 30M new
   * keys, whose every read asks the spill runs, ran for minutes instead of one.
   */
  def tableConfig: BlockBasedTableConfig = new BlockBasedTableConfig()
    .setBlockCache(blockCache)
    .setFilterPolicy(new BloomFilter(10, false))
    .setCacheIndexAndFilterBlocks(false)

  /** Bytes the shared block cache holds now. */
  def cacheUsage: Long = blockCache.getUsage
}

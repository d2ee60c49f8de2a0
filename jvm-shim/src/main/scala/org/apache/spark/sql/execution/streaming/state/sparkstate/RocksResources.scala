package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.rocksdb.{BlockBasedTableConfig, BloomFilter, InfoLogLevel, LRUCache, Logger, Options, RocksDB, Slice}

/**
 * What every RocksDB handle of this JVM shares: the native library, one block cache sized by the
 * executor's memory budget ([[MemoryBudget.jvmNativeShare]]; read views and spill runs both draw on
 * it, index and filter blocks included, so their memory does not grow with the number of stores or
 * the size of the data), a logger that writes no LOG file, and the bound that ends every scan
 * before the engine's system keyspace.
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
   * Block-based tables read through [[blockCache]] with bloom filters. Index and filter blocks are
   * charged to the cache too: held per open file instead, they grow with the data (a filter costs
   * about 1.25 bytes per key: 37 MB for a state of 30M keys).
   */
  def tableConfig(): BlockBasedTableConfig = new BlockBasedTableConfig()
    .setBlockCache(blockCache)
    .setFilterPolicy(new BloomFilter(10, false))
    .setCacheIndexAndFilterBlocks(true)
    .setPinL0FilterAndIndexBlocksInCache(true)

  /** Bytes the shared block cache holds now. */
  def cacheUsage: Long = blockCache.getUsage
}

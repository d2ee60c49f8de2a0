package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.rocksdb.{BlockBasedTableConfig, BloomFilter, IndexType, InfoLogLevel, LRUCache, Logger, Options, RocksDB, Slice}

/**
 * What every RocksDB handle of this JVM shares: the native library, one block cache sized by the
 * executor's memory budget ([[MemoryBudget.jvmCacheBytes]]; read views and spill runs both draw on
 * it, with their index and filter blocks, so their memory does not grow with the number of stores
 * or keys), the table policy, a logger that writes no LOG file, and the bound that ends every scan
 * before the engine's system keyspace.
 */
private[sparkstate] object RocksResources {
  RocksDB.loadLibrary()

  /** Bloom filter bits per key (`spark_state.backends.rocksdb_resources.BLOOM_BITS_PER_KEY`). */
  val BloomBitsPerKey = 10
  /** The cache's share for index and filter blocks (`HIGH_PRIORITY_POOL_RATIO`: RocksDB's native default, not Java's). */
  val HighPriorityPoolRatio = 0.5
  /** Table format (`TABLE_FORMAT_VERSION`): the newest Spark 3.5's RocksDB (8.3) reads. */
  val TableFormatVersion = 5

  /** One block cache for every RocksDB handle of this JVM. */
  lazy val blockCache: LRUCache = new LRUCache(MemoryBudget.jvmCacheBytes, -1, false, HighPriorityPoolRatio)

  /** First key of the system keyspace; shared by every iterator's read options, never closed. */
  lazy val systemKeyspaceStart: Slice = new Slice(Array(0xff.toByte))

  // Logger(Options): the constructor every line's RocksDB JNI has (8.3 for Spark 3.5 lacks Logger(InfoLogLevel)).
  lazy val silentLogger: Logger = new Logger(new Options().setInfoLogLevel(InfoLogLevel.ERROR_LEVEL)) {
    override protected def log(level: InfoLogLevel, message: String): Unit = ()
  }

  /**
   * The one table policy of spark-state's RocksDB databases, the same as the Python side's
   * (`spark_state.backends.rocksdb_resources.table_options`, which gives each setting's reason; a
   * unit test compares them): data, index and filter blocks read through [[blockCache]], so that
   * the budget bounds them; index and filter blocks with high priority, L0's pinned; partitioned
   * filters and a two-level index whose top level is pinned, so that a lookup brings a 4 KB
   * partition of a filter into the cache rather than a whole filter block of megabytes (whole
   * filter blocks in a cache smaller than the filters evicted each other on every read).
   */
  def tableConfig: BlockBasedTableConfig = new BlockBasedTableConfig()
    .setBlockCache(blockCache)
    .setFilterPolicy(new BloomFilter(BloomBitsPerKey, false))
    .setCacheIndexAndFilterBlocks(true)
    .setCacheIndexAndFilterBlocksWithHighPriority(true)
    .setPinL0FilterAndIndexBlocksInCache(true)
    .setPartitionFilters(true)
    .setIndexType(IndexType.kTwoLevelIndexSearch)
    .setPinTopLevelIndexAndFilter(true)
    .setFormatVersion(TableFormatVersion)

  /** Bytes the shared block cache holds now. */
  def cacheUsage: Long = blockCache.getUsage
}

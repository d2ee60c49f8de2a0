package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.rocksdb.{BlockBasedTableConfig, BloomFilter, InfoLogLevel, Logger, LRUCache, Options, ReadOptions, RocksDB, RocksIterator, Slice}

/**
 * The JVM's read view of one committed version of a store: a RocksDB checkpoint the Python worker
 * exported (hard-linked immutable SST files, no write-ahead log), opened read-only. Reads are local
 * JNI calls (~2 us), never cross-process, and the view cannot change under its readers.
 *
 * Not a RocksDB *secondary* tailing the worker's live database: after the primary flushes, a
 * secondary keeps the memtable it replayed from the old log, which shadows the newer values in the
 * flushed SST -- stale reads (see spark_state/provider/service.py).
 *
 * All table files are opened at open time (max_open_files = -1), so the worker may delete the
 * view's directory once a newer view exists: open handles keep the files readable. Closing is
 * deferred while stores use the view, because closing a RocksDB under a reader crashes the JVM.
 */
private[sparkstate] final class ReadView(val path: String) {
  import ReadView._

  private val options = new Options()
    .setMaxOpenFiles(-1)
    .setTableFormatConfig(tableConfig)
    .setLogger(silentLogger) // no LOG file inside the exported directory
  private val db: RocksDB = RocksDB.openReadOnly(options, path)
  private var users = 0
  private var closeRequested = false
  private var closed = false

  def get(key: Array[Byte]): Array[Byte] = db.get(key)

  /**
   * An iterator over the data keys: RocksDB itself stops it before the engine's system keyspace
   * (keys from 0xFF on: the TTL expiry index and format markers), so those never reach an operator
   * or the state reader, at no per-entry cost.
   */
  def newIterator(): RocksIterator =
    db.newIterator(new ReadOptions().setFillCache(false).setIterateUpperBound(systemKeyspaceStart))

  def acquire(): Unit = synchronized {
    if (closed) throw new SparkStateException(s"spark-state: the read view $path is closed")
    users += 1
  }

  def release(): Unit = synchronized {
    users -= 1
    if (users == 0 && closeRequested) doClose()
  }

  def close(): Unit = synchronized {
    closeRequested = true
    if (users == 0) doClose()
  }

  private def doClose(): Unit = if (!closed) {
    closed = true
    db.close()
    options.close()
  }
}

private[sparkstate] object ReadView {
  RocksDB.loadLibrary()

  /** One block cache for every view of this JVM, so memory does not grow with partitions. */
  private lazy val sharedCache = new LRUCache(64L * 1024 * 1024)

  /** First key of the system keyspace; shared by every iterator's read options, never closed. */
  private lazy val systemKeyspaceStart = new Slice(Array(0xff.toByte))

  private lazy val silentLogger: Logger = new Logger(InfoLogLevel.ERROR_LEVEL) {
    override protected def log(level: InfoLogLevel, message: String): Unit = ()
  }

  private def tableConfig: BlockBasedTableConfig = new BlockBasedTableConfig()
    .setBlockCache(sharedCache)
    .setFilterPolicy(new BloomFilter(10, false))
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.File

import org.rocksdb.{BlockBasedTableConfig, BloomFilter, LRUCache, Options, ReadOptions, RocksDB, RocksIterator}

/**
 * A read-only view of a store's RocksDB, opened as a RocksDB *secondary* of the primary the Python
 * worker writes. Reads are local JNI calls (~2 us), never cross-process. `catchUp()` makes newly
 * committed writes visible: RocksDB replays the primary's MANIFEST and write-ahead log.
 *
 * Closing is deferred while handles are out (a zombie task attempt may still read when maintenance
 * closes the provider), because closing a RocksDB under a reader crashes the JVM.
 */
private[sparkstate] final class SecondaryDb(val primaryPath: String, secondaryDir: File) {
  import SecondaryDb._

  secondaryDir.mkdirs()
  private val options = new Options()
    .setMaxOpenFiles(-1) // required by secondaries
    .setTableFormatConfig(tableConfig)
  private val db: RocksDB = RocksDB.openAsSecondary(options, primaryPath, secondaryDir.getAbsolutePath)
  private var users = 0
  private var closeRequested = false
  private var closed = false

  def catchUp(): Unit = db.tryCatchUpWithPrimary()

  def get(key: Array[Byte]): Array[Byte] = db.get(key)

  def newIterator(): RocksIterator = {
    val ro = new ReadOptions().setFillCache(false)
    db.newIterator(ro)
  }

  def acquire(): Unit = synchronized {
    if (closed) throw new SparkStateException(s"spark-state: the local view of $primaryPath is closed")
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

private[sparkstate] object SecondaryDb {
  RocksDB.loadLibrary()

  /** One block cache for every secondary of this JVM, so memory does not grow with partitions. */
  private lazy val sharedCache = new LRUCache(64L * 1024 * 1024)

  private def tableConfig: BlockBasedTableConfig = new BlockBasedTableConfig()
    .setBlockCache(sharedCache)
    .setFilterPolicy(new BloomFilter(10, false))
}

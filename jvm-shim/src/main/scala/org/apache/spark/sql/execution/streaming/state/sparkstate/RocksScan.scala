package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.{Arrays => JArrays}

import org.rocksdb.{ReadOptions, RocksDB}

/** A [[ViewScan]] over a RocksDB iterator: the read views' and the spill runs' ordered scans. */
private[sparkstate] object RocksScan {

  /**
   * Entries of `db` with `from <= key < until` (null: unbounded), ascending, read with `readOptions`
   * (which the scan owns: closing the scan closes them and the iterator). Keys and values are
   * copies, so they stay valid after `next()`.
   */
  def apply(db: RocksDB, readOptions: ReadOptions, from: Array[Byte], until: Array[Byte]): ViewScan = {
    val it = db.newIterator(readOptions)
    if (from == null) it.seekToFirst() else it.seek(from)
    new ViewScan {
      private var open = true
      private var k: Array[Byte] = _
      private var v: Array[Byte] = _
      load()
      private def load(): Unit = {
        if (open && it.isValid) {
          k = it.key()
          if (until != null && JArrays.compareUnsigned(k, until) >= 0) close() else v = it.value()
        } else close()
      }
      def valid: Boolean = open
      def key: Array[Byte] = k
      def value: Array[Byte] = v
      def next(): Unit = if (open) {
        it.next()
        load()
      }
      def close(): Unit = if (open) {
        open = false
        k = null
        v = null
        it.close()
        readOptions.close()
      }
    }
  }
}

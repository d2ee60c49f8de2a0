package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._

/**
 * One task's store on Spark 3.5 (see [[StoreCore]]): no column families, scans are plain iterators
 * (operators never close them: a scan closes itself when exhausted, and the store closes what is
 * left at its commit or abort).
 */
private[sparkstate] final class SparkStateStore(parts: StoreParts) extends StoreCore(parts) with StateStore {

  override def get(key: UnsafeRow): UnsafeRow = readRow(key)

  override def iterator(): Iterator[UnsafeRowPair] = scanAll()

  override def prefixScan(prefixKey: UnsafeRow): Iterator[UnsafeRowPair] = scanPrefix(prefixKey)

  override def put(key: UnsafeRow, value: UnsafeRow): Unit = writeRow(key, value)

  override def remove(key: UnsafeRow): Unit = deleteRow(key)
}

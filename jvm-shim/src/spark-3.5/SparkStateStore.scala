package org.apache.spark.sql.execution.streaming.state.sparkstate

import com.fasterxml.jackson.databind.JsonNode

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._

/**
 * One task's store on Spark 3.5 (see [[StoreCore]]): no column families, scans are plain iterators
 * (operators never close them: a scan closes itself when exhausted, and the store closes what is
 * left at its commit or abort).
 */
private[sparkstate] final class SparkStateStore(
    provider: ProviderCore,
    version: Long,
    db: StateView,
    codec: KeyCodec,
    valueFields: Int,
    loadReply: JsonNode,
    loadMs: Long,
    ttl: TtlView)
  extends StoreCore(provider, version, db, codec, valueFields, loadReply, loadMs, ttl) with StateStore {

  override def get(key: UnsafeRow): UnsafeRow = readRow(key)

  override def iterator(): Iterator[UnsafeRowPair] = scanAll()

  override def prefixScan(prefixKey: UnsafeRow): Iterator[UnsafeRowPair] = scanPrefix(prefixKey)

  override def put(key: UnsafeRow, value: UnsafeRow): Unit = writeRow(key, value)

  override def remove(key: UnsafeRow): Unit = deleteRow(key)
}

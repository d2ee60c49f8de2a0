package org.apache.spark.sql.execution.streaming.state.sparkstate

import com.fasterxml.jackson.databind.JsonNode

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

/** One task's store on Spark 4.2 and 4.3 (see [[Spark4Store]]): `release` and `multiGet` have default bodies there. */
private[sparkstate] final class SparkStateStore(
    provider: ProviderCore,
    version: Long,
    db: StateView,
    codec: KeyCodec,
    valueFields: Int,
    loadReply: JsonNode,
    loadMs: Long,
    ttl: TtlView) extends Spark4Store(provider, version, db, codec, valueFields, loadReply, loadMs, ttl) {

  override def release(): Unit = releaseStore()

  /** Point reads of several keys, in order (Spark's own default refuses; each is one `get`). */
  override def multiGet(keys: Array[UnsafeRow], colFamilyName: String): Iterator[UnsafeRow] = {
    checkFamily(colFamilyName)
    keys.iterator.map(readRow)
  }
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import com.fasterxml.jackson.databind.JsonNode

/** One task's store on Spark 4.0 (see [[Spark4Store]]). */
private[sparkstate] final class SparkStateStore(
    provider: ProviderCore,
    version: Long,
    db: StateView,
    codec: KeyCodec,
    valueFields: Int,
    loadReply: JsonNode,
    loadMs: Long,
    ttl: TtlView) extends Spark4Store(provider, version, db, codec, valueFields, loadReply, loadMs, ttl)

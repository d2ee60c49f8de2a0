package org.apache.spark.sql.execution.streaming.state.sparkstate

import com.fasterxml.jackson.databind.JsonNode

/**
 * How one task reads a loaded version with respect to TTL, from the `ttl` object of the worker's
 * load reply (policy lives in Python: `spark_state/provider/ttl_policy.py`).
 *
 * Stored values of a stamped version are `[last_access_ms int64 big-endian][UnsafeRow bytes]`
 * (`spark_state/ttl/codec.py`); reads strip the stamp without copying (the row points past it).
 * An entry is expired iff `expiration(stamp) <= nowMs` (Flink's rule, overflow-safe). `nowMs` is
 * taken once per batch, when the version is loaded, so visibility is stable within a micro-batch,
 * and the commit removes expired rows with the same time.
 *
 * @param stamped        values of the loaded version carry the 8-byte stamp
 * @param enabled        TTL applies to this store (false: stamps, if any, are only stripped)
 * @param returnExpired  ReturnExpiredIfNotCleanedUp (else NeverReturnExpired: expired = absent)
 * @param refreshOnRead  OnReadAndWrite: a point read of a live key refreshes its stamp
 */
private[sparkstate] final case class TtlView(
    stamped: Boolean,
    enabled: Boolean,
    ttlMs: Long,
    nowMs: Long,
    returnExpired: Boolean,
    refreshOnRead: Boolean) {

  /** Bytes in front of the UnsafeRow in a stored value. */
  val valueOffset: Int = if (stamped) TtlView.StampBytes else 0

  /** Expired entries exist and must be hidden from reads and scans. */
  val hidesExpired: Boolean = stamped && enabled && !returnExpired

  /** Point reads of live keys are recorded as touches. */
  val touches: Boolean = stamped && enabled && refreshOnRead

  def expired(stamp: Long): Boolean = {
    val expiration = if (stamp > 0) stamp + math.min(Long.MaxValue - stamp, ttlMs) else stamp + ttlMs
    expiration <= nowMs
  }

  /** Whether the stored value `v` of a stamped version is expired. */
  def expiredValue(v: Array[Byte]): Boolean = enabled && expired(TtlView.stampOf(v))
}

private[sparkstate] object TtlView {
  val StampBytes = 8
  val Off: TtlView = TtlView(stamped = false, enabled = false, 0L, -1L, returnExpired = false, refreshOnRead = false)

  def stampOf(v: Array[Byte]): Long = {
    var s = 0L
    var i = 0
    while (i < StampBytes) {
      s = (s << 8) | (v(i) & 0xffL)
      i += 1
    }
    s
  }

  def fromReply(reply: JsonNode): TtlView = {
    val ttl = reply.get("ttl")
    if (ttl == null || ttl.isNull) Off
    else TtlView(
      stamped = ttl.path("stamped").asBoolean(false),
      enabled = ttl.path("enabled").asBoolean(false),
      ttlMs = ttl.path("ttlMs").asLong(0L),
      nowMs = ttl.path("nowMs").asLong(-1L),
      returnExpired = ttl.path("returnExpired").asBoolean(false),
      refreshOnRead = ttl.path("refreshOnRead").asBoolean(false))
  }
}

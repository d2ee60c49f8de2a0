package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.File

import scala.collection.mutable.ArrayBuffer

import com.fasterxml.jackson.databind.JsonNode

/**
 * The data-keyspace changes one commit made in the worker's store, rebuilt in the JVM from the
 * epoch's [[ChangeBuffer]] and the `view` object of the worker's commit reply
 * (`spark_state/provider/protocol.py`), so that the JVM's views equal what the worker committed:
 *
 *  - `"apply": "buffer"`: the buffer's writes as they are (no TTL: values are stored bare);
 *  - `"apply": "stamped"`: puts and OnReadAndWrite touches are stored as `[stampMs int64 BE][row]`,
 *    and the keys in `expiredPath` (an Arrow file, column `key`) were deleted by TTL expiry;
 *  - `"apply": "reload"`: the JVM cannot rebuild the change (TTL turned on or off rewrote every row; the
 *    commit lost to an earlier attempt whose content differs), or should not: TTL expired more keys than
 *    the worker sends (`spark_state/provider/views.py`, `EXPIRED_BATCHES_APPLIED` record batches, 65,536
 *    keys by default; a full-snapshot cleanup can expire millions). Views forget, the next load exports.
 *
 * Why a bound and a reload rather than applying a large expiry batch by batch: the applied delta stays
 * in the heap whole either way -- as a [[Layer]] until the next refresh (`rocksdb`), or as the undo that
 * readers of the previous version consult ([[HeapViews]], `hashmap`) -- so only not applying it bounds
 * the heap. The reload costs one export at the next load: a RocksDB checkpoint (`rocksdb`), or the state
 * shipped again (`hashmap`, streamed into the new map a record batch at a time), of the order of the
 * expiry pass the worker just made. So [[readKeys]] reads at most that bound of keys.
 *
 * Keys are sorted (unsigned bytes, RocksDB's order) and distinct; deletes carry [[ChangeBuffer.Tombstone]].
 * `hashes(i)` is `HashBytesMap.hash(keys(i))`: the buffer computed it once per key, and the heap map's
 * commit probes with it instead of hashing every key again. The arrays of the buffer's [[SortedWrites]]
 * are shared, not copied (never modified; the buffer drops them at its next write or clear). `dataBytes`
 * estimates the heap held by the key and value arrays: the buffer's own running count when the
 * delta is its writes as they are (no array is read again to size it), else summed here.
 */
private[sparkstate] final class CommitDelta(
    val keys: Array[Array[Byte]], val hashes: Array[Int], val values: Array[Array[Byte]], val dataBytes: Long) {
  def size: Int = keys.length
}

private[sparkstate] object CommitDelta {
  /**
   * The delta of a commit, or None when the views must reload: `"apply": "reload"` or no `view` at all,
   * or an epoch that spilled to local disk (rebuilding it would hold the whole epoch in the heap).
   */
  def fromCommit(buffer: ChangeBuffer, reply: JsonNode): Option[CommitDelta] = {
    val view = reply.get("view")
    val mode = if (view == null || buffer.spilled) "reload" else Json.text(view, "apply")
    mode match {
      case "buffer" => Some(build(buffer, stampMs = -1L, expired = Array.empty))
      case "stamped" =>
        val path = Json.text(view, "expiredPath")
        val expired = if (path.isEmpty) Array.empty[Array[Byte]] else readKeys(new File(path))
        Some(build(buffer, Json.long(view, "stampMs"), expired))
      case _ => None
    }
  }

  private def build(buffer: ChangeBuffer, stampMs: Long, expired: Array[Array[Byte]]): CommitDelta = {
    val stamped = stampMs >= 0
    // Touches and expiries never share a key with the writes (the worker rewrites touched keys, and a
    // key written this epoch is not expired): merge two disjoint sorted runs.
    val extras = ArrayBuffer.empty[(Array[Byte], Array[Byte])]
    if (stamped) {
      buffer.touchesNotWritten.foreach { case (k, stored) => extras += ((k, restamp(stored, stampMs))) }
      expired.foreach(k => extras += ((k, ChangeBuffer.Tombstone)))
    }
    val sortedExtras = extras.sortWith((a, b) => ChangeBuffer.UnsignedOrder.compare(a._1, b._1) < 0)
    val writes = buffer.sortedWrites
    if (sortedExtras.isEmpty && !stamped) {
      return new CommitDelta(writes.keys, writes.hashes, writes.values, buffer.memoryBytes)
    }
    val size = writes.size + sortedExtras.length
    val keys = new ArrayBuffer[Array[Byte]](size)
    val hashes = new ArrayBuffer[Int](size)
    val values = new ArrayBuffer[Array[Byte]](size)
    var x = 0
    def takeExtra(): Unit = {
      val k = sortedExtras(x)._1
      keys += k
      hashes += HashBytesMap.hash(k)
      values += sortedExtras(x)._2
      x += 1
    }
    var i = 0
    while (i < writes.size) {
      val k = writes.keys(i)
      while (x < sortedExtras.length && ChangeBuffer.UnsignedOrder.compare(sortedExtras(x)._1, k) < 0) takeExtra()
      keys += k
      hashes += writes.hashes(i)
      val v = writes.values(i)
      values += (if ((v eq ChangeBuffer.Tombstone) || !stamped) v else stamp(v, stampMs))
      i += 1
    }
    while (x < sortedExtras.length) takeExtra()
    var dataBytes = 0L
    i = 0
    while (i < keys.length) {
      dataBytes += HeapMap.arrayBytes(keys(i)) + HeapMap.arrayBytes(values(i))
      i += 1
    }
    new CommitDelta(keys.toArray, hashes.toArray, values.toArray, dataBytes)
  }

  /** `[stampMs int64 BE][row]`: the TTL layout of a stored value (`spark_state/ttl/codec.py`). */
  def stamp(row: Array[Byte], stampMs: Long): Array[Byte] = {
    val out = new Array[Byte](TtlView.StampBytes + row.length)
    writeStamp(out, stampMs)
    System.arraycopy(row, 0, out, TtlView.StampBytes, row.length)
    out
  }

  private def restamp(stored: Array[Byte], stampMs: Long): Array[Byte] = {
    val out = stored.clone()
    writeStamp(out, stampMs)
    out
  }

  private def writeStamp(out: Array[Byte], stampMs: Long): Unit = {
    var i = 0
    while (i < TtlView.StampBytes) {
      out(i) = (stampMs >>> (8 * (TtlView.StampBytes - 1 - i))).toByte
      i += 1
    }
  }

  /** The `key` column of an Arrow IPC file the worker wrote; the file is deleted after reading. */
  def readKeys(file: File): Array[Array[Byte]] = {
    val out = ArrayBuffer.empty[Array[Byte]]
    ArrowRows.foreach(file, withValues = false) { (k, _) => out += k }
    out.toArray
  }
}

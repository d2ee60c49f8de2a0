package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.spark.sql.catalyst.expressions.{BoundReference, Murmur3HashFunction, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.types.{DataType, IntegerType, LongType, StringType, StructType}
import org.apache.spark.unsafe.Platform
import org.apache.spark.unsafe.hash.Murmur3_x86_32

/**
 * Stored-key layout of the provider (`prefixColumns`: the number of leading key columns a prefix scan
 * matches on, 0 for none): key-group prefixed, so that every key group is contiguous and
 * state can be re-split when the partition count changes. All integers big-endian.
 *
 * {{{
 *   no prefix scan:   [key group u16][hash i32][key UnsafeRow bytes]
 *   prefix scan (n):  [key group u16][hash i32][prefix length i32][prefix UnsafeRow bytes][key UnsafeRow bytes]
 * }}}
 *
 * `hash` is Spark's own partitioning hash of the key's partitioning columns (Murmur3, seed 42, the
 * `hash()` SQL function), so `pmod(hash, numPartitions)` is the key's partition, and
 * `key group = pmod(hash, MaxParallelism)`: when the partition count divides the key-group count a
 * key group never straddles partitions; otherwise the stored hash re-splits exactly. The partitioning
 * columns are the whole key, except for session windows (the `n` prefix columns; the key adds the
 * session start) and for the join's `keyWithIndexToValue` stores (the key adds an index column).
 *
 * The prefix form repeats the prefix columns ahead of the full key so that `prefixScan(prefix)` is a
 * scan of one byte prefix, and decoding needs no re-assembly of rows. UnsafeRow bytes are canonical
 * for equal keys (Spark's HDFS and RocksDB providers rely on that too).
 */
private[sparkstate] final class KeyCodec(keySchema: StructType, val prefixColumns: Int, storeName: String) {
  import KeyCodec._

  val numKeyFields: Int = keySchema.length

  private val partitionColumns: Array[(Int, DataType)] = {
    val count =
      if (prefixColumns > 0) prefixColumns
      else if (storeName.endsWith("keyWithIndexToValue") && numKeyFields > 1) numKeyFields - 1
      else numKeyFields
    keySchema.fields.take(count).zipWithIndex.map { case (f, i) => (i, f.dataType) }
  }

  private val prefixProjection: UnsafeProjection =
    if (prefixColumns > 0) {
      UnsafeProjection.create(keySchema.fields.take(prefixColumns).zipWithIndex.map {
        case (f, i) => BoundReference(i, f.dataType, f.nullable)
      }.toSeq)
    } else null

  private val partitionOrdinals: Array[Int] = partitionColumns.map(_._1)
  private val partitionTypes: Array[DataType] = partitionColumns.map(_._2)

  /**
   * Spark's partitioning hash over the partitioning columns of `row` (a key or a prefix row).
   * Integer, long and string columns are hashed straight from the row with the same Murmur3 calls
   * Spark's `InterpretedHashFunction` makes for them (no boxing: this runs for every state access);
   * every other type goes through Spark's function itself.
   */
  def hash(row: UnsafeRow): Int = {
    var h = SparkHashSeed
    var i = 0
    while (i < partitionOrdinals.length) {
      val ordinal = partitionOrdinals(i)
      if (!row.isNullAt(ordinal)) {
        h = partitionTypes(i) match {
          case IntegerType => Murmur3_x86_32.hashInt(row.getInt(ordinal), h)
          case LongType => Murmur3_x86_32.hashLong(row.getLong(ordinal), h)
          case StringType =>
            val s = row.getUTF8String(ordinal)
            Murmur3_x86_32.hashUnsafeBytes(s.getBaseObject, s.getBaseOffset, s.numBytes, h)
          case dt => Murmur3HashFunction.hash(row.get(ordinal, dt), dt, h.toLong).toInt
        }
      }
      i += 1
    }
    h
  }

  /** The stored key of a state key row. */
  def encode(key: UnsafeRow): Array[Byte] = {
    if (prefixColumns == 0) {
      val out = new Array[Byte](HeaderBytes + key.getSizeInBytes)
      writeHeader(out, hash(key))
      copyRow(key, out, HeaderBytes)
      out
    } else {
      val prefix = prefixProjection(key)
      val h = hash(prefix)
      val p = prefix.getSizeInBytes
      val out = new Array[Byte](HeaderBytes + 4 + p + key.getSizeInBytes)
      writeHeader(out, h)
      writeInt(out, HeaderBytes, p)
      copyRow(prefix, out, HeaderBytes + 4)
      copyRow(key, out, HeaderBytes + 4 + p)
      out
    }
  }

  /** The stored-key prefix shared by every key whose leading columns equal `prefix`. */
  def encodePrefix(prefix: UnsafeRow): Array[Byte] = {
    require(prefixColumns > 0, "prefixScan needs a PrefixKeyScanStateEncoderSpec")
    val p = prefix.getSizeInBytes
    val out = new Array[Byte](HeaderBytes + 4 + p)
    writeHeader(out, hash(prefix))
    writeInt(out, HeaderBytes, p)
    copyRow(prefix, out, HeaderBytes + 4)
    out
  }

  /** The key row of a stored key (points into `stored`; no copy). */
  def decode(stored: Array[Byte]): UnsafeRow = {
    val offset =
      if (prefixColumns == 0) HeaderBytes
      else HeaderBytes + 4 + readInt(stored, HeaderBytes)
    val row = new UnsafeRow(numKeyFields)
    row.pointTo(stored, Platform.BYTE_ARRAY_OFFSET + offset, stored.length - offset)
    row
  }
}

private[sparkstate] object KeyCodec {
  /** Key groups of the provider's stores: the largest power of two a 2-byte prefix holds for Flink. */
  val MaxParallelism = 32768
  val SparkHashSeed = 42
  val HeaderBytes = 6

  def keyGroup(hash: Int): Int = java.lang.Math.floorMod(hash, MaxParallelism)

  private def writeHeader(out: Array[Byte], hash: Int): Unit = {
    val kg = keyGroup(hash)
    out(0) = (kg >>> 8).toByte
    out(1) = kg.toByte
    writeInt(out, 2, hash)
  }

  def writeInt(out: Array[Byte], at: Int, v: Int): Unit = {
    out(at) = (v >>> 24).toByte
    out(at + 1) = (v >>> 16).toByte
    out(at + 2) = (v >>> 8).toByte
    out(at + 3) = v.toByte
  }

  def readInt(in: Array[Byte], at: Int): Int =
    ((in(at) & 0xff) << 24) | ((in(at + 1) & 0xff) << 16) | ((in(at + 2) & 0xff) << 8) | (in(at + 3) & 0xff)

  private def copyRow(row: UnsafeRow, out: Array[Byte], at: Int): Unit =
    Platform.copyMemory(row.getBaseObject, row.getBaseOffset, out, Platform.BYTE_ARRAY_OFFSET + at, row.getSizeInBytes)

  /** Value rows are stored as their UnsafeRow bytes. */
  def valueBytes(value: UnsafeRow): Array[Byte] = {
    val out = new Array[Byte](value.getSizeInBytes)
    copyRow(value, out, 0)
    out
  }

  def valueRow(bytes: Array[Byte], numFields: Int): UnsafeRow = {
    val row = new UnsafeRow(numFields)
    row.pointTo(bytes, bytes.length)
    row
  }

  /** The value row stored in `bytes` from `offset` on (after a TTL stamp); points into `bytes`, no copy. */
  def valueRow(bytes: Array[Byte], offset: Int, numFields: Int): UnsafeRow = {
    val row = new UnsafeRow(numFields)
    row.pointTo(bytes, Platform.BYTE_ARRAY_OFFSET + offset, bytes.length - offset)
    row
  }

  /** Smallest byte string greater than every string starting with `prefix` (null: unbounded). */
  def prefixEnd(prefix: Array[Byte]): Array[Byte] = {
    var i = prefix.length - 1
    while (i >= 0 && prefix(i) == 0xff.toByte) i -= 1
    if (i < 0) null
    else {
      val out = java.util.Arrays.copyOf(prefix, i + 1)
      out(i) = (out(i) + 1).toByte
      out
    }
  }
}

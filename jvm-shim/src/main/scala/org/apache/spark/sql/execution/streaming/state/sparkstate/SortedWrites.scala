package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.{Arrays => JArrays, Comparator}

/**
 * A key of the pending writes: its bytes, and their hash ([[HashBytesMap.hash]]) computed once (or
 * given, when already known: `hash` must then be that hash). Equal iff the bytes are equal. The array
 * is not copied and must not change.
 */
private[sparkstate] final class BytesKey(val bytes: Array[Byte], val hash: Int) {
  def this(bytes: Array[Byte]) = this(bytes, HashBytesMap.hash(bytes))

  override def hashCode: Int = hash

  override def equals(other: Any): Boolean = other match {
    case o: BytesKey => (o eq this) || (o.hashCode == hash && JArrays.equals(o.bytes, bytes))
    case _ => false
  }
}

/**
 * An epoch's pending writes in unsigned byte order of their keys, as parallel arrays: `keys(i)`, its
 * [[HashBytesMap.hash]] `hashes(i)` (carried from its [[BytesKey]]) and `values(i)` (the value, or
 * [[ChangeBuffer.Tombstone]]). Keys are distinct. Shared, never modified after construction.
 */
private[sparkstate] final class SortedWrites(
    val keys: Array[Array[Byte]], val hashes: Array[Int], val values: Array[Array[Byte]]) {
  def size: Int = keys.length
}

private[sparkstate] object SortedWrites {
  /** From a map already in key order (the skip list an ordered scan built). */
  def fromOrdered(map: java.util.NavigableMap[Array[Byte], Array[Byte]]): SortedWrites = {
    val keys = new scala.collection.mutable.ArrayBuffer[Array[Byte]](map.size)
    val values = new scala.collection.mutable.ArrayBuffer[Array[Byte]](map.size)
    val it = map.entrySet().iterator()
    while (it.hasNext) {
      val e = it.next()
      keys += e.getKey
      values += e.getValue
    }
    new SortedWrites(keys.toArray, keys.iterator.map(HashBytesMap.hash).toArray, values.toArray)
  }

  /** Sort the hashed pending writes (see [[ascendingOrder]] for how). */
  def sort(pending: java.util.Map[BytesKey, Array[Byte]]): SortedWrites = {
    val capacity = pending.size
    val keys0 = new Array[Array[Byte]](capacity)
    val hashes0 = new Array[Int](capacity)
    val values0 = new Array[Array[Byte]](capacity)
    var n = 0
    val it = pending.entrySet().iterator()
    while (it.hasNext && n < capacity) {
      val e = it.next()
      keys0(n) = e.getKey.bytes
      hashes0(n) = e.getKey.hash
      values0(n) = e.getValue
      n += 1
    }
    val order = ascendingOrder(keys0, n)
    val keys = new Array[Array[Byte]](n)
    val hashes = new Array[Int](n)
    val values = new Array[Array[Byte]](n)
    var i = 0
    while (i < n) {
      val j = order(i)
      keys(i) = keys0(j)
      hashes(i) = hashes0(j)
      values(i) = values0(j)
      i += 1
    }
    new SortedWrites(keys, hashes, values)
  }

  /**
   * The indices `0 until n` of `keys` in ascending unsigned byte order of their keys (equal keys in
   * any order). Stored keys start with their key group and a 32-bit hash, so their first 8 bytes (as
   * an unsigned big-endian long, zero-padded) almost always decide the order alone. Each entry becomes
   * one long: the high bits of that prefix, then its index in the low `bits` bits (enough for every
   * index), sign bit flipped so that a primitive signed sort is the unsigned order. Entries whose kept
   * prefix bits tie are then ordered by their whole keys. One `long[]` sort instead of sorting objects
   * with a comparator: no per-entry allocation, no pointer chasing per comparison.
   */
  def ascendingOrder(keys: Array[Array[Byte]], n: Int): Array[Int] = {
    val bits = math.max(1, 32 - Integer.numberOfLeadingZeros(math.max(n - 1, 1)))
    val indexMask = (1L << bits) - 1
    val packed = new Array[Long](n)
    var i = 0
    while (i < n) {
      packed(i) = (((prefix(keys(i)) >>> bits) << bits) | i) ^ Long.MinValue
      i += 1
    }
    JArrays.sort(packed)
    val order = new Array[Int](n)
    i = 0
    while (i < n) {
      order(i) = (packed(i) & indexMask).toInt
      i += 1
    }
    // Runs of equal kept prefix bits: order them by the whole key.
    var runStart = 0
    while (runStart < n) {
      val high = packed(runStart) & ~indexMask
      var runEnd = runStart + 1
      while (runEnd < n && (packed(runEnd) & ~indexMask) == high) runEnd += 1
      if (runEnd - runStart > 1) sortRun(order, runStart, runEnd, keys)
      runStart = runEnd
    }
    order
  }

  private def sortRun(order: Array[Int], from: Int, until: Int, keys: Array[Array[Byte]]): Unit = {
    val run = JArrays.copyOfRange(order, from, until).map(Integer.valueOf)
    JArrays.sort(run, new Comparator[Integer] {
      override def compare(a: Integer, b: Integer): Int = JArrays.compareUnsigned(keys(a.intValue), keys(b.intValue))
    })
    var i = 0
    while (i < run.length) {
      order(from + i) = run(i).intValue
      i += 1
    }
  }

  /** The first 8 bytes of `key` as an unsigned big-endian long, zero-padded. */
  private def prefix(key: Array[Byte]): Long = {
    var p = 0L
    var i = 0
    while (i < 8) {
      p = (p << 8) | (if (i < key.length) key(i) & 0xffL else 0L)
      i += 1
    }
    p
  }
}

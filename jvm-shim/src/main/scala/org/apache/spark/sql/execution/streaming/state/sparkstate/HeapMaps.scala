package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.{Arrays => JArrays}
import org.apache.spark.unsafe.Platform

/**
 * A byte-array map holding one store's state in the JVM heap (the `hashmap` backend). Not
 * thread-safe for writes: [[HeapViews]] mutates a map only while no other reader holds it.
 *
 * [[bytes]] is the estimate the heap maps' part of the executor's budget ([[MemoryBudget.HeapMaps]]) is charged with: both arrays
 * of every entry (16-byte header, 8-byte aligned) plus the table's share per entry.
 */
private[sparkstate] trait HeapMap {
  def get(key: Array[Byte]): Array[Byte]
  /** Returns the previous value, or null. */
  def put(key: Array[Byte], value: Array[Byte]): Array[Byte]
  /** Returns the previous value, or null. */
  def remove(key: Array[Byte]): Array[Byte]
  /** [[put]] for a key whose [[HashBytesMap.hash]] `h` is known (maps that hash use it). */
  def putHashed(key: Array[Byte], h: Int, value: Array[Byte]): Array[Byte] = put(key, value)
  /** [[remove]] for a key whose [[HashBytesMap.hash]] `h` is known (maps that hash use it). */
  def removeHashed(key: Array[Byte], h: Int): Array[Byte] = remove(key)
  def size: Int
  def bytes: Long
  /** Entries with `from <= key < until` (null: unbounded); ordered iff the map is. */
  def scan(from: Array[Byte], until: Array[Byte]): ViewScan
  def ordered: Boolean
}

private[sparkstate] object HeapMap {
  def apply(ordered: Boolean, expected: Int): HeapMap =
    if (ordered) new SortedBytesMap else new HashBytesMap(expected)

  /** Heap bytes of a byte array: 16-byte header, 8-byte alignment. */
  @inline def arrayBytes(a: Array[Byte]): Long = ((16L + a.length + 7) & ~7L)

  def inRange(k: Array[Byte], from: Array[Byte], until: Array[Byte]): Boolean =
    (from == null || JArrays.compareUnsigned(k, from) >= 0) && (until == null || JArrays.compareUnsigned(k, until) < 0)
}

/**
 * Open addressing with linear probing and backward-shift deletion; the full hash of every key is kept
 * beside it, so a probe compares ints and only equal hashes compare bytes. One `get` is a hash of the
 * key's bytes and one or two array reads: no per-entry node objects, ~12 bytes of table per slot.
 * Scans walk the table (unordered); keys of a prefix-scan store go to [[SortedBytesMap]] instead.
 */
private[sparkstate] final class HashBytesMap(expected: Int) extends HeapMap {
  import HashBytesMap._

  private var capacity = tableSize(expected)
  private var keys = new Array[Array[Byte]](capacity)
  private var values = new Array[Array[Byte]](capacity)
  private var hashes = new Array[Int](capacity)
  private var count = 0
  private var dataBytes = 0L

  def size: Int = count
  def bytes: Long = dataBytes + capacity.toLong * SlotBytes
  def ordered: Boolean = false

  def get(key: Array[Byte]): Array[Byte] = getHashed(key, hash(key))

  /** [[get]] with the key's [[HashBytesMap.hash]] already known. */
  private def getHashed(key: Array[Byte], h: Int): Array[Byte] = {
    val mask = capacity - 1
    var i = h & mask
    while (true) {
      val k = keys(i)
      if (k == null) return null
      if (hashes(i) == h && JArrays.equals(k, key)) return values(i)
      i = (i + 1) & mask
    }
    null
  }

  def put(key: Array[Byte], value: Array[Byte]): Array[Byte] = putHashed(key, hash(key), value)

  override def putHashed(key: Array[Byte], h: Int, value: Array[Byte]): Array[Byte] = {
    if ((count + 1) * 10L > capacity * 7L) grow()
    val mask = capacity - 1
    var i = h & mask
    while (true) {
      val k = keys(i)
      if (k == null) {
        keys(i) = key
        values(i) = value
        hashes(i) = h
        count += 1
        dataBytes += HeapMap.arrayBytes(key) + HeapMap.arrayBytes(value)
        return null
      }
      if (hashes(i) == h && JArrays.equals(k, key)) {
        val old = values(i)
        values(i) = value
        dataBytes += HeapMap.arrayBytes(value) - HeapMap.arrayBytes(old)
        return old
      }
      i = (i + 1) & mask
    }
    null
  }

  def remove(key: Array[Byte]): Array[Byte] = removeHashed(key, hash(key))

  override def removeHashed(key: Array[Byte], h: Int): Array[Byte] = {
    val mask = capacity - 1
    var i = h & mask
    while (keys(i) != null) {
      if (hashes(i) == h && JArrays.equals(keys(i), key)) {
        val old = values(i)
        dataBytes -= HeapMap.arrayBytes(keys(i)) + HeapMap.arrayBytes(old)
        count -= 1
        shiftBack(i)
        return old
      }
      i = (i + 1) & mask
    }
    null
  }

  /** Backward-shift deletion: move later entries of the probe run into the hole, so that no
   * tombstones are needed and every lookup still finds its key before the first empty slot. */
  private def shiftBack(hole: Int): Unit = {
    val mask = capacity - 1
    var free = hole
    var i = (hole + 1) & mask
    while (keys(i) != null) {
      val home = hashes(i) & mask
      // The entry at i may move to `free` iff its home is not in the cyclic range (free, i].
      val movable = if (free <= i) home <= free || home > i else home <= free && home > i
      if (movable) {
        keys(free) = keys(i)
        values(free) = values(i)
        hashes(free) = hashes(i)
        free = i
      }
      i = (i + 1) & mask
    }
    keys(free) = null
    values(free) = null
    hashes(free) = 0
  }

  private def grow(): Unit = {
    val oldKeys = keys
    val oldValues = values
    val oldHashes = hashes
    capacity *= 2
    keys = new Array[Array[Byte]](capacity)
    values = new Array[Array[Byte]](capacity)
    hashes = new Array[Int](capacity)
    val mask = capacity - 1
    var j = 0
    while (j < oldKeys.length) {
      val k = oldKeys(j)
      if (k != null) {
        var i = oldHashes(j) & mask
        while (keys(i) != null) i = (i + 1) & mask
        keys(i) = k
        values(i) = oldValues(j)
        hashes(i) = oldHashes(j)
      }
      j += 1
    }
  }

  def scan(from: Array[Byte], until: Array[Byte]): ViewScan = new ViewScan {
    private val ks = keys
    private val vs = values
    private var i = -1
    advance()
    private def advance(): Unit = {
      i += 1
      while (i < ks.length && (ks(i) == null || !HeapMap.inRange(ks(i), from, until))) i += 1
    }
    def valid: Boolean = i < ks.length
    def key: Array[Byte] = ks(i)
    def value: Array[Byte] = vs(i)
    def next(): Unit = advance()
    def close(): Unit = i = ks.length
  }
}

private[sparkstate] object HashBytesMap {
  /** Three slot arrays (two compressed references and an int) per slot. */
  val SlotBytes = 12L

  def tableSize(expected: Int): Int = {
    val want = math.max(16L, expected.toLong * 10 / 7 + 1)
    java.lang.Long.highestOneBit(want - 1).toInt << 1
  }

  /** A 64-bit multiply-xorshift hash over 8-byte words of the key (all of it: join and session keys
   * share their leading partitioning hash), folded to the int the table probes with. */
  def hash(key: Array[Byte]): Int = {
    var h = 0x9E3779B97F4A7C15L ^ key.length
    var i = 0
    val n = key.length
    while (i + 8 <= n) {
      h = (h ^ Platform.getLong(key, Platform.BYTE_ARRAY_OFFSET + i)) * 0xBF58476D1CE4E5B9L
      h ^= h >>> 31
      i += 8
    }
    while (i < n) {
      h = (h ^ (key(i) & 0xffL)) * 0x94D049BB133111EBL
      i += 1
    }
    h ^= h >>> 29
    h *= 0xBF58476D1CE4E5B9L
    h ^= h >>> 32
    h.toInt
  }
}

/**
 * An ordered map (unsigned byte order) for prefix-scan stores (session windows): `prefixScan` is a
 * range of the tree. Only these stores pay O(log n) per get.
 */
private[sparkstate] final class SortedBytesMap extends HeapMap {
  private val tree = new java.util.TreeMap[Array[Byte], Array[Byte]](ChangeBuffer.UnsignedOrder)
  private var dataBytes = 0L

  def get(key: Array[Byte]): Array[Byte] = tree.get(key)
  def size: Int = tree.size
  def bytes: Long = dataBytes + tree.size.toLong * SortedBytesMap.NodeBytes
  def ordered: Boolean = true

  def put(key: Array[Byte], value: Array[Byte]): Array[Byte] = {
    val old = tree.put(key, value)
    dataBytes += HeapMap.arrayBytes(value) + (if (old == null) HeapMap.arrayBytes(key) else -HeapMap.arrayBytes(old))
    old
  }

  def remove(key: Array[Byte]): Array[Byte] = {
    val old = tree.remove(key)
    if (old != null) dataBytes -= HeapMap.arrayBytes(key) + HeapMap.arrayBytes(old)
    old
  }

  def scan(from: Array[Byte], until: Array[Byte]): ViewScan = {
    val range =
      if (from == null && until == null) tree
      else if (until == null) tree.tailMap(from, true)
      else if (from == null) tree.headMap(until, false)
      else tree.subMap(from, true, until, false)
    val it = range.entrySet().iterator()
    new ViewScan {
      private var current: java.util.Map.Entry[Array[Byte], Array[Byte]] = if (it.hasNext) it.next() else null
      def valid: Boolean = current != null
      def key: Array[Byte] = current.getKey
      def value: Array[Byte] = current.getValue
      def next(): Unit = current = if (it.hasNext) it.next() else null
      def close(): Unit = current = null
    }
  }
}

private[sparkstate] object SortedBytesMap {
  /** A TreeMap.Entry: header, key, value, three links and a color (compressed oops). */
  val NodeBytes = 40L
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.{Arrays => JArrays}

/**
 * What reads of committed state found this epoch, per key ([[ChangeBuffer.notePrior]]): key -> prior
 * (a `long`: [[ChangeBuffer.PriorAbsent]], [[ChangeBuffer.PriorExists]] or a TTL stamp), without an
 * object per entry.
 *
 * Layout: entry `i`'s key bytes are `slab(starts(i) until starts(i + 1))` (copied: the read's own key
 * array can die young), its prior is `priors(i)`; the hash index is a [[SlotIndex]] over the entries.
 * Entries are never removed (only [[clear]]). A `HashMap[BytesKey, Long]` kept three
 * objects per read alive until the commit (its node, the key wrapper and the read's key array), which
 * every young collection of a large epoch copied again.
 *
 * Remembering is an optimisation: a key whose prior is not remembered (the slab is full) is committed
 * with its prior unknown and the worker looks it up. Not thread-safe: [[ChangeBuffer]] locks it.
 */
private[sparkstate] final class PriorMap(expected: Int) {
  import PriorMap._

  // Allocated at the first put: a store that is only written, or whose view answers priors, pays nothing.
  private var table: Array[Long] = _
  private var starts: Array[Int] = _
  private var priors: Array[Long] = _
  private var slab: Array[Byte] = _
  private var n = 0

  def size: Int = n

  /** Heap bytes of the arrays held (the slab and the tables, allocated or not yet grown into). */
  def bytes: Long =
    if (table == null) 0L else table.length * 8L + starts.length * 4L + priors.length * 8L + slab.length

  /** Remember `prior` for `key`, whose [[HashBytesMap.hash]] is `hash`; a key seen again gets the new prior. */
  def put(key: Array[Byte], hash: Int, prior: Long): Unit = {
    if (table == null) allocate(math.max(expected, MinEntries))
    val found = find(key, hash)
    if (found >= 0) {
      priors(found) = prior
      return
    }
    val at = starts(n)
    if (at.toLong + key.length > MaxSlabBytes) return // not remembered: unknown at commit
    if ((n + 1) * 10L > table.length * 7L) rehash(table.length * 2)
    if (n == priors.length) { // invariant: starts.length == priors.length + 1
      priors = JArrays.copyOf(priors, priors.length * 2)
      starts = JArrays.copyOf(starts, priors.length + 1)
    }
    if (at + key.length > slab.length) {
      slab = JArrays.copyOf(slab, math.min(MaxSlabBytes, math.max(slab.length * 2L, at.toLong + key.length)).toInt)
    }
    System.arraycopy(key, 0, slab, at, key.length)
    starts(n + 1) = at + key.length
    priors(n) = prior
    SlotIndex.insert(table, hash, n)
    n += 1
  }

  /** The prior remembered for `key` (whose [[HashBytesMap.hash]] is `hash`), or [[Missing]]. */
  def get(key: Array[Byte], hash: Int): Long = {
    val i = find(key, hash)
    if (i < 0) Missing else priors(i)
  }

  /** Forget every entry (the arrays are allocated again, at the first size, by the next put). */
  def clear(): Unit = {
    table = null
    starts = null
    priors = null
    slab = null
    n = 0
  }

  private def allocate(entries: Int): Unit = {
    table = new Array[Long](HashBytesMap.tableSize(entries))
    starts = new Array[Int](entries + 1)
    priors = new Array[Long](entries)
    slab = new Array[Byte](math.min(MaxSlabBytes.toLong, entries.toLong * GuessedKeyBytes).toInt)
  }

  private def find(key: Array[Byte], hash: Int): Int = {
    if (table == null) return -1
    val mask = table.length - 1
    var s = hash & mask
    var e = table(s)
    while (e != 0L) {
      if (SlotIndex.hashOf(e) == hash) {
        val i = SlotIndex.entryOf(e)
        val from = starts(i)
        val to = starts(i + 1)
        if (to - from == key.length && JArrays.equals(slab, from, to, key, 0, key.length)) return i
      }
      s = (s + 1) & mask
      e = table(s)
    }
    -1
  }

  private def rehash(slots: Int): Unit = {
    val next = new Array[Long](slots)
    var s = 0
    while (s < table.length) {
      val e = table(s)
      if (e != 0L) SlotIndex.insert(next, SlotIndex.hashOf(e), SlotIndex.entryOf(e))
      s += 1
    }
    table = next
  }
}

private[sparkstate] object PriorMap {
  /** [[PriorMap.get]] of a key not remembered (no prior is this value: stamps are >= 0, markers small). */
  val Missing: Long = Long.MinValue
  private val MinEntries = 16
  /** Initial slab bytes per expected entry (it doubles when keys are longer). */
  private val GuessedKeyBytes = 24
  /** Largest slab: past it, priors are not remembered (the worker looks them up). */
  private val MaxSlabBytes = 1 << 30
}

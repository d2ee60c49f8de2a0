package org.apache.spark.sql.execution.streaming.state.sparkstate

/**
 * A hash index of one `long` per slot over entries numbered `0 until n` that live elsewhere (a
 * [[Layer]]'s key array, a [[PriorMap]]'s slab). A slot holds the entry's key [[HashBytesMap.hash]]
 * in its high 32 bits and the entry's number + 1 in its low 32; 0 is an empty slot. Linear probing
 * from `hash & (table.length - 1)`; tables are [[HashBytesMap.tableSize]] long (a power of two, at
 * most 7/10 full), so a free slot always exists. A probe compares the stored hash before it touches
 * a key: one array read per slot, and building an index reads no key at all.
 *
 * Probing loops stay with their owners (each compares keys its own way); this object holds the
 * layout they share.
 */
private[sparkstate] object SlotIndex {
  /** The key hash stored in a non-empty slot. */
  def hashOf(slot: Long): Int = (slot >>> 32).toInt

  /** The entry number stored in a non-empty slot. */
  def entryOf(slot: Long): Int = (slot & 0xffffffffL).toInt - 1

  /** Put `entry`, whose key hashes to `hash`, in the first free slot from its home slot. */
  def insert(table: Array[Long], hash: Int, entry: Int): Unit = {
    val mask = table.length - 1
    var s = hash & mask
    while (table(s) != 0L) s = (s + 1) & mask
    table(s) = (hash.toLong << 32) | (entry + 1).toLong
  }
}

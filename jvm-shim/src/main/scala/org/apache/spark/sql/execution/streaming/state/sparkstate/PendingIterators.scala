package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.{Arrays => JArrays}

/*
 * The iterators a [[ChangeBuffer]]'s range hands to scans: the heap's writes followed or merged with
 * the spilled ones. Entries are (key, value) with deletes as [[ChangeBuffer.Tombstone]].
 */

/** `first`, then `second`; closing it closes both (see [[ChangeBuffer.closeRange]]). */
private[sparkstate] final class ConcatIterator[T](first: java.util.Iterator[T], second: java.util.Iterator[T])
    extends java.util.Iterator[T] with AutoCloseable {
  override def hasNext: Boolean = first.hasNext || second.hasNext
  override def next(): T = if (first.hasNext) first.next() else second.next()
  override def close(): Unit = {
    ChangeBuffer.closeRange(first)
    ChangeBuffer.closeRange(second)
  }
}

/**
 * The writes of a spill scan as map entries (deletes as [[ChangeBuffer.Tombstone]]; touches, which are
 * reads, skipped), in the scan's key order; keys `shadow` holds (the heap's newer writes) are skipped
 * too when it is given. The scan is closed when exhausted.
 */
private[sparkstate] final class SpilledWrites(
    scan: ViewScan, shadow: java.util.Map[BytesKey, Array[Byte]])
    extends java.util.Iterator[ChangeBuffer.JEntry] with AutoCloseable {
  private var nextEntry: ChangeBuffer.JEntry = _
  advance()

  private def advance(): Unit = {
    nextEntry = null
    while (nextEntry == null && scan.valid) {
      val k = scan.key
      val e = scan.value
      scan.next()
      val op = SpillRuns.op(e)
      if (op != ChangeBuffer.OpTouch && (shadow == null || !shadow.containsKey(new BytesKey(k)))) {
        val v = if (op == ChangeBuffer.OpDelete) ChangeBuffer.Tombstone else SpillRuns.value(e)
        nextEntry = new java.util.AbstractMap.SimpleImmutableEntry(k, v)
      }
    }
    if (nextEntry == null) scan.close()
  }

  override def hasNext: Boolean = nextEntry != null
  override def next(): ChangeBuffer.JEntry = {
    if (nextEntry == null) throw new NoSuchElementException("end of spilled writes")
    val e = nextEntry
    advance()
    e
  }
  override def close(): Unit = {
    nextEntry = null
    scan.close()
  }
}

/** Two iterators in ascending unsigned key order merged into one; on equal keys `newer`'s entry wins. */
private[sparkstate] final class MergedWrites(
    newer: java.util.Iterator[ChangeBuffer.JEntry], older: java.util.Iterator[ChangeBuffer.JEntry])
    extends java.util.Iterator[ChangeBuffer.JEntry] with AutoCloseable {
  private var a: ChangeBuffer.JEntry = if (newer.hasNext) newer.next() else null
  private var b: ChangeBuffer.JEntry = if (older.hasNext) older.next() else null

  override def hasNext: Boolean = a != null || b != null

  override def next(): ChangeBuffer.JEntry = {
    if (a == null && b == null) throw new NoSuchElementException("end of pending writes")
    val order = if (a == null) 1 else if (b == null) -1 else JArrays.compareUnsigned(a.getKey, b.getKey)
    if (order <= 0) {
      val e = a
      a = if (newer.hasNext) newer.next() else null
      if (order == 0) b = if (older.hasNext) older.next() else null
      e
    } else {
      val e = b
      b = if (older.hasNext) older.next() else null
      e
    }
  }

  override def close(): Unit = {
    a = null
    b = null
    ChangeBuffer.closeRange(newer)
    ChangeBuffer.closeRange(older)
  }
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.{File, FileOutputStream}
import java.nio.ByteBuffer
import java.util.{Arrays => JArrays, Comparator}
import java.util.concurrent.ConcurrentSkipListMap

import org.apache.arrow.vector.{BigIntVector, TinyIntVector, VarBinaryVector, VectorSchemaRoot}
import org.apache.arrow.vector.ipc.ArrowFileWriter
import org.apache.arrow.vector.types.pojo.{ArrowType, Field, FieldType, Schema}

import org.apache.spark.sql.util.ArrowUtils

/**
 * An epoch's uncommitted writes, kept in the JVM so that reads see them (read-your-writes) and
 * shipped to the Python worker in one Arrow IPC file at `commit()`.
 *
 * Sorted by unsigned bytes -- the RocksDB order -- so that scans merge it with the local database
 * in one pass. `ConcurrentSkipListMap` iterators are weakly consistent: operators may put and
 * remove while they iterate (eviction does), as the contract requires.
 *
 * It also remembers, for keys read from committed state this epoch, whether they existed and, with
 * TTL, the stamp of the value read; the changes file carries these as `prior` and `prior_stamp`, so
 * the engine keeps an exact key count and its expiry index without lookups. With TTL
 * `OnReadAndWrite` it remembers the live keys read (touches), which the commit re-stamps.
 */
private[sparkstate] final class ChangeBuffer {
  import ChangeBuffer._

  private val writes = new ConcurrentSkipListMap[Array[Byte], Array[Byte]](UnsignedOrder)
  private val priors = new java.util.HashMap[ByteBuffer, java.lang.Long]()
  /** OnReadAndWrite point reads of live keys: key -> the stored (stamped) value that was read. */
  private val touched = new java.util.HashMap[ByteBuffer, Array[Byte]]()
  @volatile private var bytes = 0L

  /** The pending value, [[Tombstone]] for a pending delete, or null if the key is untouched. */
  def lookup(key: Array[Byte]): Array[Byte] = writes.get(key)

  /**
   * Remember what a read of committed state found for `key`: [[PriorAbsent]], [[PriorExists]] (a value
   * without TTL stamp), or the stamp (>= 0) of the value read.
   */
  def notePrior(key: Array[Byte], prior: Long): Unit = priors.synchronized {
    if (priors.size < MaxRememberedReads) priors.put(ByteBuffer.wrap(key), prior)
  }

  /** Record an OnReadAndWrite read of the live committed value `stored` (stamp included) of `key`. */
  def touch(key: Array[Byte], stored: Array[Byte]): Unit = touched.synchronized {
    if (touched.size < MaxRememberedReads && touched.put(ByteBuffer.wrap(key), stored) == null) {
      bytes += key.length + stored.length + EntryOverhead
    }
  }

  def put(key: Array[Byte], value: Array[Byte]): Unit = {
    val old = writes.put(key, value)
    bytes += value.length + (if (old == null) key.length + EntryOverhead else -old.length)
  }

  def remove(key: Array[Byte]): Unit = put(key, Tombstone)

  def size: Int = writes.size

  /** The pending writes in key order: value, or [[Tombstone]] for a delete. */
  def writesInOrder: java.util.Iterator[java.util.Map.Entry[Array[Byte], Array[Byte]]] = writes.entrySet().iterator()

  /** OnReadAndWrite touches of keys not written this epoch: (key, stored value read, stamp included). */
  def touchesNotWritten: Seq[(Array[Byte], Array[Byte])] = touched.synchronized {
    val out = scala.collection.mutable.ArrayBuffer.empty[(Array[Byte], Array[Byte])]
    val it = touched.entrySet().iterator()
    while (it.hasNext) {
      val e = it.next()
      val k = e.getKey.array()
      if (!writes.containsKey(k)) out += ((k, e.getValue))
    }
    out.toSeq
  }

  def memoryBytes: Long = bytes

  /** Entries with `from <= key < until` (null bounds: open), for merging with a scan. */
  def range(from: Array[Byte], until: Array[Byte]): java.util.Iterator[java.util.Map.Entry[Array[Byte], Array[Byte]]] = {
    val view =
      if (from == null && until == null) writes
      else if (until == null) writes.tailMap(from, true)
      else if (from == null) writes.headMap(until, false)
      else writes.subMap(from, true, until, false)
    view.entrySet().iterator()
  }

  def clear(): Unit = {
    writes.clear()
    priors.synchronized(priors.clear())
    touched.synchronized(touched.clear())
    bytes = 0
  }

  /**
   * Write every pending change, then every touch of a key not written, as an Arrow IPC file (schema in
   * `spark_state/provider/protocol.py`). Returns the number of rows.
   */
  def writeArrow(file: File): Int = {
    val allocator = ArrowUtils.rootAllocator.newChildAllocator("spark-state-commit", 0, Long.MaxValue)
    val root = VectorSchemaRoot.create(ChangesSchema, allocator)
    val out = new FileOutputStream(file)
    try {
      val writer = new ArrowFileWriter(root, null, out.getChannel)
      writer.start()
      val op = root.getVector("op").asInstanceOf[TinyIntVector]
      val key = root.getVector("key").asInstanceOf[VarBinaryVector]
      val value = root.getVector("value").asInstanceOf[VarBinaryVector]
      val prior = root.getVector("prior").asInstanceOf[TinyIntVector]
      val priorStamp = root.getVector("prior_stamp").asInstanceOf[BigIntVector]
      val it = writes.entrySet().iterator()
      val touches = touched.entrySet().iterator()
      var pendingTouch: java.util.Map.Entry[ByteBuffer, Array[Byte]] = null
      def nextTouch(): Boolean = {
        pendingTouch = null
        while (pendingTouch == null && touches.hasNext) {
          val t = touches.next()
          if (!writes.containsKey(t.getKey.array())) pendingTouch = t
        }
        pendingTouch != null
      }
      var hasTouch = nextTouch()
      def setPrior(n: Int, k: Array[Byte]): Unit = {
        val p = priors.get(ByteBuffer.wrap(k))
        if (p == null) {
          prior.setSafe(n, PriorUnknown)
          priorStamp.setSafe(n, StampUnknown)
        } else if (p.longValue() == PriorAbsent) {
          prior.setSafe(n, 0)
          priorStamp.setSafe(n, PriorAbsent)
        } else {
          prior.setSafe(n, 1)
          priorStamp.setSafe(n, if (p.longValue() == PriorExists) StampUnknown else p.longValue())
        }
      }
      var total = 0
      while (it.hasNext || hasTouch) {
        root.allocateNew()
        var n = 0
        while (n < BatchRows && it.hasNext) {
          val e = it.next()
          val k = e.getKey
          val v = e.getValue
          key.setSafe(n, k)
          if (v eq Tombstone) {
            op.setSafe(n, OpDelete)
            value.setNull(n)
          } else {
            op.setSafe(n, OpPut)
            value.setSafe(n, v)
          }
          setPrior(n, k)
          n += 1
        }
        while (n < BatchRows && !it.hasNext && hasTouch) {
          val k = pendingTouch.getKey.array()
          val stored = pendingTouch.getValue
          key.setSafe(n, k)
          op.setSafe(n, OpTouch)
          value.setSafe(n, stored, TtlView.StampBytes, stored.length - TtlView.StampBytes)
          setPrior(n, k)
          n += 1
          hasTouch = nextTouch()
        }
        root.setRowCount(n)
        writer.writeBatch()
        total += n
        root.clear()
      }
      writer.end()
      writer.close()
      total
    } finally {
      out.close()
      root.close()
      allocator.close()
    }
  }
}

private[sparkstate] object ChangeBuffer {
  /** Marks a pending delete (compared by identity). */
  val Tombstone: Array[Byte] = new Array[Byte](0)
  val OpPut = 0
  val OpDelete = 1
  /** An OnReadAndWrite read: the worker rewrites the value read with a new stamp. */
  val OpTouch = 2
  val PriorUnknown = -1
  /** `prior_stamp` when the stamp is unknown. */
  val StampUnknown = -1L
  /** [[notePrior]]: the key is absent from committed state (also its `prior_stamp`). */
  val PriorAbsent = -2L
  /** [[notePrior]]: the key exists, its value has no stamp (a version without TTL). */
  val PriorExists = -3L
  val BatchRows = 65536
  val MaxRememberedReads = 1 << 21
  private val EntryOverhead = 64

  val UnsignedOrder: Comparator[Array[Byte]] = new Comparator[Array[Byte]] {
    override def compare(a: Array[Byte], b: Array[Byte]): Int = JArrays.compareUnsigned(a, b)
  }

  val ChangesSchema: Schema = new Schema(java.util.Arrays.asList(
    new Field("op", FieldType.notNullable(new ArrowType.Int(8, true)), null),
    new Field("key", FieldType.notNullable(ArrowType.Binary.INSTANCE), null),
    new Field("value", FieldType.nullable(ArrowType.Binary.INSTANCE), null),
    new Field("prior", FieldType.notNullable(new ArrowType.Int(8, true)), null),
    new Field("prior_stamp", FieldType.notNullable(new ArrowType.Int(64, true)), null)))
}

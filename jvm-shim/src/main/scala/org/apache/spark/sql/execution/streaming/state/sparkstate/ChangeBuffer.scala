package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.{File, FileOutputStream}
import java.nio.ByteBuffer
import java.util.{Arrays => JArrays, Comparator}
import java.util.concurrent.ConcurrentSkipListMap

import org.apache.arrow.vector.{TinyIntVector, VarBinaryVector, VectorSchemaRoot}
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
 * It also remembers, for keys read from committed state this epoch, whether they existed; the
 * changes file carries that as `prior`, so the engine keeps an exact key count without lookups.
 */
private[sparkstate] final class ChangeBuffer {
  import ChangeBuffer._

  private val writes = new ConcurrentSkipListMap[Array[Byte], Array[Byte]](UnsignedOrder)
  private val priors = new java.util.HashMap[ByteBuffer, java.lang.Boolean]()
  @volatile private var bytes = 0L

  /** The pending value, [[Tombstone]] for a pending delete, or null if the key is untouched. */
  def lookup(key: Array[Byte]): Array[Byte] = writes.get(key)

  def notePrior(key: Array[Byte], exists: Boolean): Unit = priors.synchronized {
    if (priors.size < MaxRememberedReads) priors.put(ByteBuffer.wrap(key), exists)
  }

  def put(key: Array[Byte], value: Array[Byte]): Unit = {
    val old = writes.put(key, value)
    bytes += value.length + (if (old == null) key.length + EntryOverhead else -old.length)
  }

  def remove(key: Array[Byte]): Unit = put(key, Tombstone)

  def size: Int = writes.size

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
    bytes = 0
  }

  /** Write every pending change as an Arrow IPC file (schema in `spark_state/provider/protocol.py`). */
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
      val it = writes.entrySet().iterator()
      var total = 0
      while (it.hasNext) {
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
          val p = priors.get(ByteBuffer.wrap(k))
          prior.setSafe(n, if (p == null) PriorUnknown else if (p.booleanValue()) 1 else 0)
          n += 1
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
  val PriorUnknown = -1
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
    new Field("prior", FieldType.notNullable(new ArrowType.Int(8, true)), null)))
}

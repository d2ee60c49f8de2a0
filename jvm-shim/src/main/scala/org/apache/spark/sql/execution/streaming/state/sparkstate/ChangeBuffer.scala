package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.{File, FileOutputStream}
import java.util.{Arrays => JArrays, Comparator}
import java.util.concurrent.{ConcurrentHashMap, ConcurrentSkipListMap}

import org.apache.arrow.vector.{BigIntVector, TinyIntVector, VarBinaryVector, VectorSchemaRoot}
import org.apache.arrow.vector.ipc.ArrowFileWriter
import org.apache.arrow.vector.types.pojo.{ArrowType, Field, FieldType, Schema}

import org.apache.spark.sql.util.ArrowUtils

/**
 * An epoch's uncommitted writes, kept in the JVM so that reads see them (read-your-writes) and
 * shipped to the Python worker in one Arrow IPC file at `commit()`.
 *
 * Layout. `pending` hashes every written key ([[BytesKey]]: the key's bytes and their hash, computed
 * once): a read of a pending write -- every row of every operator asks -- is one hash lookup, and a
 * write is O(1). Key order (unsigned bytes, RocksDB's order) is needed only by scans merged with an
 * ordered view and at commit (the changes file and the [[CommitDelta]] are sorted), so it is built on
 * demand: the first ordered scan of an epoch creates `sorted`, a skip list every later write of the
 * epoch also updates; a commit without one sorts the keys once ([[writesInOrder]]). A skip list for
 * every write cost a third of a dropDuplicates task's time (its lookups compare byte arrays along
 * O(log n) levels). Iterators of both maps are weakly consistent: operators may put and remove while
 * they iterate (eviction does), as the contract requires. Writes are serialized on this object; reads
 * of `pending` take no lock.
 *
 * It also remembers, for keys read from committed state this epoch, whether they existed and, with
 * TTL, the stamp of the value read; the changes file carries these as `prior` and `prior_stamp`, so
 * the engine keeps an exact key count and its expiry index without lookups. With TTL
 * `OnReadAndWrite` it remembers the live keys read (touches), which the commit re-stamps.
 */
private[sparkstate] final class ChangeBuffer {
  import ChangeBuffer._

  private val pending = new ConcurrentHashMap[BytesKey, Array[Byte]]()
  /** The pending writes in key order, once an ordered scan asked for it this epoch (else null). */
  @volatile private var sorted: ConcurrentSkipListMap[Array[Byte], Array[Byte]] = _
  /** The pending writes sorted by key as of the last write, cached for the commit (null: stale). */
  private var orderedSnapshot: Array[java.util.Map.Entry[Array[Byte], Array[Byte]]] = _
  private val priors = new java.util.HashMap[BytesKey, java.lang.Long]()
  /** OnReadAndWrite point reads of live keys: key -> the stored (stamped) value that was read. */
  private val touched = new java.util.HashMap[BytesKey, Array[Byte]]()
  @volatile private var bytes = 0L

  /** The pending value, [[Tombstone]] for a pending delete, or null if the key is untouched. */
  def lookup(key: Array[Byte]): Array[Byte] = pending.get(new BytesKey(key))

  /**
   * Remember what a read of committed state found for `key`: [[PriorAbsent]], [[PriorExists]] (a value
   * without TTL stamp), or the stamp (>= 0) of the value read.
   */
  def notePrior(key: Array[Byte], prior: Long): Unit = priors.synchronized {
    if (priors.size < MaxRememberedReads) priors.put(new BytesKey(key), prior)
  }

  /** Record an OnReadAndWrite read of the live committed value `stored` (stamp included) of `key`. */
  def touch(key: Array[Byte], stored: Array[Byte]): Unit = touched.synchronized {
    if (touched.size < MaxRememberedReads && touched.put(new BytesKey(key), stored) == null) {
      bytes += key.length + stored.length + EntryOverhead
    }
  }

  def put(key: Array[Byte], value: Array[Byte]): Unit = synchronized {
    val old = pending.put(new BytesKey(key), value)
    val s = sorted
    if (s != null) s.put(key, value)
    orderedSnapshot = null
    bytes += value.length + (if (old == null) key.length + EntryOverhead else -old.length)
  }

  def remove(key: Array[Byte]): Unit = put(key, Tombstone)

  def size: Int = pending.size

  /** The pending writes in key order: value, or [[Tombstone]] for a delete. */
  def writesInOrder: java.util.Iterator[java.util.Map.Entry[Array[Byte], Array[Byte]]] = synchronized {
    val s = sorted
    if (s != null) s.entrySet().iterator()
    else {
      if (orderedSnapshot == null) {
        val entries = new Array[SortEntry](pending.size)
        var n = 0
        val it = pending.entrySet().iterator()
        while (it.hasNext) {
          val e = it.next()
          entries(n) = new SortEntry(e.getKey.bytes, e.getValue)
          n += 1
        }
        JArrays.sort(entries, SortEntry.Order)
        orderedSnapshot = entries.asInstanceOf[Array[java.util.Map.Entry[Array[Byte], Array[Byte]]]]
      }
      JArrays.asList(orderedSnapshot: _*).iterator()
    }
  }

  /** OnReadAndWrite touches of keys not written this epoch: (key, stored value read, stamp included). */
  def touchesNotWritten: Seq[(Array[Byte], Array[Byte])] = touched.synchronized {
    val out = scala.collection.mutable.ArrayBuffer.empty[(Array[Byte], Array[Byte])]
    val it = touched.entrySet().iterator()
    while (it.hasNext) {
      val e = it.next()
      if (!pending.containsKey(e.getKey)) out += ((e.getKey.bytes, e.getValue))
    }
    out.toSeq
  }

  def memoryBytes: Long = bytes

  /**
   * Entries with `from <= key < until` (null bounds: open), for merging with a scan: in key order if
   * `ordered` (the first such call of an epoch builds the skip list), else in hash order.
   */
  def range(from: Array[Byte], until: Array[Byte], ordered: Boolean)
      : java.util.Iterator[java.util.Map.Entry[Array[Byte], Array[Byte]]] = {
    if (!ordered) return unorderedRange(from, until)
    val all = ensureSorted()
    val view =
      if (from == null && until == null) all
      else if (until == null) all.tailMap(from, true)
      else if (from == null) all.headMap(until, false)
      else all.subMap(from, true, until, false)
    view.entrySet().iterator()
  }

  private def ensureSorted(): ConcurrentSkipListMap[Array[Byte], Array[Byte]] = synchronized {
    if (sorted == null) {
      val s = new ConcurrentSkipListMap[Array[Byte], Array[Byte]](UnsignedOrder)
      val it = pending.entrySet().iterator()
      while (it.hasNext) {
        val e = it.next()
        s.put(e.getKey.bytes, e.getValue)
      }
      sorted = s
    }
    sorted
  }

  private def unorderedRange(from: Array[Byte], until: Array[Byte])
      : java.util.Iterator[java.util.Map.Entry[Array[Byte], Array[Byte]]] =
    new java.util.Iterator[java.util.Map.Entry[Array[Byte], Array[Byte]]] {
      private val it = pending.entrySet().iterator()
      private var nextEntry: java.util.Map.Entry[Array[Byte], Array[Byte]] = _
      advance()
      private def advance(): Unit = {
        nextEntry = null
        while (nextEntry == null && it.hasNext) {
          val e = it.next()
          val k = e.getKey.bytes
          if (HeapMap.inRange(k, from, until)) nextEntry = new java.util.AbstractMap.SimpleImmutableEntry(k, e.getValue)
        }
      }
      override def hasNext: Boolean = nextEntry != null
      override def next(): java.util.Map.Entry[Array[Byte], Array[Byte]] = {
        if (nextEntry == null) throw new NoSuchElementException("end of pending writes")
        val e = nextEntry
        advance()
        e
      }
    }

  def clear(): Unit = {
    synchronized {
      pending.clear()
      sorted = null
      orderedSnapshot = null
    }
    priors.synchronized(priors.clear())
    touched.synchronized(touched.clear())
    bytes = 0
  }

  /**
   * Write every pending change, then every touch of a key not written, as an Arrow IPC file (schema in
   * `spark_state/provider/protocol.py`). Returns the number of rows. `priorFromView`, when given, is
   * what committed state holds for a key ([[PriorAbsent]], [[PriorExists]] or the stamp), asked of the
   * loaded view at commit instead of remembered per read: a view whose gets are a hash lookup (the heap
   * map) answers for every written key, so the engine needs no lookups for its key count.
   */
  def writeArrow(file: File, priorFromView: Array[Byte] => Long = null): Int = {
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
      val it = writesInOrder
      val touches = touched.entrySet().iterator()
      var pendingTouch: java.util.Map.Entry[BytesKey, Array[Byte]] = null
      def nextTouch(): Boolean = {
        pendingTouch = null
        while (pendingTouch == null && touches.hasNext) {
          val t = touches.next()
          if (!pending.containsKey(t.getKey)) pendingTouch = t
        }
        pendingTouch != null
      }
      var hasTouch = nextTouch()
      def setPrior(n: Int, k: Array[Byte]): Unit = {
        val p: java.lang.Long = if (priorFromView != null) priorFromView(k) else priors.get(new BytesKey(k))
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
          val k = pendingTouch.getKey.bytes
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

/**
 * A key of the pending writes: its bytes, and their hash ([[HashBytesMap.hash]]) computed once.
 * Equal iff the bytes are equal. The array is not copied and must not change.
 */
private[sparkstate] final class BytesKey(val bytes: Array[Byte]) {
  private[this] val hash = HashBytesMap.hash(bytes)

  override def hashCode: Int = hash

  override def equals(other: Any): Boolean = other match {
    case o: BytesKey => (o eq this) || (o.hashCode == hash && JArrays.equals(o.bytes, bytes))
    case _ => false
  }
}

/**
 * A pending write being sorted for the commit, with the first 8 bytes of its key as an unsigned
 * big-endian long (zero-padded): stored keys start with their key group and 32-bit hash, so that long
 * almost always decides the unsigned byte order alone, without comparing arrays.
 */
private[sparkstate] final class SortEntry(key: Array[Byte], value: Array[Byte])
    extends java.util.AbstractMap.SimpleImmutableEntry[Array[Byte], Array[Byte]](key, value) {
  val prefix: Long = {
    var p = 0L
    var i = 0
    while (i < 8) {
      p = (p << 8) | (if (i < key.length) key(i) & 0xffL else 0L)
      i += 1
    }
    p
  }
}

private[sparkstate] object SortEntry {
  /** Unsigned byte order of the keys (the prefix first, the whole keys on a tie). */
  val Order: Comparator[SortEntry] = new Comparator[SortEntry] {
    override def compare(a: SortEntry, b: SortEntry): Int = {
      val c = java.lang.Long.compareUnsigned(a.prefix, b.prefix)
      if (c != 0) c else JArrays.compareUnsigned(a.getKey, b.getKey)
    }
  }
}

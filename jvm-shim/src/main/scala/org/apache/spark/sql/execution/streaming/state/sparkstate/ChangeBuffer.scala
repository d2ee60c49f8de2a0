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
 * epoch also updates; a commit without one sorts the keys once ([[sortedWrites]]). A skip list for
 * every write cost a third of a dropDuplicates task's time (its lookups compare byte arrays along
 * O(log n) levels). Iterators of both maps are weakly consistent: operators may put and remove while
 * they iterate (eviction does), as the contract requires. Writes are serialized on this object; reads
 * of `pending` take no lock.
 *
 * It also remembers, for keys read from committed state this epoch, whether they existed and, with
 * TTL, the stamp of the value read; the changes file carries these as `prior` and `prior_stamp`, so
 * the engine keeps an exact key count and its expiry index without lookups (in a [[PriorMap]]: no
 * object per read; a view whose gets are cheap is asked at commit instead). With TTL
 * `OnReadAndWrite` it remembers the live keys read (touches), which the commit re-stamps.
 */
private[sparkstate] final class ChangeBuffer(expectedWrites: Int = 0) {
  import ChangeBuffer._

  // Sized for the store's previous epoch (the provider remembers it): growing a hash map of 250k
  // entries one doubling at a time cost a large dropDuplicates task as much as its lookups. Both
  // maps allocate their table at the first write, so a store that is only read pays nothing.
  private val pending = new ConcurrentHashMap[BytesKey, Array[Byte]](math.min(expectedWrites, MaxPresized))
  /** The pending writes in key order, once an ordered scan asked for it this epoch (else null). */
  @volatile private var sorted: ConcurrentSkipListMap[Array[Byte], Array[Byte]] = _
  /** The pending writes sorted by key as of the last write, cached for the commit (null: stale). */
  private var orderedSnapshot: SortedWrites = _
  private val priors = new PriorMap(math.min(expectedWrites, MaxPresized))
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
    if (priors.size < MaxRememberedReads) priors.put(key, HashBytesMap.hash(key), prior)
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

  /** The pending writes in key order (value, or [[Tombstone]] for a delete), cached until the next write. */
  def sortedWrites: SortedWrites = synchronized {
    if (orderedSnapshot == null) {
      val s = sorted
      orderedSnapshot = if (s != null) SortedWrites.fromOrdered(s) else SortedWrites.sort(pending)
    }
    orderedSnapshot
  }

  /** OnReadAndWrite touches of keys not written this epoch: (key, stored value read, stamp included). */
  def touchesNotWritten: IndexedSeq[(Array[Byte], Array[Byte])] = touched.synchronized {
    val out = scala.collection.mutable.ArrayBuffer.empty[(Array[Byte], Array[Byte])]
    val it = touched.entrySet().iterator()
    while (it.hasNext) {
      val e = it.next()
      if (!pending.containsKey(e.getKey)) out += ((e.getKey.bytes, e.getValue))
    }
    out.toIndexedSeq // indexed by writeArrow: not a List
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
    val writes = sortedWrites
    val touches = touchesNotWritten
    val nWrites = writes.size
    val total = nWrites + touches.length
    def keyAt(i: Int): Array[Byte] = if (i < nWrites) writes.keys(i) else touches(i - nWrites)._1
    /** Bytes of row i's value column: the value, a touch's stored value without its TTL stamp, 0 for a delete. */
    def valueLength(i: Int): Int =
      if (i < nWrites) { val v = writes.values(i); if (v eq Tombstone) 0 else v.length }
      else touches(i - nWrites)._2.length - TtlView.StampBytes
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
      /** `h`: the key's [[HashBytesMap.hash]] (writes carry it: the priors lookup does not hash again). */
      def setPrior(n: Int, k: Array[Byte], h: Int): Unit = {
        val p: Long = if (priorFromView != null) priorFromView(k) else priors.get(k, h)
        if (p == PriorMap.Missing) {
          prior.set(n, PriorUnknown)
          priorStamp.set(n, StampUnknown)
        } else if (p == PriorAbsent) {
          prior.set(n, 0)
          priorStamp.set(n, PriorAbsent)
        } else {
          prior.set(n, 1)
          priorStamp.set(n, if (p == PriorExists) StampUnknown else p)
        }
      }
      var start = 0
      while (start < total) {
        val end = math.min(total, start + BatchRows)
        val rows = end - start
        // Every vector sized exactly for this batch up front, so the unchecked setters never reallocate.
        var keyBytes = 0L
        var valueBytes = 0L
        var i = start
        while (i < end) {
          keyBytes += keyAt(i).length
          valueBytes += valueLength(i)
          i += 1
        }
        op.allocateNew(rows)
        prior.allocateNew(rows)
        priorStamp.allocateNew(rows)
        key.allocateNew(math.max(keyBytes, 1L), rows)
        value.allocateNew(math.max(valueBytes, 1L), rows)
        var n = 0
        i = start
        while (i < end) {
          val k = keyAt(i)
          key.set(n, k)
          if (i < nWrites) {
            val v = writes.values(i)
            if (v eq Tombstone) {
              op.set(n, OpDelete)
              value.setNull(n)
            } else {
              op.set(n, OpPut)
              value.set(n, v)
            }
            setPrior(n, k, writes.hashes(i))
          } else {
            val stored = touches(i - nWrites)._2
            op.set(n, OpTouch)
            value.set(n, stored, TtlView.StampBytes, stored.length - TtlView.StampBytes)
            setPrior(n, k, HashBytesMap.hash(k))
          }
          n += 1
          i += 1
        }
        root.setRowCount(rows)
        writer.writeBatch()
        root.clear()
        start = end
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
  /** Largest epoch a new buffer's maps are sized for up front (more grows them as before). */
  val MaxPresized: Int = 1 << 21
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

  /**
   * Sort the hashed pending writes. Stored keys start with their key group and a 32-bit hash, so their
   * first 8 bytes (as an unsigned big-endian long, zero-padded) almost always decide the order alone.
   * Each entry becomes one long: the high bits of that prefix, then its index in the low `bits` bits
   * (enough for every index), sign bit flipped so that a primitive signed sort is the unsigned order.
   * Entries whose kept prefix bits tie are then ordered by their whole keys. One `long[]` sort instead
   * of sorting objects with a comparator: no per-entry allocation, no pointer chasing per comparison.
   */
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
    val bits = math.max(1, 32 - Integer.numberOfLeadingZeros(math.max(n - 1, 1)))
    val indexMask = (1L << bits) - 1
    val packed = new Array[Long](n)
    var i = 0
    while (i < n) {
      packed(i) = (((prefix(keys0(i)) >>> bits) << bits) | i) ^ Long.MinValue
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
      if (runEnd - runStart > 1) sortRun(order, runStart, runEnd, keys0)
      runStart = runEnd
    }
    val keys = new Array[Array[Byte]](n)
    val hashes = new Array[Int](n)
    val values = new Array[Array[Byte]](n)
    i = 0
    while (i < n) {
      val j = order(i)
      keys(i) = keys0(j)
      hashes(i) = hashes0(j)
      values(i) = values0(j)
      i += 1
    }
    new SortedWrites(keys, hashes, values)
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

package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.File
import java.util.{Arrays => JArrays, Comparator}
import java.util.concurrent.{ConcurrentHashMap, ConcurrentSkipListMap}

/**
 * An epoch's uncommitted writes, kept so that reads see them (read-your-writes) and shipped to the
 * Python worker as one Arrow IPC file at `commit()`, in bounded memory.
 *
 * Layout. `pending` hashes the newest writes ([[BytesKey]]: the key's bytes and their hash, computed
 * once): a read of a pending write -- every row of every operator asks -- is one hash lookup, and a
 * write is O(1). Key order (unsigned bytes, RocksDB's order) is needed only by scans merged with an
 * ordered view and at commit, so it is built on demand: the first ordered scan of an epoch creates
 * `sorted`, a skip list every later write of the epoch also updates; a commit without one sorts the
 * keys once ([[sortedWrites]]). A skip list for every write cost a third of a dropDuplicates task's
 * time (its lookups compare byte arrays along O(log n) levels). Iterators of both maps are weakly
 * consistent: operators may put and remove while they iterate (eviction does), as the contract
 * requires. Writes are serialized on this object; reads of `pending` take no lock.
 *
 * It also remembers, for keys read from committed state this epoch, whether they existed and, with
 * TTL, the stamp of the value read; the changes file carries these as `prior` and `prior_stamp`, so
 * the engine keeps an exact key count and its expiry index without lookups (in a [[PriorMap]]: no
 * object per read; a view whose gets are cheap answers instead: `priorOf`). With TTL
 * `OnReadAndWrite` it remembers the live keys read (touches), which the commit re-stamps.
 *
 * Memory. What the heap holds (writes, priors, touches: [[memoryBytes]]) is reserved from the
 * executor's budget ([[MemoryBudget.Pending]]) as it grows. Past `limit`, or when the budget has no
 * room, it is spilled: written, in key order and with each key's prior, as one run of [[SpillRuns]]
 * (SST files ingested into a temporary RocksDB on local disk), and the heap starts empty again. A
 * read then asks the heap, then the runs (newest first), then committed state; scans merge the runs
 * in; the commit writes everything left into a last run and ships the runs' one ordered pass in
 * record batches ([[ChangesFileWriter]]), so no step holds the epoch. A spill replaces the heap maps
 * by new ones: scans already open keep iterating the old ones, which hold what the run holds.
 *
 * @param expectedWrites keys the store's previous epoch wrote: the maps are sized for it (up to `limit`)
 * @param priorOf        what committed state holds for a key (a view whose gets are a hash lookup), or
 *                       null: then reads remember it ([[notePrior]])
 * @param limit          heap bytes past which the writes spill
 * @param spillParent    the local directory spill runs go to (created at the first spill)
 */
private[sparkstate] final class ChangeBuffer(
    expectedWrites: Int,
    priorOf: Array[Byte] => Long,
    limit: Long,
    spillParent: File) {
  import ChangeBuffer._

  /** A buffer with the executor's default spill threshold (tests drive one directly). */
  def this(expectedWrites: Int) = this(expectedWrites, null, MemoryBudget.pendingPerStoreBytes, PythonWorker.baseDir)

  // Sized for the store's previous epoch (the provider remembers it), within what `limit` can hold:
  // growing a hash map of 250k entries one doubling at a time cost a large dropDuplicates task as much
  // as its lookups. Both maps allocate their table at the first write, so a store only read pays nothing.
  private val presized = math.max(0, math.min(expectedWrites.toLong, limit / PresizeBytesPerEntry).toInt)
  @volatile private var pending = new ConcurrentHashMap[BytesKey, Array[Byte]](presized)
  /** The pending writes in key order, once an ordered scan asked for it this epoch (else null). */
  @volatile private var sorted: ConcurrentSkipListMap[Array[Byte], Array[Byte]] = _
  /** The pending writes sorted by key as of the last write, cached for the commit (null: stale). */
  private var orderedSnapshot: SortedWrites = _
  private val priors = new PriorMap(presized)
  /** OnReadAndWrite point reads of live keys: key -> the stored (stamped) value that was read. */
  private var touched = new java.util.HashMap[BytesKey, Array[Byte]]()
  /** Heap bytes of `pending` and `touched` (the priors' are [[PriorMap.bytes]]). */
  private var bytes = 0L
  /** Bytes reserved from the executor's budget for what this buffer holds. */
  private var reserved = 0L
  @volatile private var spill: SpillRuns = _
  private var spillRuns = 0
  private var spilledBytes = 0L
  private var peak = 0L

  /** The pending value, [[Tombstone]] for a pending delete, or null if the key is untouched. */
  def lookup(key: Array[Byte]): Array[Byte] = {
    val v = pending.get(new BytesKey(key))
    val runs = spill
    if (v != null || runs == null) v
    else {
      val entry = runs.get(key)
      if (entry == null) null
      else SpillRuns.op(entry) match {
        case OpPut => SpillRuns.value(entry)
        case OpDelete => Tombstone
        case _ => null // a touch is a read, not a write: committed state answers
      }
    }
  }

  /**
   * Remember what a read of committed state found for `key`: [[PriorAbsent]], [[PriorExists]] (a value
   * without TTL stamp), or the stamp (>= 0) of the value read.
   */
  def notePrior(key: Array[Byte], prior: Long): Unit = synchronized {
    if (priors.size < MaxRememberedReads) {
      priors.put(key, HashBytesMap.hash(key), prior)
      reserve()
    }
  }

  /** Record an OnReadAndWrite read of the live committed value `stored` (stamp included) of `key`. */
  def touch(key: Array[Byte], stored: Array[Byte]): Unit = synchronized {
    if (touched.size < MaxRememberedReads && touched.put(new BytesKey(key), stored) == null) {
      bytes += key.length + stored.length + EntryOverhead
      reserve()
    }
  }

  def put(key: Array[Byte], value: Array[Byte]): Unit = synchronized {
    val old = pending.put(new BytesKey(key), value)
    val s = sorted
    if (s != null) s.put(key, value)
    orderedSnapshot = null
    bytes += value.length +
      (if (old == null) key.length + EntryOverhead + (if (s != null) SortedEntryOverhead else 0) else -old.length)
    reserve()
  }

  def remove(key: Array[Byte]): Unit = put(key, Tombstone)

  /** Keys this epoch wrote, as far as known: the heap's plus the entries spilled (a key spilled twice counts twice). */
  def writes: Long = pending.size + (if (spill == null) 0L else spill.entries)

  /** Whether part of the epoch was spilled to local disk. */
  def spilled: Boolean = spill != null

  /** Spill runs written this epoch, and their bytes on local disk (kept after [[clear]], for the metrics). */
  def spillCount: Int = spillRuns
  def spillBytes: Long = spilledBytes

  /** Heap bytes this buffer holds now. */
  def memoryBytes: Long = bytes + priors.bytes

  /** The most heap bytes it held this epoch. */
  def peakBytes: Long = math.max(peak, memoryBytes)

  /** The pending writes in key order (value, or [[Tombstone]] for a delete), cached until the next write. */
  def sortedWrites: SortedWrites = synchronized {
    if (orderedSnapshot == null) {
      val s = sorted
      orderedSnapshot = if (s != null) SortedWrites.fromOrdered(s) else SortedWrites.sort(pending)
    }
    orderedSnapshot
  }

  /** OnReadAndWrite touches of keys not written this epoch: (key, stored value read, stamp included). */
  def touchesNotWritten: IndexedSeq[(Array[Byte], Array[Byte])] = synchronized {
    val out = scala.collection.mutable.ArrayBuffer.empty[(Array[Byte], Array[Byte])]
    val it = touched.entrySet().iterator()
    while (it.hasNext) {
      val e = it.next()
      if (!pending.containsKey(e.getKey)) out += ((e.getKey.bytes, e.getValue))
    }
    out.toIndexedSeq // indexed by the callers: not a List
  }

  /**
   * Entries with `from <= key < until` (null bounds: open), for merging with a scan, deletes as
   * [[Tombstone]]: in key order if `ordered` (the first such call of an epoch builds the skip list),
   * else in hash order (the heap's writes, then the spilled writes the heap does not shadow).
   */
  def range(from: Array[Byte], until: Array[Byte], ordered: Boolean): java.util.Iterator[JEntry] = {
    val heap = pending
    val runs = spill
    if (!ordered) {
      val inHeap = unorderedRange(heap, from, until)
      if (runs == null) inHeap else new ConcatIterator(inHeap, new SpilledWrites(runs.scan(from, until), heap))
    } else {
      val all = ensureSorted()
      val view =
        if (from == null && until == null) all
        else if (until == null) all.tailMap(from, true)
        else if (from == null) all.headMap(until, false)
        else all.subMap(from, true, until, false)
      val inHeap = view.entrySet().iterator()
      if (runs == null) inHeap else new MergedWrites(inHeap, new SpilledWrites(runs.scan(from, until), null))
    }
  }

  private def ensureSorted(): ConcurrentSkipListMap[Array[Byte], Array[Byte]] = synchronized {
    if (sorted == null) {
      val s = new ConcurrentSkipListMap[Array[Byte], Array[Byte]](UnsignedOrder)
      val it = pending.entrySet().iterator()
      var n = 0L
      while (it.hasNext) {
        val e = it.next()
        s.put(e.getKey.bytes, e.getValue)
        n += 1
      }
      sorted = s
      // Counted now, reserved (or spilled) at the next write: a spill here would empty the heap
      // under the scan that asked for the list.
      bytes += n * SortedEntryOverhead
    }
    sorted
  }

  // ------------------------------------------------------------------------- memory and spills
  /**
   * Spill if the heap holds more than `limit`; else reserve what it holds from the executor's budget,
   * and spill if the budget has no room (unless this buffer holds too little to be worth a run).
   */
  private def reserve(): Unit = {
    val held = bytes + priors.bytes
    if (held > limit) spillHeap()
    else if (held > reserved) {
      val want = held - reserved + ReserveStep
      if (MemoryBudget.Pending.reserveForWrites(want)) reserved += want
      else if (held >= MinSpillBytes) spillHeap()
    }
  }

  /** Write the heap's writes and touches as one spill run, with their priors, and start the heap afresh. */
  private def spillHeap(): Unit = {
    peak = math.max(peak, memoryBytes)
    val writes = sortedWrites
    val touches = sortedTouches()
    if (writes.size > 0 || touches.nonEmpty) {
      if (spill == null) spill = new SpillRuns(spillParent)
      spill.writeRun { run =>
        foreachHeapEntry(writes, touches, (k, hash) => spilledPriorOf(k, hash)) { (k, op, bytes, offset, length, p) =>
          run.add(k, op, priorByte(p), priorStamp(p), bytes, offset, length)
        }
      }
      spillRuns = spill.count
      spilledBytes = spill.fileBytes
    }
    // New maps (the writes' sized for as many as the heap held): scans already open keep iterating
    // the old ones, which hold what the run holds.
    emptyHeap(math.max(presized, pending.size))
  }

  /** Starts the heap's writes, touches and priors afresh (`capacity`: the new writes map's) and gives back its reservation. */
  private def emptyHeap(capacity: Int): Unit = {
    pending = new ConcurrentHashMap[BytesKey, Array[Byte]](capacity)
    sorted = null
    orderedSnapshot = null
    priors.clear()
    touched = new java.util.HashMap[BytesKey, Array[Byte]]()
    bytes = 0
    MemoryBudget.Pending.release(reserved)
    reserved = 0
  }

  /**
   * The heap's `writes` and TTL `touches` merged in key order, each with its prior (`priorOf(key, hash)`):
   * `emit(key, op, bytes, offset, length, prior)`, where a put's bytes are its value, a delete's are
   * empty and a touch's are its stored value after the stamp.
   */
  private def foreachHeapEntry(writes: SortedWrites, touches: IndexedSeq[(Array[Byte], Array[Byte])],
                               priorOf: PriorLookup)(emit: HeapEntrySink): Unit = {
    var t = 0
    def emitTouch(): Unit = {
      val (k, stored) = touches(t)
      emit(k, OpTouch, stored, TtlView.StampBytes, stored.length - TtlView.StampBytes, priorOf(k, HashBytesMap.hash(k)))
      t += 1
    }
    var i = 0
    while (i < writes.size) {
      val k = writes.keys(i)
      while (t < touches.length && UnsignedOrder.compare(touches(t)._1, k) < 0) emitTouch()
      val v = writes.values(i)
      emit(k, if (v eq Tombstone) OpDelete else OpPut, v, 0, v.length, priorOf(k, writes.hashes(i)))
      i += 1
    }
    while (t < touches.length) emitTouch()
  }

  private def sortedTouches(): IndexedSeq[(Array[Byte], Array[Byte])] =
    touchesNotWritten.sortWith((a, b) => UnsignedOrder.compare(a._1, b._1) < 0)

  /** What committed state holds for `key` as the epoch knows it ([[PriorMap.Missing]]: unknown). */
  private def priorOfKey(key: Array[Byte], hash: Int): Long =
    if (priorOf != null) priorOf(key) else priors.get(key, hash)

  /**
   * [[priorOfKey]] for a key being spilled: a key written again after an earlier run took it (its
   * read was before that run, so the heap no longer remembers it) keeps the prior that run recorded.
   */
  private def spilledPriorOf(key: Array[Byte], hash: Int): Long = {
    val p = priorOfKey(key, hash)
    if (p != PriorMap.Missing || spill == null) p
    else {
      val entry = spill.get(key)
      if (entry == null) p else priorFromFields(SpillRuns.prior(entry), SpillRuns.priorStamp(entry))
    }
  }

  def clear(): Unit = synchronized {
    emptyHeap(16) // ConcurrentHashMap's default capacity
    if (spill != null) {
      spill.close()
      spill = null
    }
  }

  // ------------------------------------------------------------------------------- the commit
  /**
   * Write every pending change, and every touch of a key not written, as an Arrow IPC file (schema in
   * `spark_state/provider/protocol.py`) in key order. Returns the number of rows. Without a spill the
   * heap's writes are sorted once; with one, what the heap holds becomes the last run and the file is
   * one ordered pass over the runs (the newest run's entry of a key wins).
   */
  def writeArrow(file: File): Int = synchronized {
    val out = new ChangesFileWriter(file)
    try {
      if (spill != null) {
        spillHeap()
        val it = spill.scan(null, null)
        try {
          while (it.valid) {
            val e = it.value
            out.add(SpillRuns.op(e), it.key, e, SpillRuns.HeaderBytes, SpillRuns.valueLength(e),
              SpillRuns.prior(e), SpillRuns.priorStamp(e))
            it.next()
          }
        } finally it.close()
      } else {
        foreachHeapEntry(sortedWrites, sortedTouches(), (k, hash) => priorOfKey(k, hash)) { (k, op, bytes, offset, length, p) =>
          out.add(op, k, bytes, offset, length, priorByte(p), priorStamp(p))
        }
      }
      out.finish()
    } finally out.close()
  }
}

private[sparkstate] object ChangeBuffer {
  type JEntry = java.util.Map.Entry[Array[Byte], Array[Byte]]

  /**
   * What [[ChangeBuffer.foreachHeapEntry]] calls per entry. Its own type, not a `Function6`: Scala's
   * functions of six arguments are not specialized, so their `Int` and `Long` arguments were boxed for
   * every entry of every spill and commit (4% of a 10M-key batch's task time).
   */
  trait HeapEntrySink {
    def apply(key: Array[Byte], op: Int, bytes: Array[Byte], offset: Int, length: Int, prior: Long): Unit
  }

  /** What committed state holds for a key of the given hash, as [[ChangeBuffer.notePrior]] records it (unboxed, as above). */
  trait PriorLookup {
    def apply(key: Array[Byte], hash: Int): Long
  }

  /** Marks a pending delete (compared by identity). */
  val Tombstone: Array[Byte] = new Array[Byte](0)
  val OpPut = 0
  val OpDelete = 1
  /** An OnReadAndWrite read: the worker rewrites the value read with a new stamp. */
  val OpTouch = 2
  /** `prior` when unknown. */
  val PriorUnknown = -1
  /** `prior_stamp` when the stamp is unknown. */
  val StampUnknown = -1L
  /** [[notePrior]]: the key is absent from committed state (also its `prior_stamp`). */
  val PriorAbsent = -2L
  /** [[notePrior]]: the key exists, its value has no stamp (a version without TTL). */
  val PriorExists = -3L
  /**
   * The most read results an epoch remembers ([[notePrior]], [[touch]]): the bound and its reason are
   * the Python engine's (`spark_state.engine.overlay.WriteOverlay.MAX_REMEMBERED_READS`; a unit test
   * compares them). Their bytes are also charged to the budget as they are remembered.
   */
  val MaxRememberedReads = 1 << 21
  /**
   * Heap bytes a pending write takes besides its key and value bytes, on a 64-bit JVM with compressed
   * references (heaps under 32 GB): the map's node (32), the [[BytesKey]] wrapper (24), two array
   * headers (32) and their padding to 8 bytes (7 on average), and the table's slots (4 bytes each, a
   * table 1.3 to 2.7 times the entries: 8), as a heap histogram of a big dropDuplicates batch shows
   * them. Counting less lets the writes hold more heap than the budget gives them.
   */
  private val EntryOverhead = 104
  /** Heap bytes the skip list adds per pending write once an ordered scan built it (node, index nodes). */
  private val SortedEntryOverhead = 32
  /** Heap bytes per entry a new buffer's maps are presized with: `limit` / this entries at most. */
  private val PresizeBytesPerEntry = 160
  /** Budget is reserved this many bytes ahead of what the heap holds. */
  private val ReserveStep: Long = 1L << 20
  /** Smallest heap worth a spill run when the executor's budget, not `limit`, ran out. */
  private val MinSpillBytes: Long = 4L << 20

  val UnsignedOrder: Comparator[Array[Byte]] = new Comparator[Array[Byte]] {
    override def compare(a: Array[Byte], b: Array[Byte]): Int = JArrays.compareUnsigned(a, b)
  }

  /** Close what [[ChangeBuffer.range]] returned, if it holds a spill scan (a native iterator). */
  def closeRange(it: java.util.Iterator[_]): Unit = it match {
    case c: AutoCloseable => c.close()
    case _ =>
  }

  /** The changes file's `prior` of what [[notePrior]] records (or [[PriorMap.Missing]]). */
  def priorByte(p: Long): Int =
    if (p == PriorMap.Missing) PriorUnknown else if (p == PriorAbsent) 0 else 1

  /** The changes file's `prior_stamp` of what [[notePrior]] records (or [[PriorMap.Missing]]). */
  def priorStamp(p: Long): Long =
    if (p == PriorMap.Missing || p == PriorExists) StampUnknown else p

  /** What [[notePrior]] records (or [[PriorMap.Missing]]) of a changes-file row's `prior` and `prior_stamp`. */
  def priorFromFields(prior: Int, stamp: Long): Long =
    if (prior == PriorUnknown) PriorMap.Missing
    else if (prior == 0) PriorAbsent
    else if (stamp == StampUnknown) PriorExists
    else stamp

  /** Pending entries of `map` with `from <= key < until` (null: open), in hash order. */
  private def unorderedRange(map: java.util.Map[BytesKey, Array[Byte]], from: Array[Byte], until: Array[Byte])
      : java.util.Iterator[JEntry] =
    new java.util.Iterator[JEntry] {
      private val it = map.entrySet().iterator()
      private var nextEntry: JEntry = _
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
      override def next(): JEntry = {
        if (nextEntry == null) throw new NoSuchElementException("end of pending writes")
        val e = nextEntry
        advance()
        e
      }
    }
}

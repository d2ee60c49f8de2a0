package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.File

import com.fasterxml.jackson.databind.JsonNode

import org.apache.spark.internal.Logging

/**
 * The `hashmap` backend's views: the store's state lives in the executor's JVM heap, in a
 * [[HeapMap]] that operators read directly (a `get` is one hash lookup, no JNI, no copy).
 *
 * Invariants:
 *  - `current.map` holds version `current.top` (tagged with its commit id) exactly as the worker
 *    committed it (data keys only; TTL stamps included).
 *  - The undo of `current`, when set, holds for every key the commit of `top` changed its value as
 *    of `top - 1` (absent: [[HeapViews.Absent]]). A reader of `top - 1` (a task retried after its
 *    commit, the losing twin of a speculative pair) consults it first, so it never sees `top`.
 *  - The map is mutated only by a commit built on `top` (or `top - 1` is refused), and only while no
 *    other reader holds it: the commit applies its [[CommitDelta]] in place and rebuilds the undo.
 *    Otherwise the state is left as is for its readers and forgotten; the next load ships the
 *    version from the worker into a new map (the old one goes when its last reader releases).
 *  - Any version the views do not hold (another commit id: a restart elsewhere, an attempt on
 *    another executor won, TTL migrated every row) is shipped once by the worker as an Arrow file.
 *
 * Memory: every map and undo is charged to the heap maps' part of the executor's budget
 * ([[MemoryBudget.HeapMaps]], this store's `heap.maxBytes` in its place when set); a store that would
 * pass it fails its task with a message naming the conf instead of an OutOfMemoryError.
 * Durability stays with the worker (changelog, snapshots, retention in its RocksDB-backed store), so
 * checkpoints are the same as with the `rocksdb` backend and a query can switch at a restart.
 */
private[sparkstate] final class HeapViews(options: ViewOptions, describe: => String) extends StoreViews with Logging {
  import HeapViews._

  private var current: HeapState = _
  MemoryBudget.HeapMaps.storeOpened()
  private var closed = false

  def request(version: Long): ViewRequest = synchronized {
    // Version 0 is the empty state of every store (commit id ""): never shipped.
    if (version == 0) ViewRequest("", refresh = false)
    else ViewRequest(if (current == null) null else current.idOf(version), refresh = false)
  }

  def open(version: Long, loadReply: JsonNode): StateView = synchronized {
    val id = Json.text(loadReply, "commitId")
    val path = Json.text(loadReply, "heapPath")
    if (path.nonEmpty) {
      replace(load(new File(path), version, id))
    } else if (version == 0 && id.isEmpty && (current == null || current.idOf(0) != "")) {
      // A state releases what it holds when it is freed, so the empty map is charged too: without
      // this, every store that started from version 0 drove the executor-wide count below zero.
      val empty = HeapMap(options.prefixScans, 1024)
      MemoryBudget.HeapMaps.force(empty.bytes)
      replace(new HeapState(empty, 0, ""))
    } else if (current == null || current.idOf(version) != id) {
      throw new SparkStateException(s"spark-state: the worker did not ship version $version ($id) of $describe " +
        "although the JVM does not hold it; this is a bug")
    }
    current.acquire(version)
  }

  def committed(from: StateView, buffer: ChangeBuffer, reply: JsonNode): Unit = synchronized {
    val view = from.asInstanceOf[HeapView]
    val state = view.state
    val newVersion = view.version + 1
    val newId = Json.text(reply, "commitId")
    if (current != null && current.top == newVersion && current.topId == newId) return // already applied
    val delta = CommitDelta.fromCommit(buffer, reply)
    if ((state eq current) && view.version == state.top && delta.isDefined && state.readers == 1) {
      state.apply(delta.get, newId)
    } else if ((state eq current) && delta.isEmpty) {
      // The change cannot be rebuilt here (a spilled epoch, a TTL migration): the next load ships the
      // new version. Forget this one now, so its memory goes when its readers end instead of after
      // the next version is loaded beside it.
      replace(null)
    } else if ((state eq current) && state.readers > 1) {
      // Another reader holds this state and must keep seeing its version. The next load of the new
      // version finds it missing (idOf) and the worker ships it into a new map.
      logInfo(s"$describe: version $newVersion committed while another reader holds version ${state.top}; " +
        "the next load ships it from the worker")
    }
    // Otherwise (the worker's change cannot be rebuilt here, or this state is not current) nothing to do:
    // the next load names what it holds, and the worker ships whatever the JVM lacks.
  }

  override def checkWrite(buffer: ChangeBuffer): Unit =
    MemoryBudget.HeapMaps.check(buffer.memoryBytes, options.heapMaxBytes, s"${buffer.memoryBytes} bytes of pending writes of $describe")

  def memoryBytes: Long = synchronized { if (current == null) 0L else current.bytes }


  def close(): Unit = synchronized {
    replace(null)
    if (!closed) {
      closed = true
      MemoryBudget.HeapMaps.storeClosed()
    }
  }

  private def replace(next: HeapState): Unit = {
    if (current != null) current.retire()
    current = next
  }

  private def load(file: File, version: Long, id: String): HeapState = {
    val started = System.nanoTime()
    val map = HeapMap(options.prefixScans, 1024)
    var charged = 0L
    try {
      ArrowRows.foreach(file, withValues = true) { (k, v) =>
        map.put(k, v)
        if (map.bytes - charged > ChargeStep) {
          MemoryBudget.HeapMaps.charge(map.bytes - charged, options.heapMaxBytes, s"loading version $version of $describe into the heap")
          charged = map.bytes
        }
      }
      MemoryBudget.HeapMaps.charge(map.bytes - charged, options.heapMaxBytes, s"loading version $version of $describe into the heap")
      charged = map.bytes
    } catch {
      case e: Throwable =>
        MemoryBudget.HeapMaps.release(charged)
        throw e
    }
    logInfo(s"$describe: loaded version $version (${map.size} keys, ${map.bytes / 1048576} MB) into the heap " +
      s"in ${(System.nanoTime() - started) / 1000000} ms")
    new HeapState(map, version, id)
  }
}

private[sparkstate] object HeapViews {
  /** Charge the budget every this many bytes while a shipped version loads, to fail before the heap fills. */
  val ChargeStep: Long = 16L * 1024 * 1024

  /** Marks an undo entry of a key that did not exist before the commit. */
  val Absent: Array[Byte] = new Array[Byte](0)
}

/**
 * One map and what it can serve: `top`, and `top - 1` through the undo of the last commit applied.
 * Invariant: `charged` (initially `map.bytes`) is what this state has charged to [[MemoryBudget.HeapMaps]] --
 * its creator charges the map before constructing it -- and is released exactly once, when freed.
 *
 * The undo is kept as the commit applied it: three parallel arrays (key, its hash, its value as of
 * `top - 1` or [[HeapViews.Absent]]), filled in the same loop that writes the map. Only a reader of
 * `top - 1` needs to look keys up in it, and only a retried task or a speculative twin is one, so the
 * hash index over it is built on the first such reader ([[undoIndex]]) instead of at every commit
 * (that index had cost every commit a second hash-table insert per key).
 */
private[sparkstate] final class HeapState(val map: HeapMap, initialTop: Long, initialId: String) {
  @volatile var top: Long = initialTop
  @volatile var topId: String = initialId
  /** The undo of the commit of `top` (null: none): keys, their hashes, their values as of `top - 1`. */
  private var undoKeys: Array[Array[Byte]] = _
  private var undoHashes: Array[Int] = _
  private var undoValues: Array[Array[Byte]] = _
  /** The undo as a map, built by the first reader of `top - 1` (null until then). */
  private var undoMap: HashBytesMap = _
  private var undoId: String = _
  private var charged = map.bytes
  var readers = 0
  private var retired = false

  def bytes: Long = charged

  /** The commit id of `version` if this state can serve it, else null. */
  def idOf(version: Long): String = synchronized {
    if (retired) null
    else if (version == top) topId
    else if (version == top - 1 && undoKeys != null) undoId
    else null
  }

  def acquire(version: Long): HeapView = synchronized {
    if (version != top && (version != top - 1 || undoKeys == null)) {
      // Callers check idOf first; serving top for another version would be a stale or future read.
      throw new SparkStateException(s"spark-state: the heap state holds version $top" +
        (if (undoKeys != null) s" and ${top - 1}" else "") + s", not $version; this is a bug")
    }
    readers += 1
    new HeapView(this, version, if (version == top) null else undoIndex())
  }

  def released(): Unit = synchronized {
    readers -= 1
    if (readers == 0 && retired) free()
  }

  /**
   * Apply a commit on `top` in place; the caller made sure no other reader holds this state. The
   * commit is already durable in the worker, so the budget is charged without failing here: writes
   * were checked against it before they were shipped ([[HeapViews.checkWrite]]).
   */
  def apply(delta: CommitDelta, newId: String): Unit = synchronized {
    val n = delta.size
    val olds = new Array[Array[Byte]](n)
    var oldBytes = 0L
    var i = 0
    while (i < n) {
      val k = delta.keys(i)
      val h = delta.hashes(i)
      val v = delta.values(i)
      val old = if (v eq ChangeBuffer.Tombstone) map.removeHashed(k, h) else map.putHashed(k, h, v)
      olds(i) = if (old == null) HeapViews.Absent else { oldBytes += HeapMap.arrayBytes(old); old }
      i += 1
    }
    undoKeys = delta.keys
    undoHashes = delta.hashes
    undoValues = olds
    undoMap = null
    // The undo holds the old values (the keys are the map's own arrays) and three array slots per key.
    val newCharge = map.bytes + oldBytes + n.toLong * HashBytesMap.SlotBytes
    MemoryBudget.HeapMaps.force(newCharge - charged)
    charged = newCharge
    undoId = topId
    topId = newId
    top += 1
  }

  /** The undo as a map from key to its value as of `top - 1`, built on first use and charged then. */
  private def undoIndex(): HashBytesMap = {
    if (undoMap == null) {
      val index = new HashBytesMap(undoKeys.length)
      var i = 0
      while (i < undoKeys.length) {
        index.putHashed(undoKeys(i), undoHashes(i), undoValues(i))
        i += 1
      }
      MemoryBudget.HeapMaps.force(index.bytes)
      charged += index.bytes
      undoMap = index
    }
    undoMap
  }

  /** No longer current: free when the last reader releases. */
  def retire(): Unit = synchronized {
    retired = true
    if (readers == 0) free()
  }

  private def free(): Unit = {
    MemoryBudget.HeapMaps.release(charged)
    charged = 0
    undoKeys = null
    undoHashes = null
    undoValues = null
    undoMap = null
  }
}

/** A reader's view of a [[HeapState]] at `version` (`top`, or `top - 1` through `undo`). */
private[sparkstate] final class HeapView(val state: HeapState, val version: Long, undo: HashBytesMap) extends StateView {
  private var released = false

  def get(key: Array[Byte]): Array[Byte] = {
    if (undo != null) {
      val old = undo.get(key)
      if (old != null) return if (old eq HeapViews.Absent) null else old
    }
    state.map.get(key)
  }

  def scan(from: Array[Byte], until: Array[Byte]): ViewScan = {
    val main = state.map.scan(from, until)
    if (undo == null) main
    else new ViewScan {
      // The map's entries whose keys the undo does not cover, then the undo's old values.
      private var inUndo = false
      private var undoScan: ViewScan = _
      skip()
      private def skip(): Unit = {
        if (!inUndo) {
          while (main.valid && undo.get(main.key) != null) main.next()
          if (!main.valid) {
            inUndo = true
            undoScan = undo.scan(from, until)
          }
        }
        if (inUndo) while (undoScan.valid && (undoScan.value eq HeapViews.Absent)) undoScan.next()
      }
      def valid: Boolean = if (inUndo) undoScan.valid else main.valid
      def key: Array[Byte] = if (inUndo) undoScan.key else main.key
      def value: Array[Byte] = if (inUndo) undoScan.value else main.value
      def next(): Unit = {
        if (inUndo) undoScan.next() else main.next()
        skip()
      }
      def close(): Unit = {
        main.close()
        if (undoScan != null) undoScan.close()
      }
    }
  }

  def ordered: Boolean = false

  override def cheapGets: Boolean = true

  def memoryBytes: Long = state.bytes

  def release(): Unit = synchronized {
    if (!released) {
      released = true
      state.released()
    }
  }
}

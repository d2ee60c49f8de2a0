package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.{Arrays => JArrays}

import com.fasterxml.jackson.databind.JsonNode

import org.apache.spark.TaskContext
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._

/**
 * What a store of one version is made of, as [[ProviderCore]] opens it: the version's view and the
 * worker's load reply (with its TTL settings), the key codec and the value's field count. One value, so
 * that the line's `SparkStateStore` classes pass it on without repeating the list.
 */
private[sparkstate] final case class StoreParts(
    provider: ProviderCore,
    version: Long,
    db: StateView,
    codec: KeyCodec,
    valueFields: Int,
    loadReply: JsonNode,
    loadMs: Long,
    ttl: TtlView)

/**
 * One task's view of a store version, on every Spark line: reads from the version's [[StateView]]
 * (the backend's: a layered RocksDB view or the heap map), writes into a [[ChangeBuffer]], `commit()`
 * ships the buffer to the Python worker and then brings the provider's views up to date. Serves as
 * both the read store and, upgraded in place, the write store of aggregation-style operators (Spark
 * never releases the read store it upgrades, so there is only ever one object to finish).
 *
 * The class Spark sees, `SparkStateStore`, lives in the line's source folder: it implements the
 * line's `StateStore` signatures (column families or not, `StateStoreIterator` or a plain iterator)
 * with the methods here.
 *
 * TTL ([[TtlView]]): values of a stamped version carry an 8-byte last-access stamp that reads strip;
 * expired entries read as absent (NeverReturnExpired) or are returned (ReturnExpiredIfNotCleanedUp);
 * scans skip them and never reach the system keyspace (keys from 0xFF on: the expiry index and
 * format markers, which no view returns). Buffered writes are bare rows: the worker stamps them at
 * commit, and the views apply what the worker stored ([[CommitDelta]]).
 */
private[sparkstate] abstract class StoreCore(parts: StoreParts) {
  import StoreCore._

  val version: Long = parts.version
  private val provider = parts.provider
  private val db = parts.db
  private val codec = parts.codec
  private val valueFields = parts.valueFields
  private val loadReply = parts.loadReply
  private val loadMs = parts.loadMs
  private val ttl = parts.ttl

  /** Committed state's answer per key is asked of the view when written out, not remembered per read. */
  private val priorsFromView = db.cheapGets
  private val buffer = new ChangeBuffer(provider.lastEpochWrites,
    if (priorsFromView) (k: Array[Byte]) => committedPrior(k) else null,
    provider.spillThreshold, PythonWorker.baseDir)
  /** Scans not yet exhausted: their native iterators must close before the database can. */
  private val openScans = scala.collection.mutable.ArrayBuffer.empty[MergedScan]
  private var status: Status = Updating
  private var commitReply: JsonNode = _
  private var commitMs = 0L
  private var newVersion = -1L
  /** The view and the buffer were given up (see [[finish]]). */
  private var released = false

  def id: StateStoreId = provider.stateStoreId

  def isUpdating: Boolean = status == Updating

  /** The version this store committed (-1 before its commit). */
  protected def committedVersion: Long = newVersion

  // ---------------------------------------------------------------------------------- reads
  protected def readRow(key: UnsafeRow): UnsafeRow = {
    val k = codec.encode(key)
    val pending = buffer.lookup(k)
    if (pending != null) {
      if (pending eq ChangeBuffer.Tombstone) null else KeyCodec.valueRow(pending, valueFields)
    } else {
      val v = db.get(k)
      if (v == null) {
        if (!priorsFromView) buffer.notePrior(k, ChangeBuffer.PriorAbsent)
        null
      } else if (!ttl.stamped) {
        if (!priorsFromView) buffer.notePrior(k, ChangeBuffer.PriorExists)
        KeyCodec.valueRow(v, valueFields)
      } else {
        val stamp = TtlView.stampOf(v)
        if (!priorsFromView) buffer.notePrior(k, stamp)
        if (ttl.enabled && ttl.expired(stamp)) {
          if (ttl.returnExpired) KeyCodec.valueRow(v, TtlView.StampBytes, valueFields) else null
        } else {
          if (ttl.touches && stamp != ttl.nowMs) buffer.touch(k, v)
          KeyCodec.valueRow(v, TtlView.StampBytes, valueFields)
        }
      }
    }
  }

  /** Every entry: the view merged with this store's pending writes. */
  protected def scanAll(): MergedScan = scan(null, null)

  /** The entries whose leading key columns equal `prefixKey`'s (prefix-scan stores). */
  protected def scanPrefix(prefixKey: UnsafeRow): MergedScan = {
    val from = codec.encodePrefix(prefixKey)
    scan(from, KeyCodec.prefixEnd(from))
  }

  private def scan(from: Array[Byte], until: Array[Byte]): MergedScan = {
    val merged = new MergedScan(db, buffer, from, until, codec, valueFields, ttl)
    openScans.synchronized(openScans += merged)
    merged
  }

  // --------------------------------------------------------------------------------- writes
  protected def writeRow(key: UnsafeRow, value: UnsafeRow): Unit = {
    checkUpdating("put")
    provider.views.checkWrite(buffer)
    buffer.put(codec.encode(key), KeyCodec.valueBytes(value))
  }

  protected def deleteRow(key: UnsafeRow): Unit = {
    checkUpdating("remove")
    buffer.remove(codec.encode(key))
  }

  def commit(): Long = {
    checkUpdating("commit")
    val started = System.nanoTime()
    try {
      provider.views.checkWrite(buffer) // nothing is durable yet: fail now rather than after the commit
      commitReply = provider.commitChanges(this, buffer, ttl.nowMs)
      closeScans()
      // While this store still holds its view: a heap view may then apply the commit in place.
      provider.views.committed(db, buffer, commitReply)
    } catch {
      case e: Throwable =>
        finish(Aborted)
        throw e
    }
    commitMs = (System.nanoTime() - started) / 1000000
    newVersion = Json.long(commitReply, "version")
    if (newVersion != version + 1) {
      finish(Aborted)
      throw new SparkStateException(s"spark-state: committing on top of version $version produced version " +
        s"$newVersion instead of ${version + 1}")
    }
    finish(Committed)
    provider.reportCommit(newVersion)
    newVersion
  }

  /** What the loaded version holds for `key`, as [[ChangeBuffer.notePrior]] records it (with a view whose gets are cheap). */
  private def committedPrior(key: Array[Byte]): Long = {
    val v = db.get(key)
    if (v == null) ChangeBuffer.PriorAbsent
    else if (!ttl.stamped) ChangeBuffer.PriorExists
    else TtlView.stampOf(v)
  }

  def abort(): Unit = if (status == Updating) finish(Aborted)

  /** The reader is done without a commit (`ReadStateStore.release`, 4.1+). */
  protected def releaseStore(): Unit = if (status == Updating) finish(Released)

  def hasCommitted: Boolean = status == Committed

  private def closeScans(): Unit = openScans.synchronized {
    openScans.foreach(_.close())
    openScans.clear()
  }

  /**
   * End the epoch. A committed store stays readable until its task ends, as version `version + 1`
   * (the view and the epoch's writes): Spark 3.5's complete-mode aggregation iterates the store
   * after committing it, as Spark's HDFS provider allows. Outside a task (the ops bridge, tests
   * driving a store directly) and on abort or release, the view goes now.
   */
  private def finish(next: Status): Unit = {
    val held = status == Updating
    status = next
    val ctx = if (next == Committed && held) TaskContext.get() else null
    if (ctx != null) ctx.addTaskCompletionListener[Unit](_ => releaseResources(held))
    else releaseResources(held)
  }

  private def releaseResources(held: Boolean): Unit = synchronized {
    closeScans()
    if (held && !released) db.release()
    released = true
    buffer.clear()
  }

  // -------------------------------------------------------------------------------- metrics
  def metrics: StateStoreMetrics = {
    val reply = if (commitReply != null) commitReply else loadReply
    // What the JVM's view of the version holds (rocksdb: its layers; hashmap: the state), and the most
    // this epoch's pending writes held in the heap.
    val heapBytes = db.memoryBytes + buffer.peakBytes
    val custom = Map[StateStoreCustomMetric, Long](
      ProviderCore.CommitTimeMetric -> commitMs,
      ProviderCore.LoadTimeMetric -> loadMs,
      ProviderCore.ChangelogBytesMetric -> Json.long(reply, "commit", "changelog_bytes"),
      ProviderCore.SnapshotBytesMetric -> Json.long(reply, "commit", "snapshot_bytes_uploaded"),
      ProviderCore.SnapshotFilesUploadedMetric -> Json.long(reply, "commit", "snapshot_files_uploaded"),
      ProviderCore.SnapshotFilesReusedMetric -> Json.long(reply, "commit", "snapshot_files_reused"),
      ProviderCore.RestoresMetric -> (if (Json.text(loadReply.path("restore"), "mode") == "restore") 1L else 0L),
      ProviderCore.LoadFilesFetchedMetric -> Json.long(loadReply, "restore", "snapshot_files_downloaded"),
      ProviderCore.LoadBytesFetchedMetric -> Json.long(loadReply, "restore", "snapshot_bytes_downloaded"),
      ProviderCore.LoadFilesLinkedMetric -> Json.long(loadReply, "restore", "snapshot_files_linked"),
      ProviderCore.ChangelogBytesReplayedMetric -> Json.long(loadReply, "restore", "changelog_bytes_replayed"),
      ProviderCore.TtlExpiredMetric -> Json.long(commitReply, "ttl", "expired"),
      ProviderCore.TtlMigratedMetric -> Json.long(commitReply, "ttl", "migrated"),
      ProviderCore.ViewExportsMetric ->
        (if (Json.text(loadReply, "viewPath").nonEmpty || Json.text(loadReply, "heapPath").nonEmpty) 1L else 0L),
      ProviderCore.SpillsMetric -> buffer.spillCount,
      ProviderCore.SpilledBytesMetric -> buffer.spillBytes,
      ProviderCore.HeapBytesMetric -> heapBytes)
    // This store's share of its worker's RocksDB memory (both backends keep the worker's store in
    // RocksDB; see provider/service.py), and its heap bytes.
    StateStoreMetrics(Json.long(reply, "numKeys"), Json.long(reply, "memoryBytes") + heapBytes, custom)
  }

  private def checkUpdating(op: String): Unit = {
    if (status != Updating) {
      throw new SparkStateException(s"spark-state: cannot $op on version $version of ${provider.describe}: " +
        s"the store was already ${status.toString.toLowerCase}")
    }
  }

  protected def unsupported(what: String): Nothing =
    throw new UnsupportedOperationException(s"spark-state does not support $what yet " +
      "(used by transformWithState and stream-stream join state format v3+, which Spark only enables " +
      "for its own RocksDB provider)")

  override def toString: String = s"SparkStateStore[${provider.describe}, version $version, $status]"
}

private[sparkstate] object StoreCore {
  sealed trait Status
  case object Updating extends Status
  case object Committed extends Status
  case object Aborted extends Status
  case object Released extends Status
}

/**
 * Entries of `from <= key < until` of the view merged with the pending writes (pending wins;
 * tombstones hide). Tolerates puts and removes during iteration: the view is immutable while held,
 * and the buffer side is a weakly consistent skip-list iterator. An ordered view is merged in one
 * pass; an unordered one (the heap map) yields its entries whose keys the buffer does not hold, then
 * the buffer's. Operators never rely on the order (Spark's HDFS provider scans a hash map too).
 * Values are read through `ttl`: stamps stripped, expired entries skipped unless
 * ReturnExpiredIfNotCleanedUp. Scans do not count as reads for OnReadAndWrite (eviction and
 * complete-mode scans visit every key).
 */
private[sparkstate] final class MergedScan(
    db: StateView,
    buffer: ChangeBuffer,
    from: Array[Byte],
    until: Array[Byte],
    codec: KeyCodec,
    valueFields: Int,
    ttl: TtlView) extends Iterator[UnsafeRowPair] {
  // Both sides are opened at the first `hasNext`/`next`, not here: Spark's deduplication asks for an
  // iterator on every batch and, without a watermark, never reads it (`EvictionIterator` checks its
  // predicate first), and opening the buffer's side sorts every pending write (a third of such a
  // task's time). So a scan sees the store as it is at its first read.
  private var it: ViewScan = _
  private val ordered = db.ordered
  private var pending: java.util.Iterator[java.util.Map.Entry[Array[Byte], Array[Byte]]] = _
  private var pendingEntry: java.util.Map.Entry[Array[Byte], Array[Byte]] = _
  private var nextPair: UnsafeRowPair = _
  private var opened = false
  private var closed = false

  private def open(): Unit = {
    opened = true
    it = db.scan(from, until)
    pending = buffer.range(from, until, ordered)
    pendingEntry = nextPending()
  }

  private def nextPending(): java.util.Map.Entry[Array[Byte], Array[Byte]] =
    if (pending.hasNext) pending.next() else null

  private def dbValid: Boolean = !closed && it.valid

  override def hasNext: Boolean = {
    if (!opened && !closed) open()
    if (nextPair == null && !closed) advance()
    nextPair != null
  }

  override def next(): UnsafeRowPair = {
    if (!hasNext) throw new NoSuchElementException("end of spark-state scan")
    val p = nextPair
    nextPair = null
    p
  }

  /**
   * Which side the next entry comes from. Decided by explicit cases, never by a comparison's
   * magnitude: `Arrays.compareUnsigned` returns the difference of the first differing bytes (any
   * value in -255..255), so a sentinel such as "2" would collide with real orders and drop entries.
   */
  private def advance(): Unit = {
    while (nextPair == null) {
      val dbHas = dbValid
      val pendingHas = pendingEntry != null
      if (!dbHas && !pendingHas) {
        close()
        return
      }
      if (!dbHas) takePending(sameKeyInView = false)
      else if (!ordered) {
        // Unordered view (the heap map): its entries first, minus the keys the buffer holds, whose
        // entries (or tombstones) come from the buffer once the view is exhausted.
        if (buffer.lookup(it.key) != null) it.next() else takeView()
      } else if (!pendingHas) takeView()
      else {
        val order = JArrays.compareUnsigned(it.key, pendingEntry.getKey)
        if (order < 0) takeView() else takePending(sameKeyInView = order == 0)
      }
    }
  }

  private def takeView(): Unit = {
    val v = it.value
    val k = it.key
    it.next()
    if (!(ttl.hidesExpired && ttl.expiredValue(v))) {
      nextPair = new UnsafeRowPair(codec.decode(k), KeyCodec.valueRow(v, ttl.valueOffset, valueFields))
    }
  }

  /** The next pending write wins; `sameKeyInView`: the view's current entry has its key and is skipped. */
  private def takePending(sameKeyInView: Boolean): Unit = {
    val e = pendingEntry
    pendingEntry = nextPending()
    if (sameKeyInView) it.next()
    if (!(e.getValue eq ChangeBuffer.Tombstone)) {
      nextPair = new UnsafeRowPair(codec.decode(e.getKey), KeyCodec.valueRow(e.getValue, valueFields))
    }
  }

  def close(): Unit = if (!closed) {
    closed = true
    if (opened) {
      it.close()
      ChangeBuffer.closeRange(pending) // a spill scan is a native iterator
    }
  }
}

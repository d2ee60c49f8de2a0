package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.{Arrays => JArrays}

import com.fasterxml.jackson.databind.JsonNode
import org.rocksdb.{Options, ReadOptions, RocksDB}

import org.apache.spark.internal.Logging

/**
 * The `rocksdb` backend's views: an exported, immutable RocksDB checkpoint of some version `b` (the
 * [[RocksBase]]), with the epochs committed since then layered over it in memory ([[Layer]]s
 * `b+1 .. top`, each the [[CommitDelta]] the worker made durable). A reader of version `v` sees the
 * base and the layers up to `v` only, newest first; so a reader of `v` never sees `v+1`, and a
 * task retried after its commit reads `v` again from the same objects.
 *
 * Why layers: exporting a checkpoint per version would flush the worker's memtable every epoch (one
 * new L0 file per epoch and partition, feeding compaction for the query's life) and make the JVM open
 * a new read-only database, all SST files, per version. The next load asks for a fresh export only
 * when the layers pass `rocksdb.viewLayers.maxEpochs` or `.maxBytes` ([[ViewOptions]]): one flush per
 * refresh. The stale-read trap of a RocksDB secondary (a replayed memtable shadowing newer flushed
 * values) cannot happen: the base never changes once opened, and layers are immutable.
 *
 * The chain of a store is an immutable value ([[Chain]]); a commit or refresh replaces it, and a
 * reader keeps the chain it opened. A base is closed when no chain and no reader uses it.
 */
private[sparkstate] final class RocksViews(options: ViewOptions, describe: => String)
  extends StoreViews with MemoryBudget.Reclaimable with Logging {
  private var chain: Chain = _
  /** Budget reserved for the layers of `chain`. */
  private var reservedBytes = 0L

  def request(version: Long): ViewRequest = synchronized {
    if (version == 0) ViewRequest("", refresh = false) // the empty state: nothing to export
    else if (chain == null) ViewRequest(null, refresh = false)
    else {
      val held = chain.idOf(version)
      ViewRequest(held, refresh = held != null && version == chain.top && chain.exceeds(options))
    }
  }

  def open(version: Long, loadReply: JsonNode): StateView = synchronized {
    val id = Json.text(loadReply, "commitId")
    val path = Json.text(loadReply, "viewPath")
    if (path.nonEmpty) {
      replace(Chain(new RocksBase(path), version, id, Vector.empty))
    } else if (version == 0 && id.isEmpty && (chain == null || chain.idOf(0) != "")) {
      replace(Chain(null, 0, "", Vector.empty))
    } else if (chain == null || chain.idOf(version) != id) {
      throw new SparkStateException(s"spark-state: the worker did not export version $version ($id) of $describe " +
        "although the JVM does not hold it; this is a bug")
    }
    new LayeredView(chain, version)
  }

  def committed(from: StateView, buffer: ChangeBuffer, reply: JsonNode): Unit = synchronized {
    val view = from.asInstanceOf[LayeredView]
    // Only a commit on the newest version held extends the chain. Anything else (a retry of an older
    // version, a change the JVM cannot rebuild) leaves it: the next load names the commit id held for
    // the version it needs, and the worker exports whatever the JVM lacks.
    // A layer is heap the executor's budget must have room for ([[MemoryBudget.Pending]]); without it
    // the chain stays as it is, and the next load exports the new version. Pending writes that find
    // no room take it back ([[reclaim]]).
    if (chain != null && chain.top == view.version && chain.idOf(view.version) == view.chain.idOf(view.version)) {
      CommitDelta.fromCommit(buffer, reply).foreach { delta =>
        val layer = new Layer(view.version + 1, Json.text(reply, "commitId"), delta)
        if (MemoryBudget.Pending.tryReserve(layer.bytes)) {
          reservedBytes += layer.bytes
          chain = chain.plus(layer)
          MemoryBudget.Pending.holding(this)
        }
      }
    }
  }

  def memoryBytes: Long = synchronized { if (chain == null) 0L else chain.layerBytes }


  def close(): Unit = synchronized(replace(null))

  /**
   * Drop the layers (their reservation goes back to the budget): the chain keeps its base, so the
   * next load of a newer version asks the worker for an export. Readers that hold the old chain keep
   * reading it until their task ends.
   */
  def reclaim(): Unit = synchronized {
    if (chain != null && chain.layers.nonEmpty) {
      replace(chain.copy(layers = Vector.empty))
      logDebug(s"$describe: read view's layers reclaimed for pending writes (now version ${chain.top})")
    }
  }

  private def replace(next: Chain): Unit = {
    // Every replacement starts without layers: what the old chain's layers reserved goes back.
    MemoryBudget.Pending.release(reservedBytes)
    MemoryBudget.Pending.notHolding(this)
    reservedBytes = 0
    if (chain != null && chain.base != null && (next == null || (next.base ne chain.base))) chain.base.close()
    if (next != null && next.base != null && chain != null && chain.top > next.top) {
      logInfo(s"$describe: read view replaced by version ${next.top} (was ${chain.top})")
    }
    chain = next
  }
}

/** An immutable base (null: the empty state) at `baseVersion` with layers `baseVersion+1 .. top`. */
private[sparkstate] final case class Chain(base: RocksBase, baseVersion: Long, baseId: String, layers: Vector[Layer]) {
  val top: Long = baseVersion + layers.size
  val layerBytes: Long = layers.iterator.map(_.bytes).sum

  /** The commit id of `version` if this chain holds it, else null. */
  def idOf(version: Long): String =
    if (version == baseVersion) baseId
    else if (version > baseVersion && version <= top) layers((version - baseVersion - 1).toInt).id
    else null

  def plus(layer: Layer): Chain = copy(layers = layers :+ layer)

  def exceeds(options: ViewOptions): Boolean = layers.size >= options.layerEpochs || layerBytes > options.layerBytes
}

/**
 * One committed epoch's changes, immutable: keys sorted (binary search for scans) and hashed (gets).
 *
 * The hash index is a [[SlotIndex]] (one `long` per slot: hash and key index), built from the hashes
 * the delta carries (no key or value array is touched): building the layer of a 250k-key epoch was
 * the largest JVM cost of a large dropDuplicates commit, all of it cache misses. `bytes` is the
 * delta's estimate of its arrays plus this layer's own tables.
 */
private[sparkstate] final class Layer(val version: Long, val id: String, delta: CommitDelta) {
  val keys: Array[Array[Byte]] = delta.keys
  val values: Array[Array[Byte]] = delta.values
  private val table: Array[Long] = new Array[Long](HashBytesMap.tableSize(keys.length))
  locally {
    var i = 0
    while (i < keys.length) {
      SlotIndex.insert(table, delta.hashes(i), i)
      i += 1
    }
  }
  val bytes: Long = table.length * 8L + keys.length * 12L + delta.dataBytes

  /** The value this epoch wrote for `key` ([[ChangeBuffer.Tombstone]]: deleted), or null if untouched. */
  def get(key: Array[Byte]): Array[Byte] = {
    val h = HashBytesMap.hash(key)
    val mask = table.length - 1
    var s = h & mask
    var e = table(s)
    while (e != 0L) {
      if (SlotIndex.hashOf(e) == h) {
        val i = SlotIndex.entryOf(e)
        if (JArrays.equals(keys(i), key)) return values(i)
      }
      s = (s + 1) & mask
      e = table(s)
    }
    null
  }

  def scan(from: Array[Byte], until: Array[Byte]): ViewScan = new ViewScan {
    private var i = if (from == null) 0 else lowerBound(from)
    def valid: Boolean = i < keys.length && (until == null || JArrays.compareUnsigned(keys(i), until) < 0)
    def key: Array[Byte] = keys(i)
    def value: Array[Byte] = values(i)
    def next(): Unit = i += 1
    def close(): Unit = i = keys.length
  }

  private def lowerBound(k: Array[Byte]): Int = {
    var lo = 0
    var hi = keys.length
    while (lo < hi) {
      val mid = (lo + hi) >>> 1
      if (JArrays.compareUnsigned(keys(mid), k) < 0) lo = mid + 1 else hi = mid
    }
    lo
  }
}

/** A reader's view of `version` through `chain`: the layers up to `version`, then the base. */
private[sparkstate] final class LayeredView(val chain: Chain, val version: Long) extends StateView {
  private val visible: Array[Layer] = chain.layers.take((version - chain.baseVersion).toInt).toArray
  private var released = false
  if (chain.base != null) chain.base.acquire()

  def get(key: Array[Byte]): Array[Byte] = {
    var i = visible.length - 1
    while (i >= 0) {
      val v = visible(i).get(key)
      if (v != null) return if (v eq ChangeBuffer.Tombstone) null else v
      i -= 1
    }
    if (chain.base == null) null else chain.base.get(key)
  }

  def scan(from: Array[Byte], until: Array[Byte]): ViewScan = {
    val base = if (chain.base == null) ViewScan.Empty else chain.base.scan(from, until)
    if (visible.isEmpty) base
    else new MergingScan(base +: visible.map(_.scan(from, until)))
  }

  def ordered: Boolean = true

  /**
   * Without an exported base (the query's first versions: the empty state and the epochs layered on
   * it), a get is a few hash probes at most -- none for version 0 -- so the commit asks this view what
   * committed state held for each written key, and reads need not remember it (a map entry per read).
   */
  override def cheapGets: Boolean = chain.base == null && visible.length <= LayeredView.CheapLayers

  def memoryBytes: Long = chain.layerBytes

  def release(): Unit = synchronized {
    if (!released) {
      released = true
      if (chain.base != null) chain.base.release()
    }
  }
}

private[sparkstate] object LayeredView {
  /** Most layers (and no base) for which [[LayeredView.cheapGets]] holds: each is one hash probe per get. */
  val CheapLayers = 4
}

/**
 * Merges sorted scans, the last one newest: for each key the newest source's value wins, and a
 * [[ChangeBuffer.Tombstone]] there hides the key. Few sources (a base and a bounded number of layers),
 * so the minimum is found by a linear pass.
 */
private[sparkstate] final class MergingScan(sources: Array[ViewScan]) extends ViewScan {
  private var k: Array[Byte] = _
  private var v: Array[Byte] = _
  advance()

  private def advance(): Unit = {
    k = null
    while (k == null) {
      var min: Array[Byte] = null
      var winner = -1
      var i = 0
      while (i < sources.length) {
        val s = sources(i)
        if (s.valid) {
          val c = if (min == null) -1 else JArrays.compareUnsigned(s.key, min)
          if (c <= 0) { // equal keys: the later (newer) source wins
            min = s.key
            winner = i
          }
        }
        i += 1
      }
      if (min == null) return
      val value = sources(winner).value
      i = 0
      while (i < sources.length) {
        val s = sources(i)
        if (s.valid && JArrays.equals(s.key, min)) s.next()
        i += 1
      }
      if (!(value eq ChangeBuffer.Tombstone)) {
        k = min
        v = value
      }
    }
  }

  def valid: Boolean = k != null
  def key: Array[Byte] = k
  def value: Array[Byte] = v
  def next(): Unit = advance()
  def close(): Unit = {
    sources.foreach(_.close())
    k = null
  }
}

/**
 * A RocksDB checkpoint of one committed version that the worker exported (hard-linked immutable SST
 * files, no write-ahead log), opened read-only: reads are local JNI calls (~2 us), never cross-process,
 * and the database cannot change under its readers.
 *
 * Not a RocksDB *secondary* tailing the worker's live database: after the primary flushes, a
 * secondary keeps the memtable it replayed from the old log, which shadows the newer values in the
 * flushed SST -- stale reads (see spark_state/provider/service.py).
 *
 * All table files are opened at open time (max_open_files = -1), so the worker may delete the
 * directory once a newer export exists: open handles keep the files readable. Closing is deferred
 * while readers use the base, because closing a RocksDB under a reader crashes the JVM.
 */
private[sparkstate] final class RocksBase(val path: String) {

  private val options = new Options()
    .setMaxOpenFiles(-1)
    .setTableFormatConfig(RocksResources.tableConfig)
    .setLogger(RocksResources.silentLogger) // no LOG file inside the exported directory
  private val db: RocksDB = RocksDB.openReadOnly(options, path)
  private var users = 0
  private var closeRequested = false
  private var closed = false

  def get(key: Array[Byte]): Array[Byte] = db.get(key)

  /**
   * Entries with `from <= key < until` (null: unbounded). RocksDB itself stops every iterator before
   * the engine's system keyspace (keys from 0xFF on: the TTL expiry index and format markers), so
   * those never reach an operator or the state reader, at no per-entry cost.
   */
  def scan(from: Array[Byte], until: Array[Byte]): ViewScan =
    RocksScan(db, new ReadOptions().setFillCache(false).setIterateUpperBound(RocksResources.systemKeyspaceStart),
      from, until)

  def acquire(): Unit = synchronized {
    if (closed) throw new SparkStateException(s"spark-state: the read view $path is closed")
    users += 1
  }

  def release(): Unit = synchronized {
    users -= 1
    if (users == 0 && closeRequested) doClose()
  }

  def close(): Unit = synchronized {
    closeRequested = true
    if (users == 0) doClose()
  }

  private def doClose(): Unit = if (!closed) {
    closed = true
    db.close()
    options.close()
  }
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import com.fasterxml.jackson.databind.JsonNode

/**
 * One committed version of a store, as one reader (a task's store) sees it. Invariant: what a view
 * returns never changes while its reader holds it -- in particular a reader of version v never sees
 * what version v+1 wrote, even when v+1 is committed while the reader is open (a speculative or
 * retried attempt of the same batch on this executor).
 *
 * Values are the stored bytes (with the 8-byte TTL stamp when the version is stamped); only data keys
 * are visible (never the engine's system keyspace, keys from 0xFF on).
 */
private[sparkstate] trait StateView {
  def version: Long

  /** The stored value of `key`, or null. */
  def get(key: Array[Byte]): Array[Byte]

  /** Entries with `from <= key < until` (null: unbounded). In key order iff [[ordered]]. */
  def scan(from: Array[Byte], until: Array[Byte]): ViewScan

  /** Whether [[scan]] returns keys in unsigned byte order (merged scans use it; operators never need it). */
  def ordered: Boolean

  /**
   * Whether a [[get]] costs no more than a hash lookup (the heap map), so the commit asks the view what
   * committed state held for every written key instead of each read remembering it.
   */
  def cheapGets: Boolean = false

  /** JVM heap bytes this view's state occupies (shared with other readers of the same store). */
  def memoryBytes: Long

  /** The reader is done. Resources are reference counted: they go when their last reader releases. */
  def release(): Unit
}

/** A cursor over entries of a [[StateView]]: `while (s.valid) { s.key; s.value; s.next() }`. */
private[sparkstate] trait ViewScan {
  def valid: Boolean
  def key: Array[Byte]
  def value: Array[Byte]
  def next(): Unit
  def close(): Unit
}

private[sparkstate] object ViewScan {
  val Empty: ViewScan = new ViewScan {
    def valid = false
    def key: Array[Byte] = throw new NoSuchElementException
    def value: Array[Byte] = throw new NoSuchElementException
    def next(): Unit = ()
    def close(): Unit = ()
  }
}

/**
 * What the JVM asks of the worker's `load`: `held` is the commit id of the requested version that the
 * JVM can already serve (null: none, the worker must export the version); `refresh` asks for a fresh
 * export even so (a layered RocksDB view that grew past its bound).
 */
private[sparkstate] final case class ViewRequest(held: String, refresh: Boolean) {
  def toJson: String = {
    val node = Json.obj()
    if (held == null) node.putNull("held") else node.put("held", held)
    node.put("refresh", refresh)
    Json.write(node)
  }
}

/**
 * The versions of one store the JVM can serve, for one backend (chosen per store from the
 * `backend` conf by [[StoreViews.forBackend]]):
 *
 *  - `rocksdb` ([[RocksViews]]): an exported RocksDB checkpoint of some version, opened read-only, with
 *    the epochs committed since layered over it in memory; refreshed from the worker when the layers
 *    exceed a bound, not per version.
 *  - `hashmap` ([[HeapViews]]): the state itself in a JVM hash map, updated in place at commit.
 *
 * The worker owns durability either way: the JVM applies a commit to its views only after the
 * worker made it durable, and only what the worker says the commit changed ([[CommitDelta]]).
 * Every version the views hold is tagged with its commit id (the manifest's, unique per commit
 * attempt); a load names the commit id of the version it loaded, so the JVM never serves content
 * of another attempt or lineage: on any mismatch the worker exports the version again.
 *
 * Thread-safety: implementations are safe for concurrent use (tasks of one store may overlap:
 * retries, zombie attempts; maintenance closes).
 */
private[sparkstate] trait StoreViews {
  /** What to send with the worker's load of `version`. */
  def request(version: Long): ViewRequest

  /** A view of `version` for one reader, from what the views hold or from the export in `loadReply`. */
  def open(version: Long, loadReply: JsonNode): StateView

  /**
   * A store that read `from` committed; the worker's commit reply is `reply` and the epoch's writes
   * are in `buffer`. Bring the views up to date with the new version, or forget what they can no
   * longer serve (the next load then exports). Called while the committing reader still holds `from`.
   */
  def committed(from: StateView, buffer: ChangeBuffer, reply: JsonNode): Unit

  /** Checked before each buffered write: fails the task with a clear message if memory would run out. */
  def checkWrite(buffer: ChangeBuffer): Unit = ()

  /** JVM heap bytes held for this store (all versions). */
  def memoryBytes: Long


  def close(): Unit
}

private[sparkstate] object StoreViews {
  val RocksDB = "rocksdb"
  val HashMap = "hashmap"

  /**
   * The views of a store whose `backend` conf is `backend` (blanks trimmed). The rule is Python's
   * (`EngineConfig`, from `spark_state/options.py`), which `spark_state.configure` and the worker apply;
   * it is checked here only because the views are chosen at init, before the worker is asked, with
   * the same values and the same message.
   */
  def forBackend(backend: String, options: ViewOptions, describe: => String): StoreViews = backend match {
    case RocksDB => new RocksViews(options, describe)
    case HashMap => new HeapViews(options, describe)
    case other => throw new IllegalArgumentException(s"option '${ProviderCore.ConfPrefix}backend' must be " +
      s"one of $RocksDB, $HashMap, got '$other'")
  }
}

/**
 * Tunables of the views, from the provider's confs (`spark.sql.streaming.stateStore.sparkState.` +
 * the names below; checked by `spark_state/provider/options.py` too).
 *
 * @param prefixScans   the store's key encoder does prefix scans (session windows): heap views keep an ordered map
 * @param layerEpochs   rocksdb: committed epochs layered over an exported view before the next load refreshes it
 * @param layerBytes    rocksdb: bytes of layered epochs (per store) before the next load refreshes the view
 *                      (the conf, else [[MemoryBudget.viewLayersPerStoreBytes]])
 * @param heapMaxBytes  hashmap: the store's `heap.maxBytes`, in place of [[MemoryBudget.heapMapsBytes]] when set
 */
private[sparkstate] final case class ViewOptions(prefixScans: Boolean, layerEpochs: Int, layerBytes: Long,
                                                 heapMaxBytes: Option[Long] = None)

private[sparkstate] object ViewOptions {
  val LayerEpochsConf = "rocksdb.viewLayers.maxEpochs"
  val LayerBytesConf = "rocksdb.viewLayers.maxBytes"
  val HeapMaxBytesConf = "heap.maxBytes"
  val DefaultLayerEpochs = 16
}

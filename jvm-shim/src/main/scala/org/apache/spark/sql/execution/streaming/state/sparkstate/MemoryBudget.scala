package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.{SparkConf, SparkEnv}
import org.apache.spark.network.util.JavaUtils

/**
 * The executor's one state memory budget, and how it is split: every consumer of state memory in
 * the JVM asks this object for its part, and the executor's Python processes get theirs from it
 * (the Python side's twin is `spark_state/memory.py`, which holds the same rule and constants; a
 * unit test compares them).
 *
 * The budget is `spark.sql.streaming.stateStore.sparkState.memory.budget` (a size, read from the
 * executor's Spark conf once), by default [[DefaultFraction]] of the executor's memory
 * ([[executorMemory]]), at least [[MinBudget]]. It is split by weight, in twelfths
 * ([[TotalWeight]]), into named parts:
 *
 *  - heap maps, 8/12 ([[heapMapsBytes]]): the `hashmap` backend's state in this JVM's heap, every
 *    store together ([[HeapMaps]]); a store's `heap.maxBytes` overrides it for that store;
 *  - heap, 1/12 ([[heapBytes]]): the heap that epochs' pending writes ([[ChangeBuffer]]) and the
 *    `rocksdb` read views' layers ([[RocksViews]]) hold, all stores together ([[Pending]]); of it,
 *    one store's pending writes take at most its split between the task slots before they spill
 *    ([[pendingPerStoreBytes]]; `memory.spillThreshold` overrides it), one store's layers at most
 *    all of it before the next load refreshes the view ([[viewLayersPerStoreBytes]];
 *    `rocksdb.viewLayers.maxBytes` overrides it), and an operations export in the driver half of
 *    it as one sorted chunk ([[exportChunkBytes]]); while no `hashmap` store is open, the layers may
 *    also use half of the idle heap maps' part ([[pendingLimitBytes]]);
 *  - JVM RocksDB cache, 1/12 ([[jvmCacheBytes]]): the native block cache of the JVM's RocksDB
 *    handles (read views, spill runs);
 *  - provider workers, 1/12 ([[workersBytes]]): the provider's Python workers' RocksDB (block
 *    cache, memtables charged to it) and pending writes, split evenly between the workers
 *    ([[workerShare]], handed to each worker in its options);
 *  - keyed functions, 1/12 ([[functionsBytes]]): keyed functions' stores, split between the
 *    executor's task slots ([[TaskSlots]], which publishes the count and the budget to the keyed
 *    functions' Python processes).
 *
 * Why these weights: the parts besides the heap maps are a quarter of the executor's memory by
 * default. The rest of the heap is Spark's own (its unified memory, 60% by default, and user
 * objects), and the native parts live outside the heap, in the memory Spark reserves beside it
 * (`spark.executor.memoryOverhead`, 10% or at least 384 MB). The heap maps are half the executor's
 * memory: the `hashmap` backend keeps whole states in the heap, by design, and an executor running
 * it holds them where Spark's HDFS-backed provider would; an executor on the `rocksdb` backend
 * leaves that part unused. A part is computed from the budget alone, so the budget and every part
 * are fixed once per executor, whatever its stores' options say.
 */
private[sparkstate] object MemoryBudget {
  val BudgetConf: String = ProviderCore.ConfPrefix + "memory.budget"
  /** The budget without [[BudgetConf]]: this share of the executor's memory. */
  val DefaultFraction = 0.75
  /** The smallest default budget: 16 MB for each twelfth. */
  val MinBudget: Long = 192L * 1024 * 1024
  /** The parts' weights, in twelfths of the budget (see the object's docstring). */
  val HeapMapsWeight = 8
  val HeapWeight = 1
  val JvmCacheWeight = 1
  val WorkersWeight = 1
  val FunctionsWeight = 1
  val TotalWeight: Int = HeapMapsWeight + HeapWeight + JvmCacheWeight + WorkersWeight + FunctionsWeight
  /** Executor memory when the conf does not say (Spark's default of both confs). */
  private val DefaultExecutorMemory = "1g"

  /** The budget of this executor, in bytes. */
  lazy val totalBytes: Long = fromConf(Option(SparkEnv.get).map(_.conf).getOrElse(new SparkConf(false)))

  /** The budget `conf` gives (see the object's docstring). */
  def fromConf(conf: SparkConf): Long = conf.getOption(BudgetConf) match {
    case Some(raw) =>
      val n = try JavaUtils.byteStringAsBytes(raw.trim) catch { case _: NumberFormatException => -1L }
      if (n < TotalWeight) {
        throw new IllegalArgumentException(s"$BudgetConf must be a size such as 256m or 1g, got '$raw'")
      }
      n
    case None => math.max(MinBudget, (executorMemory(conf) * DefaultFraction).toLong)
  }

  /**
   * The executor's heap as its conf says: in local mode (`local`, `local[n]`) the executor is the
   * driver, `spark.driver.memory`; else `spark.executor.memory`, which Spark also gives each
   * executor of `local-cluster[N,c,m]` (its `m` is a worker's memory, which Spark checks the
   * executor's fits in).
   */
  def executorMemory(conf: SparkConf): Long = {
    val master = conf.get("spark.master", "")
    val local = master == "local" || master.startsWith("local[")
    val key = if (local) "spark.driver.memory" else "spark.executor.memory"
    JavaUtils.byteStringAsBytes(conf.get(key, DefaultExecutorMemory))
  }

  /** The part of `weight` twelfths of `budget`. */
  def part(weight: Int, budget: Long = totalBytes): Long = budget * weight / TotalWeight

  def heapMapsBytes: Long = part(HeapMapsWeight)
  def heapBytes: Long = part(HeapWeight)
  def jvmCacheBytes: Long = part(JvmCacheWeight)
  def workersBytes: Long = part(WorkersWeight)
  def functionsBytes: Long = part(FunctionsWeight)

  /** One provider worker's RocksDB memory: the workers' part split between the executor's workers. */
  def workerShare: Long = workersBytes / PythonWorker.slots

  /**
   * The share of the heap maps' part that [[Pending]] may use beside the heap part while no
   * `hashmap` store is open in this JVM ([[HeapMaps.openStores]]): that part is then idle, and the
   * `rocksdb` views' layers are state in the heap as the heap maps are. Half of it, not all: Spark's
   * own execution memory shares the heap, and a cache that filled it would turn GC pressure into
   * failed tasks. Measured at 1 GB (a `dropDuplicates` of 250k new keys a batch): with the heap part
   * alone (64 MB, two epochs of layers) the views were exported every other batch and most reads went
   * to RocksDB, 30% fewer rows/s than with the layers kept.
   */
  val LendableHeapMapsShare = 0.5

  /**
   * The most [[Pending]] holds, every store of this JVM together: [[heapBytes]], plus
   * [[LendableHeapMapsShare]] of [[heapMapsBytes]] while no `hashmap` store is open. Pending writes
   * never need the lent part (one store's spill past [[pendingPerStoreBytes]], so the task slots' writes
   * fit in [[heapBytes]]); layers use it, and give it back when a `hashmap` store opens.
   */
  def pendingLimitBytes: Long =
    if (HeapMaps.openStores > 0) heapBytes else heapBytes + (heapMapsBytes * LendableHeapMapsShare).toLong

  /** The most one store's pending writes hold before they spill: [[heapBytes]] split between the task slots ([[TaskSlots]]). */
  def pendingPerStoreBytes: Long = heapBytes / TaskSlots.current

  /**
   * The most one store's read-view layers hold before its next load asks the worker for a fresh
   * export: the whole heap part. Layers live across tasks, one chain per store the executor
   * served, and [[Pending]] bounds them all together; past that bound a commit leaves its layer
   * out and the next load exports the version instead.
   */
  def viewLayersPerStoreBytes: Long = heapBytes

  /**
   * Bytes of rows an operations export ([[OpsBridge]], in the driver) sorts in the heap at a time:
   * half the heap part of the budget the driver's memory gives (in local mode the driver is the
   * executor, and [[totalBytes]] is that budget). The export runs beside a live session, whose
   * stores may hold the rest of the part.
   */
  lazy val exportChunkBytes: Long = {
    val conf = Option(SparkEnv.get).map(_.conf).getOrElse(new SparkConf(false))
    val driver = conf.clone().set("spark.master", "local")
    part(HeapWeight, fromConf(driver)) / 2
  }

  /**
   * The heap bytes of pending writes and view layers, for every store of this JVM: a writer reserves
   * before it grows ([[tryReserve]]) and spills or drops what it holds when the reservation fails.
   */
  object Pending {
    private val used = new AtomicLong()

    def usedBytes: Long = used.get()

    /** Reserve `bytes` if they fit in [[pendingLimitBytes]]; false (nothing reserved) if not. */
    def tryReserve(bytes: Long): Boolean = {
      val after = used.addAndGet(bytes)
      if (after <= pendingLimitBytes) true
      else {
        used.addAndGet(-bytes)
        false
      }
    }

    def release(bytes: Long): Unit = if (bytes != 0) used.addAndGet(-bytes)

    /**
     * Reserve `bytes` for pending writes, which come before the views' layers: when the part has no
     * room, the views' layers are reclaimed ([[Reclaimable]]), the least recently extended first,
     * until the bytes fit; false (nothing reserved) only when no layer is left to reclaim. Why writes
     * first: layers are a cache (a view without its layers exports its version again at the next load,
     * one flush and one open), while writes that find no room spill to local disk and are read back at
     * the commit. Layers fill the part within a few batches, so without this every later batch would
     * spill (at 1 GB a `dropDuplicates` of 250k new keys a batch ran at half its speed at 4 GB so).
     * Locks: the caller holds its buffer's lock and takes views' locks (`reclaim`); a view holds its
     * lock while it reads the buffer of the commit it applies, which is finished (its task commits
     * it), so no thread holds that buffer's lock and waits for the view's.
     */
    def reserveForWrites(bytes: Long): Boolean = tryReserve(bytes) || {
      val it = holders().iterator
      var reserved = false
      while (!reserved && it.hasNext) {
        it.next().reclaim()
        reserved = tryReserve(bytes)
      }
      reserved
    }

    /**
     * The holders of reclaimable heap, in the order they last grew (access order: the least recent
     * first). A holder's lock may be held while it calls [[holding]] or [[notHolding]]; this map's
     * lock is never held while a holder is called, so the two locks are never taken in the other order.
     */
    private val reclaimables = new java.util.LinkedHashMap[Reclaimable, java.lang.Boolean](16, 0.75f, true)

    /** `holder` has just grown what it holds (it becomes the last one [[reserveForWrites]] reclaims). */
    def holding(holder: Reclaimable): Unit = reclaimables.synchronized(reclaimables.put(holder, java.lang.Boolean.TRUE))

    /** `holder` holds nothing reclaimable any more. */
    def notHolding(holder: Reclaimable): Unit = reclaimables.synchronized(reclaimables.remove(holder))

    /** Reclaim what every holder holds (a `hashmap` store opened: the lent part goes back). */
    def reclaimAll(): Unit = holders().forEach(_.reclaim())

    /** The holders now, least recently grown first: a copy, so that none is called under the map's lock. */
    private def holders(): java.util.ArrayList[Reclaimable] =
      reclaimables.synchronized(new java.util.ArrayList[Reclaimable](reclaimables.keySet))
  }

  /** Heap reserved from [[Pending]] that its holder can give back on demand (a read view's layers). */
  trait Reclaimable {
    /** Give back what this holds, releasing its reservation; a no-op if it holds nothing. */
    def reclaim(): Unit
  }

  /** Bytes the heap maps of this JVM hold ([[HeapMaps]]; Py4J reaches it here). */
  def heapMapsUsedBytes: Long = HeapMaps.usedBytes

  /**
   * The heap state of every `hashmap` store of this JVM ([[HeapViews]]): one byte counter, charged
   * when a map grows and released when it shrinks or is dropped. Each charge is checked against the
   * charging store's limit: its `heap.maxBytes` when its options set one, else [[heapMapsBytes]];
   * so a query's explicit limit applies to its own stores, and no store changes another's. A charge
   * that would pass the limit fails the task with a message naming the conf, long before the JVM
   * would run out of memory.
   */
  object HeapMaps {
    private val used = new AtomicLong()
    private val open = new java.util.concurrent.atomic.AtomicInteger()

    def usedBytes: Long = used.get()

    /** `hashmap` stores open in this JVM ([[HeapViews]]); while there are none, [[Pending]] may use part of this part. */
    def openStores: Int = open.get()

    /** A `hashmap` store opened: the first one takes back what [[Pending]] borrowed ([[pendingLimitBytes]]). */
    def storeOpened(): Unit = if (open.incrementAndGet() == 1) Pending.reclaimAll()

    def storeClosed(): Unit = open.decrementAndGet()

    /** Fail if `pending` more bytes would not fit under `limit` (checked before writes; charges nothing). */
    def check(pending: Long, limit: Option[Long], what: => String): Unit = {
      if (pending > 0 && used.get() + pending > limit.getOrElse(heapMapsBytes)) fail(used.get() + pending, limit, what)
    }

    /** Charge `delta` bytes (negative: release); fails without charging if it would pass `limit`. */
    def charge(delta: Long, limit: Option[Long], what: => String): Unit = {
      if (delta <= 0) used.addAndGet(delta)
      else {
        val after = used.addAndGet(delta)
        if (after > limit.getOrElse(heapMapsBytes)) {
          used.addAndGet(-delta)
          fail(after, limit, what)
        }
      }
    }

    /** Charge `delta` bytes even past the limit (for changes already durable in the worker). */
    def force(delta: Long): Unit = if (delta != 0) used.addAndGet(delta)

    def release(bytes: Long): Unit = if (bytes != 0) used.addAndGet(-bytes)

    private def fail(wouldBe: Long, limit: Option[Long], what: String): Nothing = {
      val mb = (b: Long) => f"${b / 1048576.0}%.1f MB"
      val setting = limit match {
        case Some(max) => mb(max)
        case None => s"${mb(heapMapsBytes)}, the default: $HeapMapsWeight/$TotalWeight of $BudgetConf, " +
          s"${mb(totalBytes)}"
      }
      throw new SparkStateException(s"spark-state: the heap state of this executor would grow to ${mb(wouldBe)} " +
        s"($what), beyond ${ProviderCore.ConfPrefix}${ViewOptions.HeapMaxBytesConf} ($setting). The hashmap " +
        "backend keeps all state in the executor's JVM heap. Raise that conf together with the executor memory " +
        "(spark.executor.memory; spark.driver.memory in local mode), spread the state over more executors, bound it " +
        s"(watermarks, ${ProviderCore.ConfPrefix}ttl), or set ${ProviderCore.ConfPrefix}backend=rocksdb, " +
        "which keeps state on local disk.")
    }
  }
}

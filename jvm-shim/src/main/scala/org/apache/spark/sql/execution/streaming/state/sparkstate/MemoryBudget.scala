package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.concurrent.atomic.AtomicLong

import org.apache.spark.{SparkConf, SparkEnv}
import org.apache.spark.network.util.JavaUtils

/**
 * The executor's one state memory budget, and how it is split (the Python side's twin is
 * `spark_state/memory.py`, which holds the same rule and constants; a unit test compares them).
 *
 * The budget is `spark.sql.streaming.stateStore.sparkState.memory.budget` (a size, read from the
 * executor's Spark conf once), by default [[DefaultFraction]] of the executor's memory
 * (`spark.executor.memory`; in local mode the driver, `spark.driver.memory`), at least [[MinBudget]].
 * It is split into four equal parts, named by what draws on them:
 *
 *  - [[pendingShare]]: the JVM heap that epochs' pending writes ([[ChangeBuffer]]) and the rocksdb read
 *    views' layers ([[RocksViews]]) may hold, all stores of the executor together ([[Pending]]);
 *  - [[jvmNativeShare]]: the native block cache of the JVM's RocksDB handles (read views, spill runs);
 *  - the provider's Python workers' RocksDB (block cache, memtables charged to it): a quarter, split
 *    evenly between the workers ([[workerShare]], handed to each worker in its options);
 *  - keyed functions' stores: a quarter, split between the executor's task slots ([[TaskSlots]],
 *    which publishes the count and the budget to the keyed functions' Python processes).
 *
 * Why a quarter of the executor's memory: the rest of the heap is Spark's own (its unified memory,
 * 60% by default, and user objects), and the native parts live outside the heap, in the memory
 * Spark reserves beside it (`spark.executor.memoryOverhead`, 10% or at least 384 MB).
 */
private[sparkstate] object MemoryBudget {
  val BudgetConf: String = ProviderCore.ConfPrefix + "memory.budget"
  /** The budget without [[BudgetConf]]: this share of the executor's memory. */
  val DefaultFraction = 0.25
  /** The smallest default budget. */
  val MinBudget: Long = 64L * 1024 * 1024
  /** Each of the four parts. */
  val Parts = 4
  /** Executor memory when neither `spark.executor.memory` nor `spark.driver.memory` is set (Spark's default). */
  private val DefaultExecutorMemory = "1g"

  /** The budget of this executor, in bytes. */
  lazy val totalBytes: Long = fromConf(Option(SparkEnv.get).map(_.conf).getOrElse(new SparkConf(false)))

  /** The budget `conf` gives (see the object's docstring). */
  def fromConf(conf: SparkConf): Long = conf.getOption(BudgetConf) match {
    case Some(raw) =>
      val n = try JavaUtils.byteStringAsBytes(raw.trim) catch { case _: NumberFormatException => -1L }
      if (n < Parts) {
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

  def pendingShare: Long = totalBytes / Parts
  def jvmNativeShare: Long = totalBytes / Parts
  /** One provider worker's RocksDB memory: its part split between the executor's workers. */
  def workerShare: Long = totalBytes / Parts / PythonWorker.slots

  /**
   * The heap bytes of pending writes and view layers, for every store of this JVM: a writer reserves
   * before it grows ([[tryReserve]]) and spills or drops what it holds when the reservation fails.
   */
  object Pending {
    private val used = new AtomicLong()

    def usedBytes: Long = used.get()

    /** Reserve `bytes` if they fit in [[pendingShare]]; false (nothing reserved) if not. */
    def tryReserve(bytes: Long): Boolean = {
      val after = used.addAndGet(bytes)
      if (after <= pendingShare) true
      else {
        used.addAndGet(-bytes)
        false
      }
    }

    def release(bytes: Long): Unit = if (bytes != 0) used.addAndGet(-bytes)
  }

  /** The most one store's pending writes hold before they spill: [[pendingShare]] split between the task slots ([[TaskSlots]]). */
  def perStoreBytes: Long = pendingShare / TaskSlots.current
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.File
import java.util.UUID

import com.fasterxml.jackson.databind.JsonNode
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

import org.apache.spark.TaskContext
import org.apache.spark.internal.Logging
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/**
 * What spark-state's `StateStoreProvider` does on every Spark line. The provider class itself,
 * `SparkStateProvider`, lives in the line's source folder (`jvm-shim/src/spark-<line>/`): it takes
 * the line's `init` / `getStore` / `getReadStore` / maintenance signatures and calls this class.
 * Enable it with
 * `spark.sql.streaming.stateStore.providerClass=org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider`.
 *
 * A thin shim: versions, changelogs, snapshots, key groups and cleanup live in the executor's Python
 * worker (`spark_state.provider`). This class adapts Spark's contract: it loads a version through the
 * worker, reads it through the backend's view of that version ([[StoreViews]]: a RocksDB checkpoint
 * with the later epochs layered over it, or the state itself in a JVM hash map), buffers writes, and
 * commits them as one Arrow file. Options are the SQL confs under `spark.sql.streaming.stateStore.sparkState.`.
 */
abstract class ProviderCore extends StateStoreProvider with Logging {
  import ProviderCore._

  @volatile private var storeId: StateStoreId = _
  private var codec: KeyCodec = _
  private var valueFields = 0
  private var instanceId: String = _
  private var checkpointUrl: String = _
  @volatile private var optionsJson: String = _
  /** Whether [[optionsJson]] names the query run this instance serves. */
  @volatile private var hasRunId = false
  private var hadoopConf: Configuration = _
  /** The versions of this store the JVM can serve (per backend); created in `init`. */
  @volatile private[sparkstate] var views: StoreViews = _
  /** Keys the last commit of this store wrote: the size the next epoch's [[ChangeBuffer]] starts at. */
  @volatile private[sparkstate] var lastEpochWrites: Int = 0
  /**
   * The store a task attempt opened last (lines without `upgradeReadStoreToWriteStore`, 3.5 and 4.0,
   * open a read store and then a write store of the same version in one task: the write store is
   * that same object, as 4.1+ upgrades it, see [[openForWrite]]).
   */
  @volatile private var lastOpened: (Long, SparkStateStore) = (-1L, null)
  private var spillThresholdConf: Option[Long] = None
  /** A load slower than this logs what it waited for ([[ProviderCore.LoadWarnAfterConf]]). */
  private var loadWarnAfterMs: Long = ProviderCore.DefaultLoadWarnAfterMs
  /**
   * Heap bytes of one epoch's pending writes past which they spill to local disk: the conf, else the
   * store's fair share of the executor's memory budget ([[MemoryBudget.pendingPerStoreBytes]]).
   */
  private[sparkstate] lazy val spillThreshold: Long = spillThresholdConf.getOrElse(MemoryBudget.pendingPerStoreBytes)
  /** The worker this store is pinned to (chosen lazily: the pool size needs SparkEnv). */
  private lazy val slot: Int = java.lang.Math.floorMod(storeId.partitionId, PythonWorker.slots)

  /**
   * The line-independent part of `init`: `prefixColumns` is the number of leading key columns prefix
   * scans match on (0: none). Only cheap checks here: Spark runs init under an executor-wide lock.
   * The worker starts later.
   */
  protected def initStore(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      prefixColumns: Int,
      storeConfs: StateStoreConf,
      hadoopConf: Configuration): Unit = {
    this.storeId = stateStoreId
    this.codec = new KeyCodec(keySchema, prefixColumns, stateStoreId.storeName)
    this.valueFields = valueSchema.length
    this.instanceId = UUID.randomUUID().toString
    // As an escaped URI: the worker parses it as one, and Path.toString would hand over a '#' or '?'
    // in a directory name raw, which ends a URI's path (every partition's store in one directory).
    this.checkpointUrl = stateStoreId.storeCheckpointLocation().toUri.toString
    this.optionsJson = buildOptions(storeConfs, hadoopConf, stateStoreId)
    this.hasRunId = hadoopConf != null && hadoopConf.get(RunIdConf) != null
    this.hadoopConf = hadoopConf
    val confs = storeConfs.sqlConfs
    this.views = StoreViews.forBackend(conf(confs, "backend").getOrElse(StoreViews.RocksDB).trim,
      ViewOptions(
        prefixScans = prefixColumns > 0,
        layerEpochs = conf(confs, ViewOptions.LayerEpochsConf).map(positiveInt(ViewOptions.LayerEpochsConf, _))
          .getOrElse(ViewOptions.DefaultLayerEpochs),
        layerBytes = conf(confs, ViewOptions.LayerBytesConf).map(bytes(ViewOptions.LayerBytesConf, _))
          .getOrElse(MemoryBudget.viewLayersPerStoreBytes),
        heapMaxBytes = conf(confs, ViewOptions.HeapMaxBytesConf).map(bytes(ViewOptions.HeapMaxBytesConf, _))),
      describe)
    this.spillThresholdConf = conf(confs, SpillThresholdConf).map(bytes(SpillThresholdConf, _))
    this.loadWarnAfterMs = conf(confs, LoadWarnAfterConf).map(nonNegativeLong(LoadWarnAfterConf, _))
      .getOrElse(DefaultLoadWarnAfterMs)
  }

  override def stateStoreId: StateStoreId = storeId

  def describe: String = s"spark-state store $checkpointUrl"

  /** A store of `version` (a read store, or a write store on lines that upgrade read stores). */
  protected def openStore(version: Long): SparkStateStore = {
    val store = open(version)
    lastOpened = (taskAttempt, store)
    store
  }

  /**
   * A write store of `version` on a line without `upgradeReadStoreToWriteStore` (3.5, 4.0): the read
   * store this task attempt opened for the same version, if it is still open, else a new one. Spark
   * reads through the one and writes through the other in the same task, key by key, as 4.1+ does
   * through the one store it upgrades; so a pending write is never read before it is written. One
   * object also keeps the heap views' commit in place (a second reader of the version would make
   * the views forget it) and saves a load.
   */
  protected def openForWrite(version: Long): SparkStateStore = {
    val (attempt, store) = lastOpened
    if (store != null && attempt == taskAttempt && attempt >= 0 && store.version == version && store.isUpdating) {
      store
    } else openStore(version)
  }

  private def taskAttempt: Long = Option(TaskContext.get()).map(_.taskAttemptId()).getOrElse(-1L)

  /** Reject a checkpoint v2 id (4.0+ pass `None` unless `checkpointFormatVersion=2`). */
  protected def rejectCheckpointId(id: Option[String]): Unit = {
    if (id.isDefined) {
      throw new UnsupportedOperationException("spark-state does not support checkpoint format v2 ids")
    }
  }

  private def open(version: Long): SparkStateStore = synchronized {
    val started = System.nanoTime()
    val worker = PythonWorker.get(slot)
    // Tell the worker what the JVM already holds of this version: it exports (rocksdb) or ships
    // (hashmap) the version only if the JVM lacks it, or a layered view asks for a refresh.
    val request = views.request(version)
    val reply = PythonWorker.callOn(worker, s"loading version $version of $checkpointUrl") {
      _.load(instanceId, checkpointUrl, optionsJsonForTask, version, request.toJson)
    }
    val viewStarted = System.nanoTime()
    val view = views.open(version, reply)
    val done = System.nanoTime()
    val loadMs = (done - started) / 1000000
    if (loadWarnAfterMs > 0 && loadMs > loadWarnAfterMs) {
      logWarning(s"spark-state: loading version $version of $checkpointUrl took $loadMs ms: " +
        describeLoad(reply, (done - viewStarted) / 1000000))
    }
    new SparkStateStore(StoreParts(this, version, view, codec, valueFields, reply, loadMs, TtlView.fromReply(reply)))
  }

  /**
   * The options for a call made in a task. Lines whose `createAndInit` does not put the query's run id
   * into the provider's hadoop conf (3.5) have it from the task ([[SparkLine.runIdOfTask]]); without
   * one the worker only reads (the state data source).
   */
  private def optionsJsonForTask: String = {
    if (!hasRunId) SparkLine.runIdOfTask().foreach { id =>
      optionsJson = withRunId(optionsJson, id)
      hasRunId = true
    }
    optionsJson
  }

  /** Ship a store's buffered writes to the worker as one Arrow file and commit them. */
  private[sparkstate] def commitChanges(store: StoreCore, buffer: ChangeBuffer, nowMs: Long): JsonNode = {
    val next = store.version + 1
    val file = new File(PythonWorker.baseDir, s"changes-$instanceId-$next-${UUID.randomUUID()}.arrow")
    try {
      lastEpochWrites = math.min(buffer.writes, Int.MaxValue.toLong).toInt
      buffer.writeArrow(file)
      PythonWorker.call(slot, s"committing version $next of $checkpointUrl") {
        _.commit(instanceId, checkpointUrl, optionsJsonForTask, store.version, file.getPath, nowMs)
      }
    } finally {
      file.delete()
    }
  }

  /**
   * The changes of committed versions `startVersion..endVersion`, in an Arrow file the worker writes and
   * the caller reads and deletes (the change feed file of `spark_state/provider/protocol.py`).
   */
  private[sparkstate] def changesFile(startVersion: Long, endVersion: Long): File = {
    val file = new File(PythonWorker.baseDir, s"feed-$instanceId-$startVersion-$endVersion-${UUID.randomUUID()}.arrow")
    try {
      PythonWorker.call(slot, s"reading the changes of versions $startVersion..$endVersion of $checkpointUrl") {
        _.changes(checkpointUrl, optionsJsonForTask, startVersion, endVersion, file.getPath)
      }
    } catch {
      case e: Throwable =>
        file.delete()
        throw e
    }
    file
  }

  /** How this store's keys and values are laid out (a change feed decodes them). */
  private[sparkstate] def keyCodec: KeyCodec = codec
  private[sparkstate] def valueFieldCount: Int = valueFields

  /**
   * Tell the driver's coordinator that this partition committed `version`, on lines that validate
   * commits at the end of a batch (4.1+: STATE_STORE_COMMIT_VALIDATION_FAILED otherwise), as Spark's
   * own providers do.
   */
  private[sparkstate] def reportCommit(version: Long): Unit = SparkLine.reportCommit(version, storeId, hadoopConf)

  /** Cleanup of old versions (Spark's maintenance thread; the hook's name depends on the line). */
  protected def cleanup(): Unit = {
    // Never start a worker just for maintenance; a worker that is not running has nothing to clean.
    PythonWorker.running(slot).foreach { w =>
      try PythonWorker.callOn(w, s"cleanup of $checkpointUrl")(_.maintenance(instanceId, "cleanup"))
      catch { case e: Exception => logWarning(s"spark-state cleanup of $checkpointUrl failed: ${e.getMessage}") }
    }
  }

  override def close(): Unit = synchronized {
    if (views != null) views.close() // what readers still hold goes when they release it
    if (instanceId != null) {
      PythonWorker.running(slot).foreach { w =>
        try PythonWorker.callOn(w, s"closing $checkpointUrl")(_.close(instanceId))
        catch { case e: Exception => logWarning(s"spark-state close of $checkpointUrl failed: ${e.getMessage}") }
      }
    }
  }

  override def supportedCustomMetrics: Seq[StateStoreCustomMetric] = CustomMetrics
}

object ProviderCore {
  val ConfPrefix = "spark.sql.streaming.stateStore.sparkState."
  /** A load slower than this (ms) logs what it waited for ([[describeLoad]]); 0: never. */
  val LoadWarnAfterConf = "load.warnAfterMs"
  val DefaultLoadWarnAfterMs = 10000L
  /** Per store: heap bytes of an epoch's pending writes before they spill (default: [[MemoryBudget.pendingPerStoreBytes]]). */
  val SpillThresholdConf = "memory.spillThreshold"
  /** `StreamExecution.RUN_ID_KEY`: set in the hadoopConf that providers of a running query get. */
  val RunIdConf = "sql.streaming.runId"

  val CommitTimeMetric = StateStoreCustomTimingMetric("sparkStateCommitTimeMs", "spark-state: commit time (ms)")
  val LoadTimeMetric = StateStoreCustomTimingMetric("sparkStateLoadTimeMs", "spark-state: load time (ms)")
  val ChangelogBytesMetric = StateStoreCustomSumMetric("sparkStateChangelogBytes", "spark-state: changelog bytes written")
  val SnapshotBytesMetric = StateStoreCustomSumMetric("sparkStateSnapshotBytesUploaded", "spark-state: snapshot bytes uploaded")
  val SnapshotFilesUploadedMetric = StateStoreCustomSumMetric("sparkStateSnapshotFilesUploaded", "spark-state: snapshot files uploaded")
  val SnapshotFilesReusedMetric = StateStoreCustomSumMetric("sparkStateSnapshotFilesReused", "spark-state: snapshot files reused")
  val RestoresMetric = StateStoreCustomSumMetric("sparkStateRestoresFromCheckpoint", "spark-state: stores restored from checkpoint storage")
  val TtlExpiredMetric = StateStoreCustomSumMetric("sparkStateTtlExpiredRows", "spark-state: rows removed by TTL expiry")
  val TtlMigratedMetric = StateStoreCustomSumMetric("sparkStateTtlMigratedRows", "spark-state: rows rewritten because TTL was turned on or off")
  val LoadFilesFetchedMetric = StateStoreCustomSumMetric("sparkStateLoadFilesFetched",
    "spark-state: snapshot files a load downloaded or copied from checkpoint storage")
  val LoadBytesFetchedMetric = StateStoreCustomSumMetric("sparkStateLoadBytesFetched",
    "spark-state: bytes of the snapshot files a load downloaded or copied")
  val LoadFilesLinkedMetric = StateStoreCustomSumMetric("sparkStateLoadFilesLinked",
    "spark-state: snapshot files a load hard-linked from checkpoint storage on the same file system")
  val ChangelogBytesReplayedMetric = StateStoreCustomSumMetric("sparkStateChangelogBytesReplayed",
    "spark-state: bytes of changelogs a load replayed")
  val ViewExportsMetric = StateStoreCustomSumMetric("sparkStateViewExports",
    "spark-state: loads for which the worker exported (rocksdb) or shipped (hashmap) the version to the JVM")

  val SpillsMetric = StateStoreCustomSumMetric("sparkStateSpills",
    "spark-state: runs of pending writes spilled to local disk (an epoch larger than its share of the memory budget)")
  val SpilledBytesMetric = StateStoreCustomSumMetric("sparkStateSpilledBytes",
    "spark-state: bytes of pending writes spilled to local disk")
  val HeapBytesMetric = StateStoreCustomSizeMetric("sparkStateHeapBytes",
    "spark-state: the executor heap's part of memoryUsedBytes (the JVM's view of the version, and the most the " +
      "epoch's pending writes held before they spilled)")

  val CustomMetrics: Seq[StateStoreCustomMetric] = Seq(
    CommitTimeMetric, LoadTimeMetric, ChangelogBytesMetric, SnapshotBytesMetric,
    SnapshotFilesUploadedMetric, SnapshotFilesReusedMetric, RestoresMetric, LoadFilesFetchedMetric,
    LoadBytesFetchedMetric, LoadFilesLinkedMetric, ChangelogBytesReplayedMetric, TtlExpiredMetric, TtlMigratedMetric,
    ViewExportsMetric, SpillsMetric, SpilledBytesMetric, HeapBytesMetric)

  /** What a load waited for, from the worker's reply (its `restore` figures and call time) and the JVM's view. */
  private[sparkstate] def describeLoad(reply: JsonNode, viewMs: Long): String = {
    val restore = reply.path("restore")
    val mode = Json.text(restore, "mode")
    val worker = s"the worker's load ${Json.long(reply, "callMs")} ms"
    val what = mode match {
      case "restore" =>
        val files = Json.long(restore, "snapshot_files_downloaded")
        val linked = Json.long(restore, "snapshot_files_linked")
        val snapshot = if (files + linked == 0) "no snapshot yet" else
          f"base snapshot ${Json.double(restore, "snapshot_ms")}%.0f ms, $files files, " +
            f"${Json.long(restore, "snapshot_bytes_downloaded") / 1e6}%.1f MB fetched, $linked linked"
        s" (restored from checkpoint storage: $snapshot; ${replayed(restore)})"
      case "replay" => s" (${replayed(restore)})"
      case other => s" ($other)"
    }
    val export = if (Json.text(reply, "viewPath").nonEmpty || Json.text(reply, "heapPath").nonEmpty) {
      ", with the version exported for the JVM"
    } else ""
    s"$worker$what$export; the JVM's view $viewMs ms"
  }

  private def replayed(restore: JsonNode): String =
    f"${Json.long(restore, "changelogs_replayed")} changelogs (${Json.long(restore, "changelog_bytes_replayed") / 1e6}%.1f MB) " +
      f"replayed in ${Json.double(restore, "replay_ms")}%.0f ms"

  /** Hadoop S3A settings reused as checkpoint storage options, so credentials are configured once. */
  private val S3aOptions = Seq(
    "fs.s3a.access.key" -> "s3.access_key_id",
    "fs.s3a.secret.key" -> "s3.secret_access_key",
    "fs.s3a.session.token" -> "s3.session_token",
    "fs.s3a.endpoint.region" -> "s3.region")

  private[sparkstate] def buildOptions(
      storeConfs: StateStoreConf, hadoopConf: Configuration, storeId: StateStoreId): String = {
    val root = Json.obj()
    // Which store this is: TTL confs resolve per operator, and never apply to join stores.
    root.put("operatorId", storeId.operatorId)
    root.put("storeName", storeId.storeName)
    // The query's state directory (<checkpoint>/state): per-operator confs are checked against it.
    root.put("stateRoot", new Path(storeId.checkpointRootLocation).toUri.toString)
    // The query run this provider instance serves (Spark puts it in the provider's hadoopConf;
    // instances are per (store, run)). Without it (the state data source) the worker only reads.
    if (hadoopConf != null) Option(hadoopConf.get(RunIdConf)).foreach(root.put("runId", _))
    val engine = root.putObject("engine")
    storeConfs.sqlConfs.foreach { case (k, v) =>
      if (k.startsWith(ConfPrefix)) engine.put(k.substring(ConfPrefix.length), v)
    }
    val storage = root.putObject("storage")
    if (hadoopConf != null && storeConfsMentionS3(storeConfs, hadoopConf)) {
      S3aOptions.foreach { case (hadoopKey, ours) =>
        Option(hadoopConf.get(hadoopKey)).foreach(v => storage.put(ours, v))
      }
      Option(hadoopConf.get("fs.s3a.endpoint")).filter(_.nonEmpty).foreach { endpoint =>
        val ssl = hadoopConf.getBoolean("fs.s3a.connection.ssl.enabled", true)
        val url = if (endpoint.contains("://")) endpoint else (if (ssl) "https://" else "http://") + endpoint
        storage.put("s3.endpoint_url", url)
      }
    }
    root.put("minVersionsToRetain", storeConfs.minVersionsToRetain)
    root.put("minDeltasForSnapshot", storeConfs.minDeltasForSnapshot)
    root.put("localDir", new File(PythonWorker.baseDir, "stores").getAbsolutePath)
    // The worker's part of the executor's memory budget: its RocksDB and its pending writes.
    root.put("memoryShareBytes", MemoryBudget.workerShare)
    Json.write(root)
  }

  /** `options` (the JSON of [[buildOptions]]) with `runId` set. */
  private[sparkstate] def withRunId(options: String, runId: String): String = {
    val node = Json.parse(options).asInstanceOf[com.fasterxml.jackson.databind.node.ObjectNode]
    node.put("runId", runId)
    Json.write(node)
  }

  private def conf(confs: Map[String, String], key: String): Option[String] = confs.get(ConfPrefix + key)

  private def nonNegativeLong(key: String, raw: String): Long = {
    val n = try raw.trim.toLong catch { case _: NumberFormatException => -1L }
    if (n < 0) throw new IllegalArgumentException(s"$ConfPrefix$key must be a whole number of 0 or more, got '$raw'")
    n
  }

  private def positiveInt(key: String, raw: String): Int = {
    val n = try raw.trim.toInt catch { case _: NumberFormatException => -1 }
    if (n < 1) throw new IllegalArgumentException(s"$ConfPrefix$key must be a whole number of 1 or more, got '$raw'")
    n
  }

  /** A size such as `512m`, `2g` or `1048576` (bytes), as Spark's own byte confs take it. */
  private def bytes(key: String, raw: String): Long = {
    val n = try org.apache.spark.network.util.JavaUtils.byteStringAsBytes(raw.trim) catch {
      case _: NumberFormatException => -1L
    }
    if (n < 1) throw new IllegalArgumentException(s"$ConfPrefix$key must be a size such as 512m, 2g or a number of " +
      s"bytes, got '$raw'")
    n
  }

  private def storeConfsMentionS3(storeConfs: StateStoreConf, hadoopConf: Configuration): Boolean =
    hadoopConf.get("fs.s3a.endpoint") != null || hadoopConf.get("fs.s3a.access.key") != null
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.nio.charset.StandardCharsets
import java.util.{Map => JMap, UUID}

import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path

import org.apache.spark.SparkContext
import org.apache.spark.internal.Logging
import org.apache.spark.sql.Row
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability, TableProvider}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.connector.read.{InputPartition, PartitionReader, PartitionReaderFactory, Scan, ScanBuilder}
import org.apache.spark.sql.connector.read.streaming.{MicroBatchStream, Offset, ReadLimit, SupportsTriggerAvailableNow}
import org.apache.spark.sql.types.{LongType, StructField, StructType}
import org.apache.spark.sql.util.CaseInsensitiveStringMap

/**
 * The tick source of spark-state's keyed functions (`spark_state.process`): every keyed or checkpointed
 * function's input is unioned with one, because Spark runs a micro-batch without new input only for its own
 * stateful operators, and a `mapInArrow` stage is not one. The source does two things:
 *
 *  1. **Where the checkpoint is.** When Spark creates the stream for a query run (on the query's own thread,
 *     before its first batch: `MicroBatchExecution.logicalPlan` asserts that thread), it sets the local
 *     property `spark.sparkState.checkpointRoot` to the query's checkpoint root on that thread, so every task
 *     of the run reads it; a function's state lives under it by default (`spark_state.process.location`).
 *  2. **Batches for timers.** Its offset is a count of ticks. At each trigger it reads the observation its
 *     function's tasks reported for the last batch (`df.observe("spark_state.<name>", ...)`, column `figures`,
 *     in the query's last progress) and grows by one -- so that Spark runs a batch, with one tick row -- when
 *       - an event-time timer is due at the watermark of the next batch, which is above the last batch's: when
 *         the tasks ran on Spark's time (`spark_time`, `spark_state.process.spark_time`), the next watermark is
 *         Spark's own, `nextBatchWatermarkMs` of the batch's entry in the commit log, compared with the earliest
 *         pending timer (`next_event_timer_ms`); otherwise the tasks' own estimate, `event_timers_due` (see
 *         `spark_state.process.observation`);
 *       - `next_processing_timer_ms` has passed (not under `availableNow`: a periodic processing-time timer
 *         would never let the run end);
 *     at most once per observed batch. With nothing due it never grows, so an idle query runs no batch.
 *     Under `trigger(availableNow=True)` Spark ends the run when no source grows, so the run ends only when no
 *     event-time timer is due at the final watermark.
 *
 * After a restart the last progress is empty until a batch ran: the source keeps the last observation in its
 * own checkpoint folder (`<checkpoint>/sources/<i>/observation`, one line, rewritten once per observed batch)
 * and uses it when it describes the last committed batch; otherwise (the query stopped before the source saw
 * the last batch's observation) a function with timers gets one tick, which fires what came due meanwhile.
 *
 * Options: `name` (the observation's name), `timers` (`true` when the function has timers; without, the
 * source only places the checkpoint and never ticks). Rows: one `tick bigint` per tick.
 */
class TickSource extends TableProvider {
  override def inferSchema(options: CaseInsensitiveStringMap): StructType = TickSource.Schema

  override def getTable(schema: StructType, partitioning: Array[Transform], properties: JMap[String, String]): Table =
    new TickTable(new CaseInsensitiveStringMap(properties))
}

object TickSource {
  val Schema: StructType = StructType(Seq(StructField("tick", LongType, nullable = false)))
  /** Local property of a query's thread: its checkpoint root (see the class comment). */
  val CheckpointRootProperty = "spark.sparkState.checkpointRoot"
  /** Spark's local property naming the running query (`StreamExecution.QUERY_ID_KEY`). */
  val QueryIdProperty = "sql.streaming.queryId"
  val ObservationPrefix = "spark_state."
  val ObservationFile = "observation"
}

private[sparkstate] class TickTable(options: CaseInsensitiveStringMap) extends Table with SupportsRead {
  override def name(): String = s"spark_state_ticks(${options.getOrDefault("name", "")})"
  override def schema(): StructType = TickSource.Schema
  override def capabilities(): java.util.Set[TableCapability] = java.util.EnumSet.of(TableCapability.MICRO_BATCH_READ)

  override def newScanBuilder(scanOptions: CaseInsensitiveStringMap): ScanBuilder = () => new Scan {
    override def readSchema(): StructType = TickSource.Schema
    override def toMicroBatchStream(checkpointLocation: String): MicroBatchStream =
      new TickStream(options.getOrDefault("name", ""), options.getBoolean("timers", false), checkpointLocation)
  }
}

/** A running query as the tick source reads it. */
private[sparkstate] trait RunningQuery {
  def lastProgress(): org.apache.spark.sql.streaming.StreamingQueryProgress
  def lastCommittedBatch(): Option[Long]
  /** Spark's watermark of the batch after `batch`, once `batch` is committed (its commit log entry). */
  def nextWatermark(batch: Long): Option[Long]
}

private[sparkstate] object RunningQuery {
  /** The running query `id` of this application, from the registry every session shares (its
   *  `StreamExecution` class moved between lines; compiled per line, the calls are the same). */
  def find(id: UUID): Option[RunningQuery] =
    SparkLine.sharedState().flatMap(s => Option(s.activeStreamingQueries.get(id))).map { q =>
      new RunningQuery {
        def lastProgress() = q.lastProgress
        def lastCommittedBatch(): Option[Long] = q.commitLog.getLatest().map(_._1)
        def nextWatermark(batch: Long): Option[Long] = q.commitLog.get(batch).map(_.nextBatchWatermarkMs)
      }
    }
}

private[sparkstate] case class TickOffset(n: Long) extends Offset {
  override def json(): String = n.toString
}

private[sparkstate] case class TickPartition(n: Long) extends InputPartition

/**
 * What the function's tasks reported for `batch` (see the class comment of [[TickSource]]): `sparkTime` when they
 * ran on Spark's watermark, `watermarkMs` the batch's watermark, `nextEventTimerMs` the earliest pending event-time
 * timer, `eventTimersDue` the tasks' own estimate of whether it is due at the next batch.
 */
private[sparkstate] case class Observation(
    batch: Long,
    eventTimersDue: Boolean,
    nextProcessingTimerMs: Option[Long],
    sparkTime: Boolean = false,
    watermarkMs: Option[Long] = None,
    nextEventTimerMs: Option[Long] = None) {

  /** An event-time timer is due at the next batch's watermark `next` (Spark's, when known). */
  def eventTimerDueAt(next: => Option[Long]): Boolean =
    if (!sparkTime) eventTimersDue
    else nextEventTimerMs.exists(t => next.exists(w => t <= w && watermarkMs.forall(w > _)))

  /** One line: `batch due next-processing-timer spark-time watermark next-event-timer` ("-" for none). */
  def line: String = Seq(batch, eventTimersDue, opt(nextProcessingTimerMs), sparkTime, opt(watermarkMs),
    opt(nextEventTimerMs)).mkString(" ")

  private def opt(v: Option[Long]): String = v.map(_.toString).getOrElse("-")
}

private[sparkstate] object Observation {
  /** The observation's one column, `figures` (a struct; `spark_state.process.observation.FIGURES`). */
  def fromRow(observed: Row): Option[Observation] = {
    val at = observed.schema.fieldNames.indexOf("figures")
    if (at < 0 || observed.isNullAt(at)) return None
    val row = observed.getStruct(at)
    def field(name: String): Any = {
      val i = row.schema.fieldNames.indexOf(name)
      if (i < 0 || row.isNullAt(i)) null else row.get(i)
    }
    def long(name: String): Option[Long] = field(name) match {
      case n: java.lang.Number => Some(n.longValue())
      case _ => None
    }
    long("batch").map { b =>
      Observation(b, field("event_timers_due") == true, long("next_processing_timer_ms"),
        field("spark_time") == true, long("watermark_ms"), long("next_event_timer_ms"))
    }
  }

  /** An [[Observation.line]], or the three fields an earlier release wrote. */
  def parse(line: String): Option[Observation] = {
    def opt(v: String): Option[Long] = if (v == "-") None else Some(v.toLong)
    try line.trim.split(" ") match {
      case Array(b, due, next) => Some(Observation(b.toLong, due.toBoolean, opt(next)))
      case Array(b, due, next, spark, watermark, nextEvent) =>
        Some(Observation(b.toLong, due.toBoolean, opt(next), spark.toBoolean, opt(watermark), opt(nextEvent)))
      case _ => None
    } catch { case _: IllegalArgumentException => None }
  }
}

private[sparkstate] class TickStream(name: String, timers: Boolean, checkpointLocation: String)
    extends MicroBatchStream with SupportsTriggerAvailableNow with Logging {

  private val observationName = TickSource.ObservationPrefix + name
  private val observationPath = new Path(checkpointLocation, TickSource.ObservationFile)
  @volatile private var availableNow = false
  /** The last observation seen (in the progress, or read back after a restart). */
  private var observed: Option[Observation] = None
  /** The observed batch a tick was last given for: never two ticks for one observation. */
  private var tickedFor = Long.MinValue
  private var restartChecked = false

  // `<root>/sources/<i>` -> `<root>`, kept as Spark wrote it (a URI, escaped: Hadoop's Path would unescape it);
  // set on the query's thread (see the class comment of TickSource).
  locally {
    val root = checkpointLocation.replaceAll("/sources/[^/]+/?$", "")
    SparkContext.getActive.foreach(_.setLocalProperty(TickSource.CheckpointRootProperty, root))
  }

  override def initialOffset(): Offset = TickOffset(0)
  override def deserializeOffset(json: String): Offset = TickOffset(json.trim.toLong)
  override def commit(end: Offset): Unit = ()
  override def stop(): Unit = ()
  override def prepareForTriggerAvailableNow(): Unit = availableNow = true
  override def getDefaultReadLimit: ReadLimit = ReadLimit.allAvailable()
  override def latestOffset(): Offset =
    throw new UnsupportedOperationException("latestOffset(start, limit) is the tick source's entry point")

  override def latestOffset(start: Offset, limit: ReadLimit): Offset = {
    val n = start match {
      case TickOffset(v) => v
      case other => other.json().trim.toLong
    }
    if (timers && due(System.currentTimeMillis())) TickOffset(n + 1) else TickOffset(n)
  }

  private def due(now: Long): Boolean = {
    val query = currentQueryId.flatMap(RunningQuery.find)
    val latest = query.flatMap(q => Option(q.lastProgress())).flatMap { p =>
      Option(p.observedMetrics).flatMap(m => Option(m.get(observationName))).flatMap(Observation.fromRow)
    }
    latest match {
      case Some(o) if !observed.exists(_.batch >= o.batch) =>
        observed = Some(o)
        save(o)
      case _ =>
    }
    if (observed.isEmpty && !restartChecked) {
      restartChecked = true
      val committed = query.flatMap(_.lastCommittedBatch())
      if (committed.isEmpty) return false // a new query: nothing can be due before its first batch
      observed = load().filter(o => committed.contains(o.batch))
      if (observed.isEmpty) {
        logInfo(s"spark-state: $name restarts without the observation of batch ${committed.get}: one tick " +
          "fires the timers that came due while the query was stopped")
        tickedFor = committed.get
        return true
      }
    }
    observed match {
      case Some(o) if o.batch > tickedFor =>
        val isDue = o.eventTimerDueAt(query.flatMap(_.nextWatermark(o.batch))) ||
          (!availableNow && o.nextProcessingTimerMs.exists(_ <= now))
        if (isDue) tickedFor = o.batch
        isDue
      case _ => false
    }
  }

  private def currentQueryId: Option[UUID] =
    SparkContext.getActive.flatMap(sc => Option(sc.getLocalProperty(TickSource.QueryIdProperty))).map(UUID.fromString)

  private def save(o: Observation): Unit = try {
    val fs = observationPath.getFileSystem(SparkContext.getActive.get.hadoopConfiguration)
    val out = fs.create(observationPath, true)
    try out.write(o.line.getBytes(StandardCharsets.UTF_8)) finally out.close()
  } catch {
    case NonFatal(e) => logWarning(s"spark-state: cannot record the tick source's observation at $observationPath", e)
  }

  private def load(): Option[Observation] = try {
    val fs = observationPath.getFileSystem(SparkContext.getActive.get.hadoopConfiguration)
    if (!fs.exists(observationPath)) None
    else {
      val in = fs.open(observationPath)
      try Observation.parse(new String(in.readAllBytes(), StandardCharsets.UTF_8)) finally in.close()
    }
  } catch {
    case NonFatal(e) =>
      logWarning(s"spark-state: cannot read the tick source's observation at $observationPath", e)
      None
  }

  override def planInputPartitions(start: Offset, end: Offset): Array[InputPartition] = {
    val to = end.asInstanceOf[TickOffset].n
    val from = start match {
      case null => 0L
      case TickOffset(v) => v
      case other => other.json().trim.toLong
    }
    if (to > from) Array(TickPartition(to)) else Array.empty
  }

  override def createReaderFactory(): PartitionReaderFactory = TickReaderFactory
}

private[sparkstate] object TickReaderFactory extends PartitionReaderFactory {
  override def createReader(partition: InputPartition): PartitionReader[InternalRow] = new PartitionReader[InternalRow] {
    private var pending = true
    override def next(): Boolean = { val has = pending; pending = false; has }
    override def get(): InternalRow = InternalRow(partition.asInstanceOf[TickPartition].n)
    override def close(): Unit = ()
  }
}

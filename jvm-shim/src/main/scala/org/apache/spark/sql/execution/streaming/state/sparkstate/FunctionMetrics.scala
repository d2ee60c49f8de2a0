package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Attribute, SortOrder}
import org.apache.spark.sql.catalyst.plans.logical.{CollectMetrics, LogicalPlan, UnaryNode}
import org.apache.spark.sql.catalyst.plans.physical.Partitioning
import org.apache.spark.sql.catalyst.rules.Rule
import org.apache.spark.sql.execution.{SparkPlan, SparkStrategy, UnaryExecNode}
import org.apache.spark.sql.execution.metric.{SQLMetric, SQLMetrics}
import org.apache.spark.sql.types.{DoubleType, StructType}

/**
 * spark-state's session extensions (`spark.sql.extensions`, which `spark_state.configure` and
 * `server_confs` set): a keyed or checkpointed function appears in the Spark UI's SQL tab as a
 * node of its own, `SparkStateFunction <name>`, with its state figures as SQL metrics -- as
 * Spark's own stateful operators show theirs.
 *
 * How. A function's plan is `mapInArrow -> observe("spark_state.<name>") -> ...`
 * (`spark_state/process/observation.py`): every task's output ends with one observation row whose
 * hidden struct column holds the task's figures. [[PlantFunctionMetrics]], an optimizer rule, puts
 * a [[FunctionMetrics]] node right above the node that makes that column; [[FunctionMetricsStrategy]]
 * plans it as [[FunctionMetricsExec]], which passes every row on and adds each observation row's
 * figures to its metrics. Nothing else changes: without the extensions the plan is the same minus
 * this node, and the figures are still in the query's progress.
 */
class SparkStateExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    extensions.injectOptimizerRule(_ => PlantFunctionMetrics)
    extensions.injectPlannerStrategy(_ => FunctionMetricsStrategy)
  }
}

/** The names this file shares with `spark_state/process/observation.py`, which owns them. */
private[sparkstate] object ObservationNames {
  /** The hidden column of observation rows (`OBSERVATION_COLUMN`). */
  val Column = "__spark_state_observation"
  /** The observation's name is this prefix plus the function's name (`OBSERVATION_PREFIX`). */
  val Prefix = "spark_state."
}

/** A keyed or checkpointed function's metrics node: its output is its child's, row for row. */
case class FunctionMetrics(name: String, child: LogicalPlan) extends UnaryNode {
  override def output: Seq[Attribute] = child.output
  override protected def withNewChildInternal(newChild: LogicalPlan): FunctionMetrics = copy(child = newChild)
}

/**
 * Puts a [[FunctionMetrics]] node above the node that makes the observation column observed by a
 * `spark_state.<name>` observation (the function's `mapInArrow`), once: an observation whose
 * subtree has that function's node already is left alone (optimizer batches run to a fixed point).
 */
object PlantFunctionMetrics extends Rule[LogicalPlan] {
  override def apply(plan: LogicalPlan): LogicalPlan = plan.transformUp {
    case observe: CollectMetrics if observe.name.startsWith(ObservationNames.Prefix) =>
      val name = observe.name.stripPrefix(ObservationNames.Prefix)
      val planted = observe.child.exists {
        case FunctionMetrics(n, _) => n == name
        case _ => false
      }
      observe.child.output.find(_.name == ObservationNames.Column) match {
        case Some(column) if !planted =>
          def makes(node: LogicalPlan): Boolean =
            node.output.exists(_.exprId == column.exprId) &&
              !node.children.exists(_.output.exists(_.exprId == column.exprId))
          observe.withNewChildren(Seq(observe.child.transformUp {
            case node if makes(node) => FunctionMetrics(name, node)
          }))
        case _ => observe
      }
  }
}

object FunctionMetricsStrategy extends SparkStrategy {
  override def apply(plan: LogicalPlan): Seq[SparkPlan] = plan match {
    case FunctionMetrics(name, child) => FunctionMetricsExec(name, planLater(child)) :: Nil
    case _ => Nil
  }
}

/**
 * Passes its child's rows on; from each observation row (one per task) it adds the task's figures
 * to the SQL metrics below, which the SQL tab shows summed over the batch's tasks. The metric names
 * are those of Spark's `StateStoreWriter` where the figure is the same.
 */
case class FunctionMetricsExec(name: String, child: SparkPlan) extends UnaryExecNode {
  override def nodeName: String = s"SparkStateFunction $name"
  override def output: Seq[Attribute] = child.output
  override def outputPartitioning: Partitioning = child.outputPartitioning
  override def outputOrdering: Seq[SortOrder] = child.outputOrdering

  /** Observation field (`TASK_FIELDS` in observation.py) -> the metric it adds to. */
  override lazy val metrics: Map[String, SQLMetric] = Map(
    "rows_total" -> SQLMetrics.createMetric(sparkContext, "number of total state rows"),
    "rows_updated" -> SQLMetrics.createMetric(sparkContext, "number of updated state rows"),
    "state_bytes" -> SQLMetrics.createSizeMetric(sparkContext, "state size in the backends"),
    "checkpoint_bytes_written" -> SQLMetrics.createSizeMetric(sparkContext, "bytes written to checkpoint storage"),
    "commit_ms" -> SQLMetrics.createTimingMetric(sparkContext, "time to commit changes"),
    "load_ms" -> SQLMetrics.createTimingMetric(sparkContext, "time to load the state"),
    "load_bytes_fetched" -> SQLMetrics.createSizeMetric(sparkContext, "bytes fetched from checkpoint storage"),
    "timers_fired" -> SQLMetrics.createMetric(sparkContext, "number of timers fired"),
    "late_rows_dropped" -> SQLMetrics.createMetric(sparkContext, "number of rows which are dropped by watermark"))

  override protected def doExecute(): RDD[InternalRow] = {
    val column = child.output.indexWhere(_.name == ObservationNames.Column)
    val struct = child.output(column).dataType.asInstanceOf[StructType]
    // (field ordinal, is the field a double, metric) for the fields the node shows
    val adds = metrics.toSeq.flatMap { case (field, metric) =>
      struct.getFieldIndex(field).map(i => (i, struct(i).dataType == DoubleType, metric))
    }.toArray
    val width = struct.length
    child.execute().mapPartitionsInternal { rows =>
      rows.map { row =>
        if (!row.isNullAt(column)) {
          val figures = row.getStruct(column, width)
          adds.foreach { case (i, isDouble, metric) =>
            if (!figures.isNullAt(i)) metric.add(if (isDouble) math.round(figures.getDouble(i)) else figures.getLong(i))
          }
        }
        row
      }
    }
  }

  override protected def withNewChildInternal(newChild: SparkPlan): FunctionMetricsExec = copy(child = newChild)
}

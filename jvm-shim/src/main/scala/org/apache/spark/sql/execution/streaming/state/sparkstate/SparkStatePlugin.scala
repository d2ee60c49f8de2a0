package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.{Map => JMap}

import org.apache.spark.api.plugin.{DriverPlugin, ExecutorPlugin, PluginContext, SparkPlugin}
import org.apache.spark.internal.Logging

/**
 * spark-state's Spark plugin (`spark.plugins`, which `spark_state.configure` sets): when an executor
 * starts (in local mode: the driver's executor), it starts the executor's Python workers in the
 * background, so that the first micro-batch of the first stateful query does not wait for them
 * (a worker's start -- a Python process importing pyarrow and rocksdict, then its Py4J handshake --
 * takes 0.5-1 s of that batch otherwise); and it tells the executor's Python processes its task slots
 * and memory budget ([[TaskSlots.publish]]). Nothing else: no driver side, no state.
 *
 * `spark.sql.streaming.stateStore.sparkState.prestartWorkers=false` keeps the lazy start (workers
 * start at the first store load that needs them). A failure here never fails the executor: it is
 * logged, and the first load retries the start and fails its task with the full message.
 */
class SparkStatePlugin extends SparkPlugin {
  override def driverPlugin(): DriverPlugin = null

  override def executorPlugin(): ExecutorPlugin = new ExecutorPlugin with Logging {
    override def init(ctx: PluginContext, extraConf: JMap[String, String]): Unit = {
      try TaskSlots.publish() catch {
        case e: Exception => logWarning(s"spark-state could not tell the executor's Python processes its task " +
          s"slots (${e.getMessage}): keyed functions count them from the conf")
      }
      val prestart = ctx.conf().get(SparkStatePlugin.PrestartConf, "true")
      SparkStatePlugin.parseBool(prestart) match {
        case Some(true) => PythonWorker.prestart()
        case Some(false) =>
        case None =>
          logWarning(s"${SparkStatePlugin.PrestartConf} must be true or false, got '$prestart': the Python " +
            "workers start lazily, at the first store load")
      }
    }
  }
}

object SparkStatePlugin {
  val PrestartConf: String = ProviderCore.ConfPrefix + "prestartWorkers"

  /** The words of a boolean option, any case (Python's `spark_state.options.TRUE_WORDS` / `FALSE_WORDS`). */
  val TrueWords: Set[String] = Set("true", "1", "yes", "on")
  val FalseWords: Set[String] = Set("false", "0", "no", "off")

  /** The boolean `raw` spells, None if neither (the caller names the option). */
  def parseBool(raw: String): Option[Boolean] = {
    val word = raw.trim.toLowerCase(java.util.Locale.ROOT)
    if (TrueWords(word)) Some(true) else if (FalseWords(word)) Some(false) else None
  }
}

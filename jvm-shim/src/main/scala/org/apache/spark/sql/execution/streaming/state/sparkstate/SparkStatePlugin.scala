package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.util.{Map => JMap}

import org.apache.spark.api.plugin.{DriverPlugin, ExecutorPlugin, PluginContext, SparkPlugin}
import org.apache.spark.internal.Logging

/**
 * spark-state's Spark plugin (`spark.plugins`, which `spark_state.configure` sets): when an executor
 * starts (in local mode: the driver's executor), it starts the executor's Python workers in the
 * background, so that the first micro-batch of the first stateful query does not wait for them
 * (a worker's start -- a Python process importing pyarrow and rocksdict, then its Py4J handshake --
 * takes 0.5-1 s of that batch otherwise). Nothing else: no driver side, no state.
 *
 * `spark.sql.streaming.stateStore.sparkState.prestartWorkers=false` keeps the lazy start (workers
 * start at the first store load that needs them). A failure here never fails the executor: it is
 * logged, and the first load retries the start and fails its task with the full message.
 */
class SparkStatePlugin extends SparkPlugin {
  override def driverPlugin(): DriverPlugin = null

  override def executorPlugin(): ExecutorPlugin = new ExecutorPlugin with Logging {
    override def init(ctx: PluginContext, extraConf: JMap[String, String]): Unit = {
      val prestart = ctx.conf().get(SparkStatePlugin.PrestartConf, "true").trim
      if (prestart.equalsIgnoreCase("true")) PythonWorker.prestart()
      else if (!prestart.equalsIgnoreCase("false")) {
        logWarning(s"${SparkStatePlugin.PrestartConf} must be true or false, got '$prestart': the Python " +
          "workers start lazily, at the first store load")
      }
    }
  }
}

object SparkStatePlugin {
  val PrestartConf: String = ProviderCore.ConfPrefix + "prestartWorkers"
}

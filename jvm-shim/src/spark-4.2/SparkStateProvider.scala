package org.apache.spark.sql.execution.streaming.state.sparkstate

/**
 * spark-state's `StateStoreProvider` on Spark 4.2 (see [[ProviderCore]], [[Spark42Provider]]): cleanup
 * in `doMaintenance` (the maintenance thread's hook up to 4.2).
 */
class SparkStateProvider extends Spark42Provider {
  override def doMaintenance(): Unit = cleanup()
}

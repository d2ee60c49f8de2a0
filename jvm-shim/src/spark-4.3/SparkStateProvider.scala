package org.apache.spark.sql.execution.streaming.state.sparkstate

/**
 * spark-state's `StateStoreProvider` on Spark 4.3 (see [[ProviderCore]], [[Spark42Provider]]): cleanup
 * in `doCleanupMaintenance` (4.3's maintenance thread calls it; `doMaintenance` runs only before an unload).
 */
class SparkStateProvider extends Spark42Provider {
  override def doCleanupMaintenance(): Unit = cleanup()
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.spark.sql.execution.streaming.state._

/**
 * spark-state's `StateStoreProvider` on Spark 4.0 (see [[ProviderCore]], [[Spark4Provider]]):
 * `getStore(version, ckptId)`, cleanup in `doMaintenance`. 4.0 has no read-store upgrade: an
 * aggregation opens a read store and then a write store of the same version in one task, and
 * `getStore` hands back that read store ([[ProviderCore.openForWrite]]).
 */
class SparkStateProvider extends Spark4Provider {
  override def getStore(version: Long, stateStoreCkptId: Option[String]): StateStore = {
    rejectCheckpointId(stateStoreCkptId)
    openForWrite(version)
  }

  override def doMaintenance(): Unit = cleanup()
}

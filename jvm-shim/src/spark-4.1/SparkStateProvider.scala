package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.spark.sql.execution.streaming.state._

/**
 * spark-state's `StateStoreProvider` on Spark 4.1 (see [[ProviderCore]], [[Spark4Provider]]):
 * `getStore(version, ckptId)`, the read store upgraded in place (3 parameters; Spark's default would
 * open a second store without releasing the first), cleanup in `doMaintenance`.
 */
class SparkStateProvider extends Spark4Provider {
  override def getStore(version: Long, stateStoreCkptId: Option[String]): StateStore = {
    rejectCheckpointId(stateStoreCkptId)
    openStore(version)
  }

  override def upgradeReadStoreToWriteStore(
      readStore: ReadStateStore,
      version: Long,
      uniqueId: Option[String]): StateStore = readStore match {
    case s: SparkStateStore if s.version == version && s.isUpdating => s
    case other =>
      other.release()
      getStore(version, uniqueId)
  }

  override def doMaintenance(): Unit = cleanup()
}

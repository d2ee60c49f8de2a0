package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.spark.sql.execution.streaming.state._

/**
 * `getStore(version, ckptId, forceSnapshotOnCommit, loadEmpty)` and the read store upgraded in place,
 * as Spark 4.2 and 4.3 call them. The line's `SparkStateProvider` adds the maintenance hook.
 */
private[sparkstate] abstract class Spark42Provider extends Spark4Provider {
  override def getStore(
      version: Long,
      stateStoreCkptId: Option[String],
      forceSnapshotOnCommit: Boolean,
      loadEmpty: Boolean): StateStore = {
    rejectCheckpointId(stateStoreCkptId)
    if (loadEmpty) throw new UnsupportedOperationException("spark-state does not support loadEmpty (offline repartition) yet")
    openStore(version)
  }

  override def upgradeReadStoreToWriteStore(
      readStore: ReadStateStore,
      version: Long,
      uniqueId: Option[String],
      forceSnapshotOnCommit: Boolean): StateStore = readStore match {
    case s: SparkStateStore if s.version == version && s.isUpdating => s
    case other =>
      other.release()
      getStore(version, uniqueId, forceSnapshotOnCommit, loadEmpty = false)
  }
}

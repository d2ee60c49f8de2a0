package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.execution.streaming.state._

/** What differs between Spark lines outside the provider and the store: here, Spark 4.1. */
private[sparkstate] object SparkLine extends Spark4Line {
  /** Commit validation (4.1+): report each commit to the driver's coordinator. */
  def reportCommit(version: Long, storeId: StateStoreId, hadoopConf: Configuration): Unit =
    StateStore.reportCommitToCoordinator(version, storeId, hadoopConf)

  def finishRead(store: ReadStateStore): Unit = store.release()
}

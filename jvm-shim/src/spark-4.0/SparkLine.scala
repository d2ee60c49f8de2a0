package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.execution.streaming.state._

/** What differs between Spark lines outside the provider and the store: here, Spark 4.0. */
private[sparkstate] object SparkLine extends Spark4Line {
  /** 4.0 does not validate commits (nothing to report to). */
  def reportCommit(version: Long, storeId: StateStoreId, hadoopConf: Configuration): Unit = ()

  /** 4.0's read stores have no `release`: `abort` is how Spark itself finishes them. */
  def finishRead(store: ReadStateStore): Unit = store.abort()
}

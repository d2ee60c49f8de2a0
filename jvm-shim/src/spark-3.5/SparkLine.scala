package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.TaskContext
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.internal.SharedState
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/** What differs between Spark lines outside the provider and the store: here, Spark 3.5. */
private[sparkstate] object SparkLine {
  private val RunIdLine = "(?m)^runId = ([0-9a-fA-F-]{36})$".r

  /**
   * The query run a task belongs to: 3.5's `createAndInit` does not put it in the provider's hadoop
   * conf, but its streaming execution runs every batch's jobs in a job group named by the run id
   * and describes them with a `runId = <uuid>` line (the rule of `spark_state.process.location`).
   * None outside a streaming query (the state data source): the worker then only reads.
   */
  def runIdOfTask(): Option[String] = Option(TaskContext.get()).flatMap { ctx =>
    if (ctx.getLocalProperty("sql.streaming.queryId") == null) None
    else {
      Option(ctx.getLocalProperty("spark.job.description")).flatMap(d => RunIdLine.findFirstMatchIn(d).map(_.group(1)))
        .orElse(Option(ctx.getLocalProperty("spark.jobGroup.id")))
    }
  }

  /** 3.5 does not validate commits (nothing to report to). */
  def reportCommit(version: Long, storeId: StateStoreId, hadoopConf: Configuration): Unit = ()

  def createProvider(providerId: StateStoreProviderId, keySchema: StructType, valueSchema: StructType,
                     numColsPrefixKey: Int, conf: StateStoreConf, hadoopConf: Configuration): StateStoreProvider =
    StateStoreProvider.createAndInit(providerId, keySchema, valueSchema, numColsPrefixKey, conf, hadoopConf)

  /** 3.5's read stores have no `release`: `abort` is how Spark itself finishes them. */
  def finishRead(store: ReadStateStore): Unit = store.abort()

  /** No `loadEmpty` before 4.2. */
  def loadEmpty(provider: StateStoreProvider, version: Long): Option[StateStore] = None

  /** The application's shared state (any session's: the running queries' registry is shared). */
  def sharedState(): Option[SharedState] =
    SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession).map(_.sharedState)
}

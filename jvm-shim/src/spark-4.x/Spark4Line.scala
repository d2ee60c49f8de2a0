package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.classic.SparkSession
import org.apache.spark.sql.internal.SharedState

import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/**
 * What every Spark 4.x line has in common outside the provider and the store; each line's
 * `SparkLine` object extends it with what differs (commit reports, how a read store is finished,
 * `loadEmpty`).
 */
private[sparkstate] trait Spark4Line {
  /** `createAndInit` puts the run id in the provider's hadoop conf on 4.x: nothing to find in the task. */
  def runIdOfTask(): Option[String] = None

  def reportCommit(version: Long, storeId: StateStoreId, hadoopConf: Configuration): Unit

  /** A provider of another class (the ops bridge: Spark's own providers). */
  def createProvider(providerId: StateStoreProviderId, keySchema: StructType, valueSchema: StructType,
                     numColsPrefixKey: Int, conf: StateStoreConf, hadoopConf: Configuration): StateStoreProvider =
    StateStoreProvider.createAndInit(providerId, keySchema, valueSchema,
      Spark4Provider.encoderSpec(keySchema, numColsPrefixKey), false, conf, hadoopConf, false, None)

  def finishRead(store: ReadStateStore): Unit

  /** An empty write store of `version` whatever the checkpoint holds, where the line can make one. */
  def loadEmpty(provider: StateStoreProvider, version: Long): Option[StateStore] = None

  /** The application's shared state (any session's: the running queries' registry is shared). */
  def sharedState(): Option[SharedState] =
    SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession).map(_.sharedState)
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/** What differs between Spark lines outside the provider and the store: here, Spark 4.2 and 4.3. */
private[sparkstate] object SparkLine {
  /** `createAndInit` puts the run id in the provider's hadoop conf on this line. */
  def runIdOfTask(): Option[String] = None

  /** Commit validation (4.1+): report each commit to the driver's coordinator. */
  def reportCommit(version: Long, storeId: StateStoreId, hadoopConf: Configuration): Unit =
    StateStore.reportCommitToCoordinator(version, storeId, hadoopConf)

  def createProvider(providerId: StateStoreProviderId, keySchema: StructType, valueSchema: StructType,
                     numColsPrefixKey: Int, conf: StateStoreConf, hadoopConf: Configuration): StateStoreProvider =
    Spark4Provider.createProvider(providerId, keySchema, valueSchema, numColsPrefixKey, conf, hadoopConf)

  def entries(store: ReadStateStore): Iterator[UnsafeRowPair] = store.iterator()

  def finishRead(store: ReadStateStore): Unit = store.release()

  def put(store: StateStore, key: UnsafeRow, value: UnsafeRow): Unit = store.put(key, value)

  /** An empty write store of `version` whatever the checkpoint holds (Spark's offline repartition path). */
  def emptyStoreToImport(provider: StateStoreProvider, version: Long): StateStore =
    provider.getStore(version, None, forceSnapshotOnCommit = true, loadEmpty = true)
}

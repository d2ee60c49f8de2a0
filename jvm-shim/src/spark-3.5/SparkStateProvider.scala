package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/**
 * spark-state's `StateStoreProvider` on Spark 3.5 (see [[ProviderCore]]): `init` takes the number of
 * prefix-scan key columns, `getStore(version)` / `getReadStore(version)`, cleanup in `doMaintenance`.
 * 3.5 has no read-store upgrade: an aggregation opens a read store and then a write store of the
 * same version in one task, and `getStore` hands back that read store ([[ProviderCore.openForWrite]]).
 */
class SparkStateProvider extends ProviderCore {
  override def init(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      numColsPrefixKey: Int,
      storeConfs: StateStoreConf,
      hadoopConf: Configuration): Unit =
    initStore(stateStoreId, keySchema, valueSchema, numColsPrefixKey, storeConfs, hadoopConf)

  override def getStore(version: Long): StateStore = openForWrite(version)

  override def getReadStore(version: Long): ReadStateStore = openStore(version)

  override def doMaintenance(): Unit = cleanup()
}

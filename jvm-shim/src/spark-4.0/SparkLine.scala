package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/** What differs between Spark lines outside the provider and the store: here, Spark 4.0. */
private[sparkstate] object SparkLine {
  /** `createAndInit` puts the run id in the provider's hadoop conf on this line. */
  def runIdOfTask(): Option[String] = None

  /** 4.0 does not validate commits (nothing to report to). */
  def reportCommit(version: Long, storeId: StateStoreId, hadoopConf: Configuration): Unit = ()

  def createProvider(providerId: StateStoreProviderId, keySchema: StructType, valueSchema: StructType,
                     numColsPrefixKey: Int, conf: StateStoreConf, hadoopConf: Configuration): StateStoreProvider =
    Spark4Provider.createProvider(providerId, keySchema, valueSchema, numColsPrefixKey, conf, hadoopConf)

  def entries(store: ReadStateStore): Iterator[UnsafeRowPair] = store.iterator()

  /** 4.0's read stores have no `release`: `abort` is how Spark itself finishes them. */
  def finishRead(store: ReadStateStore): Unit = store.abort()

  def put(store: StateStore, key: UnsafeRow, value: UnsafeRow): Unit = store.put(key, value)

  /** An empty write store of `version`: without `loadEmpty` (4.2+) only version 0 is one. */
  def emptyStoreToImport(provider: StateStoreProvider, version: Long): StateStore =
    Spark4Provider.emptyStoreWithoutLoadEmpty(provider, version, "4.0")
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType

/**
 * The `StateStore` contract of Spark 4.x (4.0-4.3) over [[StoreCore]]: every call names a column
 * family (only the default one is served), scans are `StateStoreIterator`s, multiple values per key
 * and merges are refused. Members that not every 4.x line declares are defined without `override`
 * (it is optional for abstract members); the line's `SparkStateStore` adds those a line gives a
 * default body (`release` from 4.1, `multiGet` from 4.2), which need it.
 */
private[sparkstate] abstract class Spark4Store(parts: StoreParts) extends StoreCore(parts) with StateStore {

  override def get(key: UnsafeRow, colFamilyName: String): UnsafeRow = {
    checkFamily(colFamilyName)
    readRow(key)
  }

  override def iterator(colFamilyName: String): StateStoreIterator[UnsafeRowPair] = {
    checkFamily(colFamilyName)
    closeable(scanAll())
  }

  override def prefixScan(prefixKey: UnsafeRow, colFamilyName: String): StateStoreIterator[UnsafeRowPair] = {
    checkFamily(colFamilyName)
    closeable(scanPrefix(prefixKey))
  }

  private def closeable(scan: MergedScan): StateStoreIterator[UnsafeRowPair] =
    new StateStoreIterator[UnsafeRowPair](scan, () => scan.close())

  override def put(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = {
    checkFamily(colFamilyName)
    writeRow(key, value)
  }

  override def remove(key: UnsafeRow, colFamilyName: String): Unit = {
    checkFamily(colFamilyName)
    deleteRow(key)
  }

  override def getStateStoreCheckpointInfo(): StateStoreCheckpointInfo =
    StateStoreCheckpointInfo(id.partitionId, committedVersion, None, None)

  // ------------------------------------------------------------------ column families: only "default"
  def allColumnFamilyNames: Set[String] = Set(StateStore.DEFAULT_COL_FAMILY_NAME)

  override def removeColFamilyIfExists(colFamilyName: String): Boolean = unsupported("column families")

  override def createColFamilyIfAbsent(
      colFamilyName: String, keySchema: StructType, valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec, useMultipleValuesPerKey: Boolean, isInternal: Boolean): Unit =
    unsupported("column families")

  override def valuesIterator(key: UnsafeRow, colFamilyName: String): Iterator[UnsafeRow] =
    unsupported("multiple values per key")

  def prefixScanWithMultiValues(prefixKey: UnsafeRow, colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    unsupported("multiple values per key")

  def iteratorWithMultiValues(colFamilyName: String): StateStoreIterator[UnsafeRowPair] =
    unsupported("multiple values per key")

  def putList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit =
    unsupported("multiple values per key")

  override def merge(key: UnsafeRow, value: UnsafeRow, colFamilyName: String): Unit = unsupported("merge")

  def mergeList(key: UnsafeRow, values: Array[UnsafeRow], colFamilyName: String): Unit = unsupported("merge")

  protected def checkFamily(name: String): Unit = {
    if (name != StateStore.DEFAULT_COL_FAMILY_NAME) unsupported(s"column family '$name'")
  }
}

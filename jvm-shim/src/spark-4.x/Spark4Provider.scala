package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.hadoop.conf.Configuration

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.StructType
import org.apache.spark.util.NextIterator

/**
 * `init`, `getReadStore` and the change feed (`SupportsFineGrainedReplay`) of Spark 4.x over
 * [[ProviderCore]]. The line's `SparkStateProvider` adds `getStore`, the read-store upgrade and the
 * maintenance hook. The replay members take 4.0's and 4.1+'s signatures, without `override` (optional
 * for abstract members): on each line one of each pair implements the trait, the other is an overload.
 */
private[sparkstate] abstract class Spark4Provider extends ProviderCore with SupportsFineGrainedReplay {
  override def init(
      stateStoreId: StateStoreId,
      keySchema: StructType,
      valueSchema: StructType,
      keyStateEncoderSpec: KeyStateEncoderSpec,
      useColumnFamilies: Boolean,
      storeConfs: StateStoreConf,
      hadoopConf: Configuration,
      useMultipleValuesPerKey: Boolean,
      stateSchemaProvider: Option[StateSchemaProvider]): Unit = {
    if (useColumnFamilies) {
      throw new UnsupportedOperationException("spark-state does not support column families yet; they " +
        "are used by transformWithState, which Spark 4 allows only with its own RocksDB provider")
    }
    if (useMultipleValuesPerKey) {
      throw new UnsupportedOperationException("spark-state does not support multiple values per key yet")
    }
    if (storeConfs.enableStateStoreCheckpointIds) {
      throw new UnsupportedOperationException("spark-state does not support checkpoint format v2 " +
        "(spark.sql.streaming.stateStore.checkpointFormatVersion=2) yet; its commits are already atomic " +
        "and idempotent per version. Set spark.sql.streaming.stateStore.checkpointFormatVersion=1 for " +
        "queries that use spark-state.")
    }
    initStore(stateStoreId, keySchema, valueSchema, Spark4Provider.prefixColumns(keyStateEncoderSpec), storeConfs,
      hadoopConf)
  }

  override def getReadStore(version: Long, uniqueId: Option[String]): ReadStateStore = {
    rejectCheckpointId(uniqueId)
    openStore(version)
  }

  /** The change feed of versions `startVersion..endVersion` (Spark's `statestore` reader, `readChangeFeed`). */
  def getStateStoreChangeDataReader(startVersion: Long, endVersion: Long, colFamilyNameOpt: Option[String])
      : NextIterator[(RecordType.Value, UnsafeRow, UnsafeRow, Long)] = {
    colFamilyNameOpt.filter(_ != StateStore.DEFAULT_COL_FAMILY_NAME).foreach { family =>
      throw new UnsupportedOperationException(s"spark-state has no column family $family (it serves the default one)")
    }
    new ChangeDataReader(changesFile(startVersion, endVersion), keyCodec, valueFieldCount)
  }

  /** 4.1+: with the end version's checkpoint v2 id (refused). */
  def getStateStoreChangeDataReader(startVersion: Long, endVersion: Long, colFamilyNameOpt: Option[String],
      endVersionStateStoreCkptId: Option[String]): NextIterator[(RecordType.Value, UnsafeRow, UnsafeRow, Long)] = {
    rejectCheckpointId(endVersionStateStoreCkptId)
    getStateStoreChangeDataReader(startVersion, endVersion, colFamilyNameOpt)
  }

  /** The reader's `snapshotStartBatchId` option (a replay from a given snapshot): not supported. */
  def replayStateFromSnapshot(snapshotVersion: Long, endVersion: Long): StateStore = noSnapshotReplay

  /** 4.1+'s signature of [[replayStateFromSnapshot]]. */
  def replayStateFromSnapshot(snapshotVersion: Long, endVersion: Long, readOnly: Boolean,
      snapshotVersionStateStoreCkptId: Option[String], endVersionStateStoreCkptId: Option[String]): StateStore =
    noSnapshotReplay

  private def noSnapshotReplay: Nothing =
    throw new UnsupportedOperationException("spark-state does not support the statestore reader's " +
      "snapshotStartBatchId option (a replay from a given snapshot) yet: read with batchId, or readChangeFeed")
}

private[sparkstate] object Spark4Provider {
  /** Leading key columns prefix scans match on (0: none); other encoders are refused. */
  def prefixColumns(spec: KeyStateEncoderSpec): Int = spec match {
    case _: NoPrefixKeyStateEncoderSpec => 0
    case p: PrefixKeyScanStateEncoderSpec => p.numColsPrefixKey
    case other => throw new UnsupportedOperationException(s"spark-state does not support key encoder $other yet")
  }

  /** The key encoder of a store with `numColsPrefixKey` prefix columns (0: none). */
  def encoderSpec(keySchema: StructType, numColsPrefixKey: Int): KeyStateEncoderSpec =
    if (numColsPrefixKey > 0) PrefixKeyScanStateEncoderSpec(keySchema, numColsPrefixKey)
    else NoPrefixKeyStateEncoderSpec(keySchema)
}

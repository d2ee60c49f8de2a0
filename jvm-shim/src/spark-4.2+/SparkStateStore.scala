package org.apache.spark.sql.execution.streaming.state.sparkstate

import org.apache.spark.sql.catalyst.expressions.UnsafeRow

/** One task's store on Spark 4.2 and 4.3 (see [[Spark4Store]]): `release` and `multiGet` have default bodies there. */
private[sparkstate] final class SparkStateStore(parts: StoreParts) extends Spark4Store(parts) {

  override def release(): Unit = releaseStore()

  /** Point reads of several keys, in order (Spark's own default refuses; each is one `get`). */
  override def multiGet(keys: Array[UnsafeRow], colFamilyName: String): Iterator[UnsafeRow] = {
    checkFamily(colFamilyName)
    keys.iterator.map(readRow)
  }
}

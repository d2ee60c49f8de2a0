package org.apache.spark.sql.execution.streaming.state.sparkstate

/** One task's store on Spark 4.1 (see [[Spark4Store]]): `release` has a default body there. */
private[sparkstate] final class SparkStateStore(parts: StoreParts) extends Spark4Store(parts) {

  override def release(): Unit = releaseStore()
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

/** One task's store on Spark 4.0 (see [[Spark4Store]]). */
private[sparkstate] final class SparkStateStore(parts: StoreParts) extends Spark4Store(parts)

package org.apache.spark.sql.execution.streaming.state.sparkstate

/**
 * What the Python worker serves to this JVM (implemented by `spark_state.provider.service.StoreService`
 * and called through Py4J callbacks). Every method returns a JSON object as a string; a failed call
 * returns `{"error": <python exception class>, "message": ..., "traceback": ...}` instead of throwing,
 * so that the task fails with the Python message.
 *
 * These are control calls, a handful per task: data never crosses here row by row. An epoch's writes
 * travel as one Arrow IPC file whose path `commit` receives (see [[ChangeBuffer]]).
 */
trait PythonStoreService {
  def ping(): String

  /**
   * Make the instance hold `version`; replies `version`, `commitId`, `numKeys`, `memoryBytes`, `restore`, `ttl`,
   * and, when `viewJson` ([[ViewRequest]]) says the JVM lacks that version or wants a refresh, `viewPath`
   * (rocksdb: an exported checkpoint) or `heapPath` (hashmap: an Arrow file of every data entry).
   */
  def load(instanceId: String, checkpoint: String, optionsJson: String, version: Long, viewJson: String): String

  /**
   * Commit the changes file on top of `version`; replies `version`, `commitId`, `numKeys`, `memoryBytes`,
   * `ttl`, `commit` metrics, and `view`: what the commit changed, for the JVM's views ([[CommitDelta]]).
   * `nowMs` is the processing time the load reply gave for this batch (TTL), or -1.
   */
  def commit(instanceId: String, checkpoint: String, optionsJson: String, version: Long, changesPath: String,
      nowMs: Long): String

  /** Maintenance on another thread than tasks; `kind` is "cleanup". */
  def maintenance(instanceId: String, kind: String): String

  def close(instanceId: String): String

  /**
   * Write the changes committed versions `startVersion..endVersion` of the store at `checkpoint` made into
   * the Arrow file `outPath` (the change feed file of `spark_state/provider/protocol.py`); replies `rows`.
   * Reads committed copies only (Spark's `statestore` reader with `readChangeFeed`).
   */
  def changes(checkpoint: String, optionsJson: String, startVersion: Long, endVersion: Long, outPath: String): String
}

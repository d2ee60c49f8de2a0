package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.{File, FileOutputStream}

import org.apache.arrow.vector.{BigIntVector, TinyIntVector, VarBinaryVector, VectorSchemaRoot}
import org.apache.arrow.vector.ipc.ArrowFileWriter
import org.apache.arrow.vector.types.pojo.{ArrowType, Field, FieldType, Schema}

import org.apache.spark.sql.util.ArrowUtils

/**
 * Writes a changes file (Arrow IPC file format; schema in `spark_state/provider/protocol.py`) row by
 * row, in record batches of at most [[ChangesFileWriter.BatchRows]] rows and about
 * [[ChangesFileWriter.BatchBytes]] bytes: the rows of one batch are held (by reference) until it is
 * written, so memory follows the batch, not the epoch. Rows must come in the order the file states
 * (ascending key). [[finish]] ends the file and returns its row count; [[close]] releases the Arrow
 * memory either way.
 */
private[sparkstate] final class ChangesFileWriter(file: File) extends AutoCloseable {
  import ChangesFileWriter._

  private val allocator = ArrowUtils.rootAllocator.newChildAllocator("spark-state-commit", 0, Long.MaxValue)
  private val root = VectorSchemaRoot.create(ChangesSchema, allocator)
  private val out = new FileOutputStream(file)
  private val writer = new ArrowFileWriter(root, null, out.getChannel)
  writer.start()
  private val opVector = root.getVector("op").asInstanceOf[TinyIntVector]
  private val keyVector = root.getVector("key").asInstanceOf[VarBinaryVector]
  private val valueVector = root.getVector("value").asInstanceOf[VarBinaryVector]
  private val priorVector = root.getVector("prior").asInstanceOf[TinyIntVector]
  private val stampVector = root.getVector("prior_stamp").asInstanceOf[BigIntVector]

  private val ops = new Array[Byte](BatchRows)
  private val keys = new Array[Array[Byte]](BatchRows)
  private val values = new Array[Array[Byte]](BatchRows)
  private val valueOffsets = new Array[Int](BatchRows)
  private val valueLengths = new Array[Int](BatchRows)
  private val priors = new Array[Byte](BatchRows)
  private val stamps = new Array[Long](BatchRows)
  private var n = 0
  private var keyBytes = 0L
  private var valueBytes = 0L
  private var rows = 0
  private var closed = false

  /**
   * One row: `op` ([[ChangeBuffer.OpPut]], `OpDelete`, `OpTouch`), the key, the value bytes
   * `value(valueOffset until valueOffset + valueLength)` (ignored for a delete), and what committed
   * state held (`prior` 1 / 0 / -1, `priorStamp`). The arrays must not change until the file is finished.
   */
  def add(op: Int, key: Array[Byte], value: Array[Byte], valueOffset: Int, valueLength: Int,
          prior: Int, priorStamp: Long): Unit = {
    ops(n) = op.toByte
    keys(n) = key
    values(n) = value
    valueOffsets(n) = valueOffset
    valueLengths(n) = if (op == ChangeBuffer.OpDelete) 0 else valueLength
    priors(n) = prior.toByte
    stamps(n) = priorStamp
    keyBytes += key.length
    valueBytes += valueLengths(n)
    n += 1
    if (n == BatchRows || keyBytes + valueBytes >= BatchBytes) writeBatch()
  }

  /** End the file; returns the number of rows written. */
  def finish(): Int = {
    if (n > 0) writeBatch()
    writer.end()
    writer.close()
    rows
  }

  private def writeBatch(): Unit = {
    // Every vector sized exactly for this batch up front, so the unchecked setters never reallocate.
    opVector.allocateNew(n)
    priorVector.allocateNew(n)
    stampVector.allocateNew(n)
    keyVector.allocateNew(math.max(keyBytes, 1L), n)
    valueVector.allocateNew(math.max(valueBytes, 1L), n)
    var i = 0
    while (i < n) {
      opVector.set(i, ops(i))
      keyVector.set(i, keys(i))
      if (ops(i) == ChangeBuffer.OpDelete) valueVector.setNull(i)
      else valueVector.set(i, values(i), valueOffsets(i), valueLengths(i))
      priorVector.set(i, priors(i))
      stampVector.set(i, stamps(i))
      keys(i) = null
      values(i) = null
      i += 1
    }
    root.setRowCount(n)
    writer.writeBatch()
    root.clear()
    rows += n
    n = 0
    keyBytes = 0
    valueBytes = 0
  }

  override def close(): Unit = if (!closed) {
    closed = true
    out.close()
    root.close()
    allocator.close()
  }
}

private[sparkstate] object ChangesFileWriter {
  /** Most rows per record batch. */
  val BatchRows = 65536
  /** Key and value bytes after which a record batch is written (values may be large). */
  val BatchBytes: Long = 8L * 1024 * 1024

  val ChangesSchema: Schema = new Schema(java.util.Arrays.asList(
    new Field("op", FieldType.notNullable(new ArrowType.Int(8, true)), null),
    new Field("key", FieldType.notNullable(ArrowType.Binary.INSTANCE), null),
    new Field("value", FieldType.nullable(ArrowType.Binary.INSTANCE), null),
    new Field("prior", FieldType.notNullable(new ArrowType.Int(8, true)), null),
    new Field("prior_stamp", FieldType.notNullable(new ArrowType.Int(64, true)), null)))
}

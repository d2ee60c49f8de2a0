package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.{File, FileInputStream}

import org.apache.arrow.memory.BufferAllocator
import org.apache.arrow.vector.{BigIntVector, TinyIntVector, VarBinaryVector}
import org.apache.arrow.vector.ipc.ArrowFileReader

import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state.RecordType
import org.apache.spark.sql.util.ArrowUtils
import org.apache.spark.util.NextIterator

/**
 * The change feed of one store (Spark 4.0+'s `SupportsFineGrainedReplay.getStateStoreChangeDataReader`):
 * the rows of the worker's change feed file (`spark_state/provider/protocol.py`: version, op, stored key,
 * bare value) as `(PUT_RECORD | DELETE_RECORD, key row, value row or null, batch id)`, batch id =
 * version - 1, as Spark's own readers give them. Reads one Arrow batch at a time; `close` deletes the file.
 */
private[sparkstate] final class ChangeDataReader(file: File, codec: KeyCodec, valueFields: Int)
  extends NextIterator[(RecordType.Value, UnsafeRow, UnsafeRow, Long)] {

  private val allocator: BufferAllocator =
    ArrowUtils.rootAllocator.newChildAllocator("spark-state-change-feed", 0, Long.MaxValue)
  private val in = new FileInputStream(file)
  private val reader = new ArrowFileReader(in.getChannel, allocator)
  private var row = 0
  private var rows = 0

  override protected def getNext(): (RecordType.Value, UnsafeRow, UnsafeRow, Long) = {
    while (row >= rows) {
      if (!reader.loadNextBatch()) {
        finished = true
        return null
      }
      rows = reader.getVectorSchemaRoot.getRowCount
      row = 0
    }
    val root = reader.getVectorSchemaRoot
    val version = root.getVector("version").asInstanceOf[BigIntVector].get(row)
    val op = root.getVector("op").asInstanceOf[TinyIntVector].get(row)
    val key = codec.decode(root.getVector("key").asInstanceOf[VarBinaryVector].get(row))
    val values = root.getVector("value").asInstanceOf[VarBinaryVector]
    val value = if (values.isNull(row)) null else KeyCodec.valueRow(values.get(row), valueFields)
    row += 1
    (if (op == ChangeDataReader.Put) RecordType.PUT_RECORD else RecordType.DELETE_RECORD, key, value, version - 1)
  }

  override protected def close(): Unit = {
    try reader.close()
    finally {
      in.close()
      allocator.close()
      file.delete()
    }
  }
}

private[sparkstate] object ChangeDataReader {
  /** The op of a put in the change feed file (a delete is 1). */
  val Put: Byte = 0
}

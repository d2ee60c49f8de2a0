package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.{File, FileInputStream, FileOutputStream}

import org.apache.arrow.vector.{VarBinaryVector, VectorSchemaRoot}
import org.apache.arrow.vector.ipc.{ArrowFileReader, ArrowFileWriter}
import org.apache.arrow.vector.types.pojo.{ArrowType, Field, FieldType, Schema}

import org.apache.spark.sql.util.ArrowUtils

/**
 * The JVM's one reader and one writer of `(key binary[, value binary])` Arrow IPC files: the files
 * the worker writes for the JVM (expired keys, a reloaded state, a shipped view) and those the
 * operations bridge exchanges with Python (a store's rows exported or imported; the savepoint's
 * state file schema). The provider's changes files have a schema of their own
 * ([[ChangesFileWriter]]).
 *
 * Memory: one record batch, of at most [[BatchRows]] rows, in Arrow buffers of a child allocator
 * closed with the file.
 */
private[sparkstate] object ArrowRows {
  /** Rows per record batch written. */
  val BatchRows = 65536

  /** `(key binary not null, value binary not null)`. */
  val KeyValueSchema = new Schema(java.util.Arrays.asList(
    new Field("key", FieldType.notNullable(ArrowType.Binary.INSTANCE), null),
    new Field("value", FieldType.notNullable(ArrowType.Binary.INSTANCE), null)))

  /**
   * Call `f(key, value)` for every row (value null without `withValues`, which reads the `key`
   * column alone); returns the row count. `delete`: remove the file afterwards, read or not.
   */
  def foreach(file: File, withValues: Boolean, delete: Boolean = true)(f: (Array[Byte], Array[Byte]) => Unit): Long = {
    val allocator = ArrowUtils.rootAllocator.newChildAllocator(s"spark-state-read-${file.getName}", 0, Long.MaxValue)
    var rows = 0L
    try {
      val in = new FileInputStream(file)
      try {
        val reader = new ArrowFileReader(in.getChannel, allocator)
        try {
          val root = reader.getVectorSchemaRoot
          while (reader.loadNextBatch()) {
            val key = root.getVector("key").asInstanceOf[VarBinaryVector]
            val value = if (withValues) root.getVector("value").asInstanceOf[VarBinaryVector] else null
            var i = 0
            val n = root.getRowCount
            while (i < n) {
              f(key.get(i), if (value == null) null else value.get(i))
              i += 1
            }
            rows += n
          }
        } finally reader.close()
      } finally in.close()
    } finally {
      allocator.close()
      if (delete) file.delete()
    }
    rows
  }

  /**
   * Write `rows` to `file` in [[KeyValueSchema]], in record batches of [[BatchRows]] (one empty
   * batch when there are none: a reader finds the schema and no rows); returns the row count.
   */
  def write(file: File, rows: Iterator[(Array[Byte], Array[Byte])]): Long = {
    val allocator = ArrowUtils.rootAllocator.newChildAllocator(s"spark-state-write-${file.getName}", 0, Long.MaxValue)
    val root = VectorSchemaRoot.create(KeyValueSchema, allocator)
    val out = new FileOutputStream(file)
    var total = 0L
    try {
      val writer = new ArrowFileWriter(root, null, out.getChannel)
      writer.start()
      val key = root.getVector("key").asInstanceOf[VarBinaryVector]
      val value = root.getVector("value").asInstanceOf[VarBinaryVector]
      var wrote = false
      while (rows.hasNext || !wrote) {
        root.allocateNew()
        var n = 0
        while (n < BatchRows && rows.hasNext) {
          val (k, v) = rows.next()
          key.setSafe(n, k)
          value.setSafe(n, v)
          n += 1
        }
        root.setRowCount(n)
        writer.writeBatch()
        total += n
        wrote = true
      }
      writer.end()
      writer.close()
    } finally {
      root.close()
      out.close()
      allocator.close()
    }
    total
  }
}

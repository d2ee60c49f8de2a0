package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.File
import java.util.{Arrays => JArrays, UUID}

import scala.collection.mutable.ArrayBuffer
import scala.jdk.CollectionConverters._

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.UnsafeRow
import org.apache.spark.sql.execution.streaming.state._
import org.apache.spark.sql.types.{DataType, StructType}

/**
 * What `spark_state.ops.migrate` needs from Spark's own state store providers, called from the
 * driver through Py4J: Spark's providers read and write their own formats, so nothing here parses
 * a `.delta`, `.snapshot` or RocksDB zip.
 *
 *  - [[exportStore]] reads one store at one version with any provider (`createAndInit`,
 *    `getReadStore(version)`, `iterator`) and writes its rows in spark-state's stored layout
 *    (`[key group u16][Spark hash i32][UnsafeRow]`, see [[KeyCodec]]; values as their UnsafeRow)
 *    to an Arrow IPC file `(key binary, value binary)`, the savepoint's state file schema.
 *    Invariant: the file's rows are in strictly ascending unsigned-bytewise key order (the
 *    savepoint's row order), whatever order the provider iterates in (HDFS: a hash map), so
 *    the reader streams it batch by batch. The heap holds at most one chunk of rows (about
 *    `chunkBytes`, by default [[MemoryBudget.exportChunkBytes]]: 32 MB of a 1 GB driver, which
 *    sorts in well under a second and keeps a store of several GB to a few hundred runs; Spark's
 *    HDFS provider holds its whole store in the heap anyway): a store that fits is sorted in the
 *    heap and written; a larger one is written as sorted runs ([[SpillRuns]], in a directory beside the
 *    output file, deleted at the end) whose ordered merge is then written.
 *  - [[importStore]] writes one store at one version with Spark's HDFS or RocksDB provider from such
 *    a file: the header (and the 8-byte TTL stamp of stamped values) is dropped and system keys
 *    (`0xFF...`: the TTL index and markers, which Spark's providers do not have) are skipped.
 *    RocksDB: `getStore(version - 1, loadEmpty = true)`, puts, `commit()` -- the path Spark's offline
 *    repartition uses (Spark 4.2+; older lines have no `loadEmpty`: version 1 only, see [[SparkLine]]).
 *    HDFS (no `loadEmpty`): version `version - 1` is made an empty snapshot, then
 *    `getStore(version - 1)`, puts, `commit()` writes `<version>.delta` through the provider. The
 *    empty snapshot is the bytes the provider itself writes for a commit without changes (a
 *    delta of no records and a snapshot of no rows are the same stream: the end marker alone).
 *
 * The SQL confs of the checkpoint's offset log (compression codec, RocksDB format version, ...) are
 * set on a clone of the session's conf, as the state data source does.
 */
object OpsBridge {

  private def storeConf(confs: java.util.Map[String, String]): StateStoreConf = {
    val sqlConf = SparkSession.active.sessionState.conf.clone()
    confs.asScala.foreach { case (k, v) => sqlConf.setConfString(k, v) }
    StateStoreConf(sqlConf)
  }

  private def open(stateRoot: String, operatorId: Long, partition: Int, storeName: String, keySchemaJson: String,
                   valueSchemaJson: String, numColsPrefixKey: Int, providerClass: String,
                   confs: java.util.Map[String, String]): (StateStoreProvider, KeyCodec, StructType, StructType) = {
    val keySchema = DataType.fromJson(keySchemaJson).asInstanceOf[StructType]
    val valueSchema = DataType.fromJson(valueSchemaJson).asInstanceOf[StructType]
    val withProvider = new java.util.HashMap[String, String](confs)
    withProvider.put("spark.sql.streaming.stateStore.providerClass", providerClass)
    val conf = storeConf(withProvider)
    val id = StateStoreId(stateRoot, operatorId, partition, storeName)
    val hadoopConf = SparkSession.active.sessionState.newHadoopConf()
    val provider = SparkLine.createProvider(StateStoreProviderId(id, UUID.randomUUID()), keySchema, valueSchema,
      numColsPrefixKey, conf, hadoopConf)
    (provider, new KeyCodec(keySchema, numColsPrefixKey, storeName), keySchema, valueSchema)
  }

  /**
   * Heap bytes a held row takes besides its key and value bytes: two array headers (and their
   * padding), its slots in the chunk's arrays and the copy sorted, and the sort's long and index.
   */
  private val RowOverhead = 64

  /**
   * Read `version` of a store with `providerClass`; write its rows to `out` in ascending unsigned key
   * order (see the class comment), holding at most about `chunkBytes` of them in the heap (0: the
   * budget's [[MemoryBudget.exportChunkBytes]]). Returns the row count and the number of sorted runs
   * written to disk (0 when the store fit in one chunk).
   */
  def exportStore(stateRoot: String, operatorId: Long, partition: Int, storeName: String, version: Long,
                  keySchemaJson: String, valueSchemaJson: String, numColsPrefixKey: Int, providerClass: String,
                  confs: java.util.Map[String, String], out: String, chunkBytes: Long): Array[Long] = {
    require(chunkBytes >= 0, s"chunkBytes must be 0 (the default) or positive, got $chunkBytes")
    val (provider, codec, _, _) =
      open(stateRoot, operatorId, partition, storeName, keySchemaJson, valueSchemaJson, numColsPrefixKey,
        providerClass, confs)
    try {
      val store = provider.getReadStore(version)
      try {
        val rows = store.iterator().map(p => (codec.encode(p.key), KeyCodec.valueBytes(p.value)))
        writeSorted(new File(out), rows, if (chunkBytes > 0) chunkBytes else MemoryBudget.exportChunkBytes,
          s"store $storeName of operator $operatorId, partition $partition, version $version")
      } finally {
        SparkLine.finishRead(store)
      }
    } finally {
      provider.close()
    }
  }

  /**
   * Write `rows` (distinct keys, fresh arrays) to `file` in ascending unsigned key order, holding one
   * [[Chunk]] of them at a time. Returns the row count and the number of sorted runs written.
   */
  private def writeSorted(file: File, rows: Iterator[(Array[Byte], Array[Byte])], chunkBytes: Long,
                          what: String): Array[Long] = {
    val chunk = new Chunk(chunkBytes, what)
    chunk.fill(rows)
    if (!rows.hasNext) {
      Array(ArrowRows.write(file, chunk.sorted), 0L)
    } else {
      val runs = new SpillRuns(file.getAbsoluteFile.getParentFile)
      try {
        while (chunk.size > 0) {
          runs.writeRun { run =>
            chunk.sorted.foreach { case (k, v) => run.add(k, ChangeBuffer.OpPut, 0, 0L, v, 0, v.length) }
          }
          chunk.fill(rows)
        }
        val scan = runs.scan(null, null)
        val total = try {
          ArrowRows.write(file, new Iterator[(Array[Byte], Array[Byte])] {
            def hasNext: Boolean = scan.valid
            def next(): (Array[Byte], Array[Byte]) = {
              val row = (scan.key, SpillRuns.value(scan.value))
              scan.next()
              row
            }
          })
        } finally {
          scan.close()
        }
        // The merge keeps one row per key: fewer rows out than in means a key came in two runs.
        if (total != runs.entries) throw duplicateKey(what)
        Array(total, runs.count.toLong)
      } finally {
        runs.close()
      }
    }
  }

  private def duplicateKey(what: String) = new IllegalStateException(
    s"the provider gave a key twice when reading $what; a store's keys are distinct, so its files are " +
      "inconsistent: savepoint or migrate an earlier batch, or check the checkpoint's state files")

  /** Rows held in the heap until their key and value bytes, plus [[RowOverhead]] each, reach `bound`. */
  private final class Chunk(bound: Long, what: String) {
    private val keys = new ArrayBuffer[Array[Byte]]
    private val values = new ArrayBuffer[Array[Byte]]
    private var bytes = 0L

    def size: Int = keys.length

    /** Drop the rows held, then take rows from `rows` until the bound is reached or `rows` ends. */
    def fill(rows: Iterator[(Array[Byte], Array[Byte])]): Unit = {
      keys.clear()
      values.clear()
      bytes = 0L
      while (bytes < bound && rows.hasNext) {
        val (k, v) = rows.next()
        keys += k
        values += v
        bytes += k.length + v.length + RowOverhead
      }
    }

    /** The rows held, in strictly ascending unsigned key order (a key held twice fails). */
    def sorted: Iterator[(Array[Byte], Array[Byte])] = {
      val ks = keys.toArray
      val order = SortedWrites.ascendingOrder(ks, ks.length)
      var i = 1
      while (i < order.length) {
        if (JArrays.equals(ks(order(i - 1)), ks(order(i)))) throw duplicateKey(what)
        i += 1
      }
      order.iterator.map(j => (ks(j), values(j)))
    }
  }

  /**
   * An empty write store of `version` for an import into Spark's RocksDB provider: `loadEmpty` where the
   * line has it (4.2+); before, version 0 is empty and later versions cannot be made so through the provider.
   */
  private def emptyStoreToImport(provider: StateStoreProvider, version: Long): StateStore =
    SparkLine.loadEmpty(provider, version).getOrElse {
      if (version != 0) {
        throw new UnsupportedOperationException(s"writing version ${version + 1} of a store with Spark's RocksDB " +
          s"provider needs Spark 4.2 or newer (loadEmpty); Spark ${org.apache.spark.SPARK_VERSION} can write " +
          "version 1 only. Restore or migrate to spark-state's provider, or to Spark's HDFS provider, instead")
      }
      provider.getStore(0)
    }

  /** Write `version` of a store with Spark's HDFS or RocksDB provider from the rows in `in`. */
  def importStore(stateRoot: String, operatorId: Long, partition: Int, storeName: String, version: Long,
                  keySchemaJson: String, valueSchemaJson: String, numColsPrefixKey: Int, providerClass: String,
                  confs: java.util.Map[String, String], in: String, stamped: Boolean): Long = {
    require(version >= 1, s"version must be at least 1, got $version")
    val (provider, codec, keySchema, valueSchema) =
      open(stateRoot, operatorId, partition, storeName, keySchemaJson, valueSchemaJson, numColsPrefixKey,
        providerClass, confs)
    try {
      val store = provider match {
        case _: HDFSBackedStateStoreProvider =>
          if (version > 1) writeEmptySnapshot(provider, version - 1, stateRoot, operatorId, storeName, keySchema,
            valueSchema, confs)
          provider.getStore(version - 1)
        case _ => emptyStoreToImport(provider, version - 1)
      }
      var rows = 0L
      try {
        val valueFields = valueSchema.length
        ArrowRows.foreach(new File(in), withValues = true, delete = false) { (k, v) =>
          if (k.length > 0 && k(0) != 0xff.toByte) {
            val offset = if (stamped) 8 else 0
            store.put(codec.decode(k).copy(), KeyCodec.valueRow(v, offset, valueFields).copy())
            rows += 1
          }
        }
        val committed = store.commit()
        require(committed == version, s"the provider committed version $committed, expected $version")
      } catch {
        case e: Throwable =>
          if (!store.hasCommitted) store.abort()
          throw e
      }
      rows
    } finally {
      provider.close()
    }
  }

  /** Make `version` of an HDFS-provider store an empty snapshot (see the class comment). */
  private def writeEmptySnapshot(target: StateStoreProvider, version: Long, stateRoot: String, operatorId: Long,
                                 storeName: String, keySchema: StructType, valueSchema: StructType,
                                 confs: java.util.Map[String, String]): Unit = {
    val hadoopConf = SparkSession.active.sessionState.newHadoopConf()
    val tmpRoot = new Path(stateRoot, s"_spark_state_tmp_${UUID.randomUUID()}")
    val fs = tmpRoot.getFileSystem(hadoopConf)
    try {
      val (tmp, _, _, _) = open(tmpRoot.toString, 0, 0, StateStoreId.DEFAULT_STORE_NAME, keySchema.json,
        valueSchema.json, 0, classOf[HDFSBackedStateStoreProvider].getName, confs)
      try {
        val empty = tmp.getStore(0)
        empty.commit()
      } finally {
        tmp.close()
      }
      val delta = new Path(tmpRoot, "0/0/1.delta")
      val snapshot = new Path(target.stateStoreId.storeCheckpointLocation(), s"$version.snapshot")
      org.apache.hadoop.io.IOUtils.copyBytes(fs.open(delta), fs.create(snapshot, true), 65536, true)
    } finally {
      fs.delete(tmpRoot, true)
    }
  }
}

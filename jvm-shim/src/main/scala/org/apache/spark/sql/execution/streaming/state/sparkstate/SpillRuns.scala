package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.File
import java.util.{Arrays => JArrays, UUID}

import org.rocksdb.{CompressionType, EnvOptions, IngestExternalFileOptions, Options, ReadOptions, RocksDB, SstFileWriter}

import org.apache.spark.util.Utils

/**
 * The part of one epoch's pending writes that outgrew the heap ([[ChangeBuffer]] spills when its
 * share of the memory budget is used up): sorted runs, each written as an SST file and ingested into
 * a private RocksDB in a temporary directory. A later run wins over an earlier one for the same key
 * (ingestion gives each file a newer sequence number), and the heap's writes win over every run.
 * The database serves point reads (bloom filters, the JVM's shared block cache), ordered scans (its
 * iterator merges the runs) and the commit's one ordered pass; it is deleted with the epoch.
 *
 * Entry layout (the value stored under the state key; the fields of a changes-file row, see
 * `spark_state/provider/protocol.py`):
 * {{{
 *   [op int8][prior int8][prior_stamp int64 big-endian][value bytes]
 * }}}
 * `op` is put, delete or touch (an OnReadAndWrite read: `value` is the value read, its TTL stamp
 * stripped); `prior` 1 / 0 / -1 and `prior_stamp` say what committed state held, as far as the
 * epoch's reads found out; a delete has no value bytes.
 *
 * Thread-safety: runs are written by one thread at a time (the buffer's lock); reads and scans may
 * come from any thread; [[close]] only after every scan closed.
 */
private[sparkstate] final class SpillRuns(parent: File) {
  import SpillRuns._

  private val dir = new File(parent, s"spill-${UUID.randomUUID()}")
  private val options = new Options()
    .setCreateIfMissing(true)
    .setTableFormatConfig(RocksResources.tableConfig)
    .setLogger(RocksResources.silentLogger)
    .setCompressionType(CompressionType.NO_COMPRESSION) // read once or twice, then deleted
    // Runs overlap (keys are hashed), so each lands in L0: let compaction merge them in the background,
    // and never stall an ingestion on their number.
    .setLevel0FileNumCompactionTrigger(8)
    .setLevel0SlowdownWritesTrigger(NoStallL0Files)
    .setLevel0StopWritesTrigger(NoStallL0Files)
  private val db: RocksDB = {
    dir.getParentFile.mkdirs()
    RocksDB.open(options, dir.getPath)
  }
  private val envOptions = new EnvOptions()
  private val ingestOptions = new IngestExternalFileOptions()
    .setMoveFiles(true)
    .setAllowGlobalSeqNo(true) // runs overlap
  private var runs = 0
  private var closed = false

  /** Runs written so far. */
  def count: Int = runs

  /** Bytes of the run files written so far. */
  var fileBytes = 0L
  /** Entries written so far (a key in two runs counts twice). */
  var entries = 0L

  /**
   * Write one run: `fill` calls the writer's `add` in strictly ascending unsigned key order. An empty
   * run writes nothing.
   */
  def writeRun(fill: RunWriter => Unit): Unit = {
    val file = new File(dir, s"run-$runs.sst")
    val writer = new SstFileWriter(envOptions, options)
    val run = new RunWriter(writer)
    try {
      writer.open(file.getPath)
      fill(run)
      if (run.added > 0) {
        writer.finish()
        fileBytes += file.length()
        entries += run.added
        db.ingestExternalFile(JArrays.asList(file.getPath), ingestOptions)
        runs += 1
      }
    } finally {
      writer.close()
      file.delete() // moved into the database when ingested
    }
  }

  /** The entry of `key` (layout above), or null. */
  def get(key: Array[Byte]): Array[Byte] = db.get(key)

  /** Entries with `from <= key < until` (null: unbounded), ascending: `while (s.valid) { s.key; s.value; s.next() }`. */
  def scan(from: Array[Byte], until: Array[Byte]): ViewScan =
    RocksScan(db, new ReadOptions().setFillCache(false), from, until)

  def close(): Unit = if (!closed) {
    closed = true
    db.close()
    options.close()
    envOptions.close()
    ingestOptions.close()
    Utils.deleteRecursively(dir)
  }
}

private[sparkstate] object SpillRuns {
  /** Bytes of an entry before its value: op, prior, prior_stamp. */
  val HeaderBytes = 10
  /**
   * The runs' database's L0 slowdown and stop triggers, a file count no epoch reaches, so that RocksDB
   * never stalls an ingestion: the bound and its reason are the Python engine's
   * (`spark_state.engine.spill.NO_STALL_L0_FILES`; a unit test compares them).
   */
  val NoStallL0Files: Int = 1 << 20

  def op(entry: Array[Byte]): Int = entry(0)
  def prior(entry: Array[Byte]): Int = entry(1)
  def priorStamp(entry: Array[Byte]): Long = {
    var s = 0L
    var i = 2
    while (i < HeaderBytes) {
      s = (s << 8) | (entry(i) & 0xffL)
      i += 1
    }
    s
  }
  def valueLength(entry: Array[Byte]): Int = entry.length - HeaderBytes
  /** A copy of the entry's value bytes. */
  def value(entry: Array[Byte]): Array[Byte] = JArrays.copyOfRange(entry, HeaderBytes, entry.length)

  def encode(op: Int, prior: Int, priorStamp: Long, value: Array[Byte], valueOffset: Int, valueLength: Int): Array[Byte] = {
    val out = new Array[Byte](HeaderBytes + valueLength)
    out(0) = op.toByte
    out(1) = prior.toByte
    var i = 0
    while (i < 8) {
      out(2 + i) = (priorStamp >>> (8 * (7 - i))).toByte
      i += 1
    }
    if (valueLength > 0) System.arraycopy(value, valueOffset, out, HeaderBytes, valueLength)
    out
  }
}

/** Adds the entries of one run, in ascending key order (see [[SpillRuns]]). */
private[sparkstate] final class RunWriter(writer: SstFileWriter) {
  var added = 0L

  def add(key: Array[Byte], op: Int, prior: Int, priorStamp: Long,
          value: Array[Byte], valueOffset: Int, valueLength: Int): Unit = {
    writer.put(key, SpillRuns.encode(op, prior, priorStamp, value, valueOffset, valueLength))
    added += 1
  }
}

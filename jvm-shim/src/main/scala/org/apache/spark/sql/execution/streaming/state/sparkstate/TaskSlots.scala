package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, StandardCopyOption}

import org.apache.spark.{SparkConf, SparkEnv}

/**
 * The executor's task slots -- tasks it runs at once -- counted once, here, for the JVM and for the
 * Python processes of the executor. The rule ([[count]]):
 *
 *  1. `spark.executor.cores`, when set;
 *  2. else in local mode (the executor is the driver) the cores of `local[n]` (`local`: 1,
 *     `local[*]`: the machine's processors), and the `c` of `local-cluster[N,c,m]`;
 *  3. else the cores the cluster manager gave this executor, which its backend's command line
 *     carries (`--cores N`: standalone, where an executor takes all the worker's free cores and
 *     `spark.executor.cores` is unset; YARN; Kubernetes);
 *  4. else the machine's processors;
 *
 * divided by `spark.task.cpus`, at least 1. The conf alone undercounts on standalone (Spark's own
 * PySpark memory split has the same gap, SPARK-30299): a share "per slot" computed from it is given
 * once and used by every slot.
 *
 * Who is told: the provider's Python workers get their memory already divided by the JVM
 * ([[MemoryBudget.workerShare]], in every store's options); keyed functions run in Spark's own
 * Python workers, which the JVM cannot hand an argument, so [[publish]] writes the count and the
 * budget into [[FileName]] in the executor's first local directory, the one Spark passes its Python
 * workers first in `SPARK_LOCAL_DIRS` (`spark_state.memory.executor_figures` reads it; without the
 * file -- the plugin not installed -- Python applies its own fallback of the same rule).
 */
private[sparkstate] object TaskSlots {
  /** Written by [[publish]] in the executor's first local directory; read by `spark_state/memory.py`. */
  val FileName = "spark-state-executor.json"

  /** This executor's count (see the object's docstring). */
  lazy val current: Int = {
    val conf = Option(SparkEnv.get).map(_.conf).getOrElse(new SparkConf(false))
    count(conf, System.getProperty("sun.java.command", ""), Runtime.getRuntime.availableProcessors())
  }

  /** The rule, on a conf, the JVM's command line and the machine's processors. */
  def count(conf: SparkConf, command: String, processors: Int): Int = {
    val LocalN = """local\[(\d+|\*)(?:,\s*\d+)?\]""".r
    val LocalCluster = """local-cluster\[\d+,\s*(\d+),.*""".r
    val cores = conf.getOption("spark.executor.cores").map(_.trim.toInt).getOrElse {
      conf.get("spark.master", "") match {
        case "local" => 1
        case LocalN("*") => processors
        case LocalN(n) => n.toInt
        case LocalCluster(n) => n.toInt
        case _ => commandCores(command).getOrElse(processors)
      }
    }
    val perTask = math.max(1, conf.get("spark.task.cpus", "1").trim.toInt)
    math.max(1, cores / perTask)
  }

  /** The `--cores N` of an executor backend's command line (`sun.java.command`), if it has one. */
  def commandCores(command: String): Option[Int] = {
    val words = command.trim.split("\\s+")
    val at = words.indexOf("--cores")
    if (at >= 0 && at + 1 < words.length) scala.util.Try(words(at + 1).toInt).toOption.filter(_ > 0) else None
  }

  /**
   * Write the count and the budget for the executor's Python processes ([[SparkStatePlugin]], at
   * executor start). Written to a temporary file and moved, so a reader sees all of it or nothing.
   */
  def publish(): Unit = {
    val env = SparkEnv.get
    val dir = env.blockManager.diskBlockManager.localDirs.head
    val body = s"""{"taskSlots": $current, "budgetBytes": ${MemoryBudget.totalBytes}}"""
    val tmp = File.createTempFile(FileName, ".tmp", dir)
    Files.write(tmp.toPath, body.getBytes(StandardCharsets.UTF_8))
    Files.move(tmp.toPath, new File(dir, FileName).toPath, StandardCopyOption.ATOMIC_MOVE,
      StandardCopyOption.REPLACE_EXISTING)
  }
}

package org.apache.spark.sql.execution.streaming.state.sparkstate

import java.io.{File, RandomAccessFile}
import java.net.InetAddress
import java.nio.charset.StandardCharsets
import java.security.SecureRandom
import java.util.concurrent.{CountDownLatch, TimeUnit}

import com.fasterxml.jackson.databind.JsonNode
import py4j.GatewayServer

import org.apache.spark.SparkEnv
import org.apache.spark.internal.Logging
import org.apache.spark.util.Utils

/** Raised for every failure spark-state reports to Spark: the message says what happened and what to do. */
class SparkStateException(message: String, cause: Throwable = null) extends RuntimeException(message, cause)

/**
 * The executor's Python workers: a small pool of processes per executor JVM, one per task slot by
 * default, started in the background when the executor starts ([[SparkStatePlugin]], if enabled),
 * else on the first store load that needs one (never inside `init`, which Spark runs under an
 * executor-wide lock), and restarted if one died. A store is pinned to one worker
 * (by partition). Several workers, because RocksDB writes in rocksdict hold the GIL: with one process
 * the commits of concurrently running tasks would queue behind each other.
 *
 * Security: the Py4J gateway listens on the loopback address only and requires a 256-bit random token,
 * which the worker receives in its environment (not on its command line) and also requires on its own
 * callback server. Nothing is pickled in either direction: calls carry strings and paths.
 *
 * Lifetime: the worker blocks on its stdin, which this JVM holds open; when the JVM exits the pipe closes
 * and the worker exits too.
 */
private[sparkstate] object PythonWorker extends Logging {
  private val StartTimeoutMs = 120000L
  private val MaxDefaultWorkers = 4
  /** Same bound as `spark_state.provider.options.MAX_WORKERS_PER_EXECUTOR`. */
  private val MaxConfiguredWorkers = 64
  /** Spark conf (set when the session starts) overriding the number of workers per executor. */
  val WorkersConf = "spark.sql.streaming.stateStore.sparkState.workersPerExecutor"

  /** Number of workers per executor: the conf, else the executor's task slots ([[TaskSlots]]), at most 4. */
  lazy val slots: Int =
    SparkEnv.get.conf.getOption(WorkersConf).map(parseWorkers).getOrElse(math.min(TaskSlots.current, MaxDefaultWorkers))
  private def parseWorkers(raw: String): Int = {
    val n = try raw.trim.toInt catch { case _: NumberFormatException => -1 }
    if (n < 1 || n > MaxConfiguredWorkers) {
      throw new IllegalArgumentException(s"$WorkersConf must be a whole number of Python workers per " +
        s"executor, 1 to $MaxConfiguredWorkers, got '$raw'")
    }
    n
  }
  private lazy val current = new Array[Worker](slots)
  private lazy val locks = Array.fill(slots)(new Object)
  private val generation = new java.util.concurrent.atomic.AtomicInteger()

  /** Entry point the Python worker calls once it serves requests. */
  final class Registration(gatewayRef: => GatewayServer) {
    private val ready = new CountDownLatch(1)
    @volatile var service: PythonStoreService = _
    @volatile var pid: Long = -1

    def register(svc: PythonStoreService, callbackPort: Int, workerPid: Int): Unit = {
      gatewayRef.resetCallbackClient(InetAddress.getLoopbackAddress, callbackPort)
      service = svc
      pid = workerPid
      ready.countDown()
    }

    def awaitReady(ms: Long): Boolean = ready.await(ms, TimeUnit.MILLISECONDS)
  }

  final class Worker(
      val process: Process,
      val gateway: GatewayServer,
      val service: PythonStoreService,
      val pid: Long,
      val logFile: File) {
    def alive: Boolean = process.isAlive

    def stop(): Unit = {
      try process.getOutputStream.close() catch { case _: Exception => }
      process.destroy()
      if (!process.waitFor(5, TimeUnit.SECONDS)) process.destroyForcibly()
      gateway.shutdown()
    }

    def describe: String = s"spark-state Python worker (pid $pid, log $logFile)"
  }

  /** Directory of this JVM's spark-state files (worker log, secondaries, changes files, local DBs). */
  lazy val baseDir: File = {
    val conf = SparkEnv.get.conf
    Utils.createTempDir(Utils.getLocalDir(conf), "spark-state")
  }

  /** The worker of `slot` (0 until slots), started or restarted as needed. */
  def get(slot: Int): Worker = locks(slot).synchronized {
    val w = current(slot)
    if (w != null && w.alive) return w
    if (w != null) {
      logWarning(s"${w.describe} is gone (exit code ${w.process.exitValue()}); starting a new one. " +
        s"Last output:\n${tail(w.logFile)}")
      w.stop()
    }
    val started = start(slot)
    current(slot) = started
    started
  }

  /**
   * Start every slot's worker in the background, one daemon thread per slot ([[SparkStatePlugin]], at
   * executor start). A store load that needs a worker meanwhile waits on that slot's lock and gets
   * the worker being started. Failures are logged, never thrown: the first load retries the start and
   * fails its task with the whole message (a bad `workersPerExecutor` included).
   */
  def prestart(): Unit = {
    val n = try slots catch {
      case e: Exception =>
        logWarning(s"spark-state did not start its Python workers at executor start: ${e.getMessage}")
        return
    }
    (0 until n).foreach { slot =>
      val starter = new Thread(() => {
        try get(slot) catch {
          case e: Exception => logWarning(s"spark-state could not start Python worker $slot at executor start " +
            s"(the first store load that needs it tries again): ${e.getMessage}")
        }
      }, s"spark-state-worker-start-$slot")
      starter.setDaemon(true)
      starter.start()
    }
  }

  /** The running worker of `slot`, if any: maintenance never starts one. */
  def running(slot: Int): Option[Worker] = Option(current(slot)).filter(_.alive)

  /**
   * Call the worker of `slot` and parse its JSON reply. A worker that died since the last call is
   * replaced first (the new one restores from the checkpoint); one that dies during the call, or a
   * failed call, becomes a [[SparkStateException]] that fails the task, and Spark's retry restores.
   */
  def call(slot: Int, what: String)(f: PythonStoreService => String): JsonNode = {
    val w = get(slot)
    callOn(w, what)(f)
  }

  def callOn(w: Worker, what: String)(f: PythonStoreService => String): JsonNode = {
    val reply = try f(w.service) catch {
      case e: Exception =>
        // A killed worker may take a moment to be reaped: wait briefly before deciding whether
        // it died or the call failed for another reason.
        if (w.process.waitFor(2, TimeUnit.SECONDS)) {
          throw new SparkStateException(s"${w.describe} died during $what (exit code " +
            s"${w.process.exitValue()}). The task fails and its retry restores the state from the " +
            s"checkpoint. Last output of the worker:\n${tail(w.logFile)}", e)
        }
        throw new SparkStateException(s"spark-state: $what failed in ${w.describe}: ${e.getMessage}", e)
    }
    val node = Json.parse(reply)
    if (node.has("error")) {
      throw new SparkStateException(s"spark-state: $what failed: ${Json.text(node, "error")}: " +
        s"${Json.text(node, "message")}\nPython traceback:\n${Json.text(node, "traceback")}")
    }
    node
  }

  private def pythonExecutable(): String = {
    val conf = SparkEnv.get.conf
    conf.getOption("spark.pyspark.python")
      .orElse(sys.env.get("PYSPARK_PYTHON"))
      .getOrElse("python3")
  }

  private def newToken(): String = {
    val bytes = new Array[Byte](32)
    new SecureRandom().nextBytes(bytes)
    bytes.map("%02x".format(_)).mkString
  }

  private def start(slot: Int): Worker = {
    val gen = generation.incrementAndGet()
    val token = newToken()
    var gateway: GatewayServer = null
    val registration = new Registration(gateway)
    val loopback = InetAddress.getLoopbackAddress
    // Py4J resolves the callback interface through the context class loader: make sure it is the one
    // that loaded this shim (spark.jars), whatever thread happens to start the worker.
    val thread = Thread.currentThread()
    val previousLoader = thread.getContextClassLoader
    thread.setContextClassLoader(getClass.getClassLoader)
    try {
      gateway = new GatewayServer.GatewayServerBuilder()
        .entryPoint(registration)
        .javaPort(0)
        .javaAddress(loopback)
        .callbackClient(GatewayServer.DEFAULT_PYTHON_PORT, loopback, token)
        .authToken(token)
        .build()
      gateway.start(true)
    } finally {
      thread.setContextClassLoader(previousLoader)
    }
    val python = pythonExecutable()
    val logFile = new File(baseDir, s"worker-$slot-$gen.log")
    val builder = new ProcessBuilder(python, "-m", "spark_state.provider.worker")
    builder.environment().put("SPARK_STATE_GATEWAY_PORT", gateway.getListeningPort.toString)
    builder.environment().put("SPARK_STATE_GATEWAY_TOKEN", token)
    builder.environment().put("PYTHONUNBUFFERED", "1")
    builder.redirectErrorStream(true)
    builder.redirectOutput(ProcessBuilder.Redirect.appendTo(logFile))
    val process = try builder.start() catch {
      case e: java.io.IOException =>
        gateway.shutdown()
        throw new SparkStateException(s"spark-state could not start its Python worker with '$python': " +
          s"${e.getMessage}. Set spark.pyspark.python (or PYSPARK_PYTHON) to a Python that has spark-state " +
          "installed.", e)
    }
    val deadline = System.currentTimeMillis() + StartTimeoutMs
    while (!registration.awaitReady(100)) {
      if (!process.isAlive || System.currentTimeMillis() > deadline) {
        process.destroyForcibly()
        gateway.shutdown()
        val output = tail(logFile)
        val hint = if (output.contains("No module named")) {
          s" The interpreter '$python' does not have spark-state installed: install it there " +
            "(pip install spark-state, or pip install -e <checkout>), or point spark.pyspark.python / " +
            "PYSPARK_PYTHON at an interpreter that has it."
        } else ""
        throw new SparkStateException(s"spark-state: the Python worker '$python -m spark_state.provider.worker' " +
          s"${if (process.isAlive) "did not register in time" else s"exited with code ${process.exitValue()}"}." +
          s"$hint Worker output ($logFile):\n$output")
      }
    }
    val worker = new Worker(process, gateway, registration.service, registration.pid, logFile)
    logInfo(s"started ${worker.describe} with $python")
    worker
  }

  sys.addShutdownHook {
    if (slots > 0) current.filter(_ != null).foreach(_.stop())
  }

  /** The last few KB of a log file, for error messages. */
  def tail(file: File, bytes: Int = 4000): String = {
    if (!file.exists()) return "(no output)"
    val raf = new RandomAccessFile(file, "r")
    try {
      val start = math.max(0L, raf.length() - bytes)
      val buf = new Array[Byte]((raf.length() - start).toInt)
      raf.seek(start)
      raf.readFully(buf)
      new String(buf, StandardCharsets.UTF_8)
    } finally raf.close()
  }
}

"""The application of the kill test (``tests/reliability/killtest.py``): two streaming queries in
one Spark application, run in its own process so the test can SIGKILL all of it.

* ``agg``: a streaming aggregation (count and sum per key, update mode) on spark-state's
  provider: its state lives in the provider's Python workers.
* ``keyed``: ``keyed_process`` with :class:`process_fns.AllStates` (every keyed state type):
  its state lives in PySpark's own Python workers.

Both read ``<workdir>/input`` (one parquet file per micro-batch, ``maxFilesPerTrigger=1``,
``availableNow``; columns ``k``, ``v`` and a global row number ``seq``) and write each batch's
sorted rows to ``<workdir>/out/<query>/<batch>.json`` by rename, so a batch that a restart runs
again overwrites its earlier output (an idempotent sink, as foreachBatch requires). Small
snapshot interval and state retention and a 1 s maintenance interval, so snapshots, cleanup
and maintenance happen every few batches; Spark's own logs keep every batch, so the test can
read which input files each batch read.

A whole-application kill between the file source's log write and the offset log write of a
batch makes Spark's next batch read two files (it is exactly-once per file, not per batch
boundary). ``keyed_process`` sees a batch's rows in ``seq`` order whatever the batch holds
(one input partition, sorted in Python), so the test's model can follow such batches. Crash points come
from ``SPARK_STATE_TESTING_CRASH_POINTS`` in the environment (inherited by the executor JVM
and from it by every Python worker).

Usage: crash_job.py WORKDIR. Prints ``BATCH <query> <id>`` after each batch's output is
written and ``DONE`` once both queries have drained the input; exits 1 with the error if a
query fails.
"""

from __future__ import annotations

import json
import os
import sys
import threading

_TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for sub in ("spark", "process"):
    sys.path.insert(0, os.path.join(_TESTS, sub))

SHUFFLE_PARTITIONS = 2
KEYED_PARALLELISM = 2
INPUT_SCHEMA = "k string, v bigint, seq bigint"
SNAPSHOT_INTERVAL = 2
RETAINED = 3


def session(workdir: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_state

    builder = (
        # Up to 10 attempts per task: each worker kill fails the tasks it was serving.
        SparkSession.builder.master("local[2,10]").appName("spark-state-kill-test")
        .config("spark.sql.shuffle.partitions", str(SHUFFLE_PARTITIONS))
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", os.path.join(workdir, "spark-local"))
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "1s")
    )
    options = {"snapshotInterval": str(SNAPSHOT_INTERVAL), "retainedVersions": str(RETAINED)}
    spark = spark_state.configure(builder, options=options).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _writer(workdir: str, query: str):
    out = os.path.join(workdir, "out", query)
    os.makedirs(out, exist_ok=True)
    lock = threading.Lock()

    def sink(batch_df, batch_id: int) -> None:
        from streaming_harness import plain, sort_rows

        rows = sort_rows(plain(r) for r in batch_df.collect())
        tmp = os.path.join(out, f".{batch_id}.json.tmp")
        with open(tmp, "w") as f:
            json.dump(rows, f)
        os.replace(tmp, os.path.join(out, f"{batch_id}.json"))
        with lock:
            print(f"BATCH {query} {batch_id}", flush=True)

    return sink


def _sorted_by_seq(batches):
    """The partition's rows in ``seq`` order (``mapInArrow``)."""
    import pyarrow as pa

    table = pa.Table.from_batches(list(batches))
    if table.num_rows:
        yield from table.sort_by("seq").to_batches()


def main(workdir: str) -> int:
    from pyspark.sql import functions as F

    from job_support import await_queries
    import process_fns
    from process_fns import ALL_STATES_OUTPUT, AllStates
    from spark_state import keyed_process
    from streaming_harness import ship_module_by_value

    spark = session(workdir)
    ship_module_by_value(process_fns)
    source = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(
        os.path.join(workdir, "input"))

    agg = (source.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
           .writeStream.outputMode("update").foreachBatch(_writer(workdir, "agg"))
           .option("checkpointLocation", os.path.join(workdir, "ckpt-agg")).trigger(availableNow=True).start())
    # Streaming forbids sortWithinPartitions: sort the batch's one partition in Python instead.
    in_order = source.coalesce(1).mapInArrow(_sorted_by_seq, source.schema)
    keyed_df = keyed_process(in_order, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=KEYED_PARALLELISM,
                             state_location=os.path.join(workdir, "keyed-state"),
                             engine={"snapshotInterval": str(SNAPSHOT_INTERVAL), "retainedVersions": str(RETAINED)})
    keyed = (keyed_df.writeStream.outputMode("append").foreachBatch(_writer(workdir, "keyed"))
             .option("checkpointLocation", os.path.join(workdir, "ckpt-keyed")).trigger(availableNow=True).start())
    return await_queries(spark, (agg, keyed))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

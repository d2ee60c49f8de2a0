"""A streaming aggregation on spark-state, run in its own process so a test can SIGKILL it
(driver, executor and Python workers at once) in the middle of the stream and start it again.

Usage: kill_job.py WORKDIR run     -- process every input file (slowly: each batch sleeps),
                                      printing "BATCH <id>" after each, and at the end "LOADS <json>":
                                      the state operator's load figures of the run's first batch
       kill_job.py WORKDIR verify  -- print "RESULT <json>" with the final state read through
                                      Spark's state data source
"""

from __future__ import annotations

import json
import os
import sys
import time


def session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_state

    spark = spark_state.configure(
        SparkSession.builder.master("local[2]").appName("spark-state-kill-test")
        .config("spark.sql.shuffle.partitions", "3").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # Small snapshot interval: the kill can land between a snapshot and its manifest.
        .config("spark.sql.streaming.stateStore.sparkState.snapshotInterval", "2")
    ).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(workdir: str) -> None:
    from pyspark.sql import functions as F

    spark = session()

    def slow(batch_df, batch_id: int) -> None:
        batch_df.count()
        print(f"BATCH {batch_id}", flush=True)
        time.sleep(0.5)  # widen the window in which the test's kill lands mid-stream

    query = (spark.readStream.schema("k long, v long").option("maxFilesPerTrigger", 1)
             .json(os.path.join(workdir, "input"))
             .groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
             .writeStream.outputMode("update").foreachBatch(slow)
             .option("checkpointLocation", os.path.join(workdir, "ckpt")).trigger(availableNow=True).start())
    query.awaitTermination()
    first = min((p for p in query.recentProgress if p.stateOperators), key=lambda p: p.batchId)
    print("LOADS " + json.dumps({"batch": first.batchId, **dict(first.stateOperators[0].customMetrics)}), flush=True)
    print("DONE", flush=True)


def verify(workdir: str) -> None:
    spark = session()
    rows = spark.read.format("statestore").load(os.path.join(workdir, "ckpt")).collect()
    state = {r.key.k: [r.value[0], r.value[1]] for r in rows}
    print("RESULT " + json.dumps({"state": state}), flush=True)


if __name__ == "__main__":
    {"run": run, "verify": verify}[sys.argv[2]](sys.argv[1])

"""A streaming aggregation on spark-state over two executor JVMs (local-cluster[2,1,1024]).

After batch 2 one executor is removed, so its partitions move to the other executor and must
be restored from checkpoint storage there. Prints one ``RESULT <json>`` line.
Run by tests/spark/test_jobs.py in its own process (a second SparkContext cannot share the
test session's JVM).
"""

from __future__ import annotations

import json
import os
import sys
import time

from inputs import write_key_batches
from processes import state_workers


def main(workdir: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_state

    input_dir = os.path.join(workdir, "input")
    expected = write_key_batches(input_dir, batches=6, rows=400, keys=97, step=13)

    spark = spark_state.configure(
        SparkSession.builder.master("local-cluster[2,1,1024]").appName("spark-state-cluster-test")
        .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        # One Python worker per executor, so the test can count them (the default is one per slot).
        .config("spark.sql.streaming.stateStore.sparkState.workersPerExecutor", "1")
    ).getOrCreate()
    sc = spark.sparkContext
    sc.setLogLevel("ERROR")
    counts: dict[int, int] = {}
    events: dict = {"workers_before_kill": None, "killed": None, "executors_after_kill": None}

    def executor_ids() -> list[str]:
        return [e for e in sc._jsc.sc().getExecutorIds().mkString(",").split(",") if e]

    def sink(df, batch_id: int) -> None:
        for row in df.collect():
            counts[row["k"]] = row["count"]
        if batch_id == 2:
            events["workers_before_kill"] = len(state_workers())
            victim = executor_ids()[0]
            events["killed"] = victim
            sc._jsc.sc().killExecutor(victim)
            deadline = time.time() + 60
            while victim in executor_ids() and time.time() < deadline:
                time.sleep(0.5)
            events["executors_after_kill"] = executor_ids()

    # Wait until both executors have registered, so that the first batches use both.
    deadline = time.time() + 120
    while len(executor_ids()) < 2 and time.time() < deadline:
        time.sleep(0.5)
    query = (spark.readStream.schema("k long").option("maxFilesPerTrigger", 1).json(input_dir)
             .groupBy("k").count().writeStream.outputMode("update").foreachBatch(sink)
             .option("checkpointLocation", os.path.join(workdir, "ckpt")).trigger(availableNow=True).start())
    query.awaitTermination()
    restores = {p["batchId"]: p["stateOperators"][0]["customMetrics"]["sparkStateRestoresFromCheckpoint"]
                for p in query.recentProgress if p["stateOperators"]}
    loads = {p["batchId"]: dict(p["stateOperators"][0]["customMetrics"]) for p in query.recentProgress
             if p["stateOperators"]}
    result = dict(events, restores=restores, loads=loads, counts_match=counts == dict(expected),
                  keys=len(counts), total=sum(counts.values()))
    spark.stop()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

"""One micro-batch of millions of distinct keys on a small heap, then a batch that continues them.

The first big batch after an outage: ``KEYS`` distinct keys in batch 0 on a 512 MB driver (the
executor, in local mode), then batch 1 with 1,000 of those keys again and 1,000 new ones. The
query is ``groupBy("k").count()`` in update mode on spark-state's provider (``BACKEND``), or
``keyed_process``'s running count (``keyed``); every batch's output is written as parquet by
``foreachBatch`` (one action per batch) and checked afterwards: batch 0 counts every key once,
batch 1 counts the old keys twice and the new ones once.

Usage: big_batch_job.py WORKDIR rocksdb|hashmap|keyed KEYS [KEY=VALUE ...] (extra Spark confs).
Prints one ``RESULT <json>`` line: ``batches`` (ids), ``rows`` per batch, ``batch0_all_ones``,
``batch1`` (``{"2": n, "1": m}``: how many keys have which count), ``state_rows`` (the state's
rows after each batch), ``spills`` (spill runs per batch), ``memory_used_bytes``, ``peak_rss``
(the largest RSS of one provider worker and of one PySpark worker, in bytes), ``error`` (the
query's failure, if any).
"""

from __future__ import annotations

import json
import os
import sys
import threading

from processes import pyspark_workers, rss_bytes, state_workers

DRIVER_MEMORY = "512m"
AGAIN = 1000


def write_inputs(input_dir: str, keys: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(input_dir, exist_ok=True)
    rng = np.random.default_rng(3)
    first = rng.permutation(np.arange(keys, dtype=np.int64))
    second = np.concatenate([first[:AGAIN], np.arange(keys, keys + AGAIN, dtype=np.int64)])
    for i, column in enumerate((first, second)):
        path = os.path.join(input_dir, f"batch-{i}.parquet")
        pq.write_table(pa.table({"k": column}), path + ".tmp")
        os.utime(path + ".tmp", (1_700_000_000 + 10 * i,) * 2)  # the file source orders by mtime
        os.replace(path + ".tmp", path)


def main(workdir: str, mode: str, keys: int, confs: dict[str, str]) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_state

    input_dir, out_dir = os.path.join(workdir, "input"), os.path.join(workdir, "out")
    write_inputs(input_dir, keys)
    builder = (SparkSession.builder.master("local[2]").appName("spark-state-big-batch")
               .config("spark.driver.memory", DRIVER_MEMORY).config("spark.sql.shuffle.partitions", "4")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false"))
    options = {"backend": mode} if mode != "keyed" else {}
    spark = spark_state.configure(builder, options=options).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for key, value in confs.items():
        spark.conf.set(key, value)
    df = spark.readStream.schema("k bigint").option("maxFilesPerTrigger", 1).parquet(input_dir)
    if mode == "keyed":
        from pyspark.sql.types import LongType

        from spark_state.process import KeyedProcessFunction
        from spark_state.state import ValueStateDescriptor

        class RunningCount(KeyedProcessFunction):  # defined here: pickled by value to the workers
            def open(self, ctx):
                self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))

            def process_element(self, row, ctx):
                n = (self.count.value() or 0) + 1
                self.count.update(n)
                return ((row.k, n),)

        counts = spark_state.keyed_process(df, "k", RunningCount(), "k bigint, count bigint", parallelism=4)
    else:
        counts = df.groupBy("k").count()

    def save(batch_df, batch_id: int) -> None:
        batch_df.write.mode("overwrite").parquet(os.path.join(out_dir, f"batch={batch_id}"))

    query = (counts.writeStream.outputMode("update").foreachBatch(save)
             .option("checkpointLocation", os.path.join(workdir, "ckpt")).trigger(availableNow=True).start())
    result: dict = {"error": None}
    peaks = {"state_workers": 0, "pyspark_workers": 0}
    done = threading.Event()

    def sample() -> None:  # the largest RSS of one Python process of each kind, every 0.25 s
        while not done.wait(0.25):
            for kind, pids in (("state_workers", state_workers()), ("pyspark_workers", pyspark_workers())):
                peaks[kind] = max([peaks[kind]] + [rss_bytes(pid) for pid in pids])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        query.awaitTermination()
    except Exception as exc:  # the query's failure: reported, not raised (the test reads it)
        result["error"] = f"{type(exc).__name__}: {exc}"[:3000]
    done.set()
    sampler.join()
    result["peak_rss"] = peaks
    progress = [p for p in query.recentProgress if p.numInputRows]
    result["state_rows"] = [sum(op.numRowsTotal for op in p.stateOperators or []) for p in progress]
    result["spills"] = [sum(dict(op.customMetrics or {}).get("sparkStateSpills", 0) for op in p.stateOperators or [])
                        for p in progress]
    result["memory_used_bytes"] = [sum(op.memoryUsedBytes for op in p.stateOperators or []) for p in progress]
    result["heap_bytes"] = [sum(dict(op.customMetrics or {}).get("sparkStateHeapBytes", 0)
                                for op in p.stateOperators or []) for p in progress]
    if mode == "keyed":
        figures = [dict(p.observedMetrics)["spark_state.RunningCount"]["figures"] for p in progress]
        result["state_rows"] = [f["rows_total"] for f in figures]
        result["memory_used_bytes"] = [f["state_bytes"] for f in figures]
    if os.path.isdir(out_dir):
        out = spark.read.parquet(out_dir)
        result["batches"] = sorted(r["batch"] for r in out.select("batch").distinct().collect())
        result["rows"] = {str(r["batch"]): r["count"] for r in out.groupBy("batch").count().collect()}
        result["batch0_all_ones"] = out.where("batch = 0 and count != 1").count() == 0
        by_count = out.where("batch = 1").groupBy("count").agg(F.count("*").alias("n")).collect()
        result["batch1"] = {str(r["count"]): r["n"] for r in by_count}
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    extra = dict(arg.split("=", 1) for arg in sys.argv[4:])
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), extra)

"""What an idle source costs with each way of making Spark run batches without new data.

Timers must fire while no new rows arrive, so something must make Spark run batches:

* ``A`` -- ``applyInPandasWithState`` with ``ProcessingTimeTimeout`` (its operator answers
  ``shouldRunAnotherBatch`` with yes at every trigger while any group has a timeout);
* ``B`` -- ``keyed_process(..., idle_heartbeat=True)``: a ``rate`` source (one row per second)
  unioned into the input.

Each runs in a fresh process with the default trigger (as fast as possible), one small input
file, ``local[2]``, 4 partitions; after the first batch the source is idle for ``--seconds``
and the script counts the batches Spark ran in that time.

Usage: python bench/idle_bench.py [--seconds 30] [--variants A,B]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def child(variant: str, seconds: float, work: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.state import GroupStateTimeout

    import spark_state
    from spark_state.process import KeyedProcessFunction

    spark = (SparkSession.builder.master("local[2]").appName("idle-bench")
             .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
             .config("spark.pyspark.python", sys.executable).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    os.makedirs(f"{work}/in")
    pq.write_table(pa.table({"k": list(range(100)), "v": [1] * 100}), f"{work}/in/f.parquet")
    df = spark.readStream.schema("k bigint, v bigint").parquet(f"{work}/in")
    if variant == "A":
        def fn(key, pdfs, state):
            n = sum(len(p) for p in pdfs)
            state.update((n,))
            state.setTimeoutDuration(1000)
            yield pd.DataFrame({"k": [key[0]], "n": [n]})

        out = df.groupBy("k").applyInPandasWithState(fn, "k bigint, n bigint", "n bigint", "update",
                                                     GroupStateTimeout.ProcessingTimeTimeout)
    else:
        class Count(KeyedProcessFunction):
            def process_element(self, row, ctx):
                return ()

        out = spark_state.keyed_process(df, "k", Count(), "k bigint", parallelism=4,
                                        state_location=f"{work}/state", idle_heartbeat=True)
    q = (out.writeStream.format("noop").outputMode("update" if variant == "A" else "append")
         .option("checkpointLocation", f"{work}/ckpt").start())
    while q.lastProgress is None:
        time.sleep(0.1)
    start_batches = len(q.recentProgress)
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    progress = [json.loads(p.json()) for p in q._jsq.recentProgress()]
    ran = [p for p in progress if p["batchId"] >= start_batches]
    q.stop()
    durations = sorted(p["durationMs"].get("triggerExecution", 0) for p in ran)
    print("RESULT " + json.dumps({"batches": len(ran), "seconds": elapsed,
                                  "median_batch_ms": durations[len(durations) // 2] if durations else None}))
    spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child")
    ap.add_argument("--work")
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--variants", default="A,B")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.seconds, args.work)
        return
    for variant in args.variants.split(","):
        work = tempfile.mkdtemp(prefix="idle-bench-")
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", variant, "--work", work,
                               "--seconds", str(args.seconds)], capture_output=True, text=True)
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"variant {variant} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
        r = json.loads(line[7:])
        print(f"  {variant}: {r['batches']} batches in {r['seconds']:.0f} s idle = "
              f"{r['batches'] / r['seconds']:.2f} batches/s, median batch {r['median_batch_ms']} ms", flush=True)


if __name__ == "__main__":
    main()

"""What an idle source costs: batches and CPU per minute while nothing is due.

Variants, each in a fresh process (``local[2]``, 4 partitions, the default trigger -- as fast
as possible -- one small input file, then an idle source for ``--seconds``):

* ``keyed`` -- ``keyed_process`` with event time and timers pending far in the future (an
  event-time and a processing-time timer per key): spark-state's tick source runs no batch
  while nothing is due;
* ``window`` -- Spark's own ``groupBy(window(...)).count()`` in append mode on the same input
  (the reference: Spark runs a no-data batch only when the watermark moved);
* ``aipws`` -- ``applyInPandasWithState`` with ``ProcessingTimeTimeout`` (Spark's way to get
  batches for timers from a Python function: a no-data batch at every trigger).

Reported per variant: batches Spark ran while idle, per minute, and the CPU time of the whole
process tree (driver JVM, driver Python, Python workers), per minute of idle time.

Usage: python bench/idle_bench.py [--seconds 60] [--variants keyed,window,aipws] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from harness import queries, results, sessions, workers

VARIANTS = ("keyed", "window", "aipws")


def _cpu_seconds() -> float:
    """CPU time (user + system) of this process and every descendant (the JVM, the workers)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def run_worker(spec: dict) -> dict:
    """One variant: its query on one small file, then ``spec["seconds"]`` of an idle source."""
    import datetime as dt

    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    import spark_state
    from harness.keyed_fns import PendingTimers

    variant, seconds, work = spec["variant"], spec["seconds"], spec["work"]
    spark = sessions.start(sessions.builder("idle-bench", spark_state=True))
    os.makedirs(f"{work}/in")
    now = dt.datetime(2024, 1, 1)
    pq.write_table(pa.table({"k": list(range(100)), "ts": [now] * 100}), f"{work}/in/f.parquet")
    df = spark.readStream.schema("k bigint, ts timestamp").parquet(f"{work}/in").withWatermark("ts", "10 seconds")
    mode = "append"
    if variant == "aipws":
        def fn(key, pdfs, state):
            n = sum(len(p) for p in pdfs)
            state.update((n,))
            state.setTimeoutDuration(60_000)
            yield pd.DataFrame({"k": [key[0]], "n": [n]})

        out = df.groupBy("k").applyInPandasWithState(fn, "k bigint, n bigint", "n bigint", "update",
                                                     GroupStateTimeout.ProcessingTimeTimeout)
        mode = "update"
    elif variant == "window":
        out = df.groupBy(F.window("ts", "1 minute"), "k").count()
    else:
        out = spark_state.keyed_process(df, "k", PendingTimers(), "k bigint", parallelism=4)
    q = queries.start_to_noop(out, f"{work}/ckpt", mode=mode, available_now=False)
    deadline = time.monotonic() + 120
    while (q.lastProgress is None or q.lastProgress["numInputRows"] == 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3)  # the batches the first one asks for (a watermark move) run now
    last_before = max((p["batchId"] for p in queries.progress(q)), default=-1)
    cpu0, t0 = _cpu_seconds(), time.monotonic()
    time.sleep(seconds)
    cpu, elapsed = _cpu_seconds() - cpu0, time.monotonic() - t0
    ran = {p["batchId"] for p in queries.progress(q)
           if p["batchId"] > last_before and p["durationMs"].get("addBatch")}
    q.stop()
    spark.stop()
    return {"variant": variant, "batches": len(ran), "seconds": elapsed, "cpu_seconds": cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--json", help="write the results to this file")
    workers.add_worker_option(ap)
    args = ap.parse_args()
    if workers.serve(args, run_worker):
        return
    try:
        import psutil  # noqa: F401
    except ImportError:
        sys.exit("bench/idle_bench.py measures CPU with psutil: pip install psutil")
    figures = []
    for variant in args.variants.split(","):
        if variant not in VARIANTS:
            sys.exit(f"unknown variant {variant!r}; choose from {', '.join(VARIANTS)}")
        work = tempfile.mkdtemp(prefix="idle-bench-")
        spec = {"variant": variant, "work": work, "seconds": args.seconds, "result": os.path.join(work, "result.json")}
        done = workers.run(__file__, spec, os.path.join(work, "log"))
        r = workers.read_result(spec["result"])
        if r is None:
            raise RuntimeError(f"variant {variant} failed:\n{done.log_tail(8000)}")
        per_minute = 60 / r["seconds"]
        r["batches_per_minute"] = r["batches"] * per_minute
        r["cpu_seconds_per_minute"] = r["cpu_seconds"] * per_minute
        figures.append(r)
        print(f"  {variant}: {r['batches_per_minute']:.1f} batches/min, "
              f"{r['cpu_seconds_per_minute']:.1f} CPU s/min while idle ({r['seconds']:.0f} s measured)", flush=True)
    if args.json:
        results.write_json(args.json, figures, indent=2)


if __name__ == "__main__":
    main()

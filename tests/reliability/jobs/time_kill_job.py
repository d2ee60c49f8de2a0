"""The application of the time kill test (``tests/reliability/test_time_kills.py``): keyed functions
with timers on two executor JVMs (``local-cluster[2,1,1024]``), run in its own process so that the
test can SIGKILL all of it, or one executor JVM, or one worker.

Queries, all over one parquet file per micro-batch (``maxFilesPerTrigger=1``, ``availableNow``):

* ``session``: ``time_kill_fns.Sessions`` (event-time timers, deleted and registered again) over
  ``input/events`` with ``withWatermark``;
* ``ptime``: ``time_kill_fns.ProcessingCounts`` (processing-time timers) over ``input/events``;
* ``co``: ``time_fns.CoCounts`` (two inputs, event time on both) over ``input/left`` and
  ``input/right``;
* ``agg``: ``groupBy(k).count()`` on spark-state's provider, so that provider workers run too.

Each batch's sink writes ``out/<query>/<batch>.json``: the batch's sorted rows and Spark's time of
the batch (``batchWatermarkMs`` and ``batchTimestampMs`` of its offset log entry), by rename, so a
batch run again overwrites it. The sink of ``session`` holds after writing while
``control/sink-<batch>`` exists (the harness kills the application there: output written, batch
not committed). Prints ``BATCH <query> <id>`` after each batch and ``DONE`` at the end.

Usage: time_kill_job.py WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
import threading

_TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for sub in ("spark", "process", "reliability"):
    sys.path.insert(0, os.path.join(_TESTS, sub))

PARALLELISM = 2
QUERIES = ("session", "ptime", "co", "agg")


def session(workdir: str):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_state

    builder = (
        SparkSession.builder.master("local-cluster[2,1,1024]").appName("spark-state-time-kill-test")
        .config("spark.sql.shuffle.partitions", str(PARALLELISM))
        .config("spark.task.maxFailures", "8")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", os.path.join(workdir, "spark-local"))
    )
    spark = spark_state.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _writer(workdir: str, query: str):
    from streaming_harness import plain, sort_rows

    from spark_state.spark.logs import OffsetEntry

    out = os.path.join(workdir, "out", query)
    os.makedirs(out, exist_ok=True)
    control = os.path.join(workdir, "control")
    checkpoint = os.path.join(workdir, f"ckpt-{query}")
    lock = threading.Lock()

    def sink(batch_df, batch_id: int) -> None:
        rows = sort_rows(plain(r) for r in batch_df.collect())
        with open(os.path.join(checkpoint, "offsets", str(batch_id)), "rb") as f:
            entry = OffsetEntry.decode(batch_id, f.read(), "offsets")
        tmp = os.path.join(out, f".{batch_id}.json.tmp")
        with open(tmp, "w") as f:
            json.dump({"rows": rows, "spark": [entry.watermark_ms, entry.timestamp_ms]}, f, default=str)
        os.replace(tmp, os.path.join(out, f"{batch_id}.json"))
        with lock:
            print(f"BATCH {query} {batch_id}", flush=True)
        if query == "session":
            from time_kill_fns import Holding

            Holding(control).hold(f"sink-{batch_id}")

    return sink


def main(workdir: str) -> int:
    from job_support import await_queries
    import time_fns
    import time_kill_fns
    from spark_state import keyed_co_process, keyed_process
    from streaming_harness import ship_module_by_value
    from time_fns import CO_TIMER_OUTPUT, CoCounts
    from time_kill_fns import DELAY_MS, EVENTS_SCHEMA, PTIME_OUTPUT, SESSION_OUTPUT, ProcessingCounts, Sessions

    spark = session(workdir)
    for module in (time_fns, time_kill_fns):
        ship_module_by_value(module)
    control = os.path.join(workdir, "control")

    def files(name: str):
        return spark.readStream.schema(EVENTS_SCHEMA).option("maxFilesPerTrigger", 1).parquet(
            os.path.join(workdir, "input", name))

    delay = f"{DELAY_MS} milliseconds"
    events = files("events")
    frames = {
        "session": keyed_process(events.withWatermark("ts", delay), "k", Sessions(control), SESSION_OUTPUT,
                                 parallelism=PARALLELISM),
        "ptime": keyed_process(events, "k", ProcessingCounts(), PTIME_OUTPUT, parallelism=PARALLELISM),
        "co": keyed_co_process(files("left").withColumnRenamed("k", "id").withWatermark("ts", delay),
                               files("right").withColumnRenamed("k", "id").withWatermark("ts", delay), "id", "id",
                               CoCounts(), CO_TIMER_OUTPUT, parallelism=PARALLELISM),
        "agg": events.groupBy("k").count(),
    }
    queries = []
    for name in QUERIES:
        writer = (frames[name].writeStream.outputMode("update" if name == "agg" else "append")
                  .foreachBatch(_writer(workdir, name))
                  .option("checkpointLocation", os.path.join(workdir, f"ckpt-{name}")).trigger(availableNow=True))
        queries.append(writer.start())
    return await_queries(spark, queries)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

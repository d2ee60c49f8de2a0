"""When the executor's Python workers start: with spark-state's plugin (``configure`` adds it),
when the executor starts, before any query; with ``prestartWorkers=false``, at the first store
load. Then a stateful query runs on the workers there are, and its counts are checked.

Usage: prestart_job.py WORKDIR true|false [COMPACTION_NICE]. Prints one ``RESULT <json>`` line:
``before`` (worker pids once the session is up, before any query), ``after`` (after the query),
``counts_ok``, ``with_pandas``: the workers that have pandas' native libraries mapped after
serving the query (they never should: ``spark_state.provider.no_pandas``), and the nice values
of the workers' RocksDB threads, ``compaction_nices`` (``rocksdb:low``) and ``flush_nices``
(``rocksdb:high``); COMPACTION_NICE, if given, is set as ``rocksdb.compactionNice``.
"""

from __future__ import annotations

import json
import os
import sys
import time

from inputs import write_key_batches
from processes import state_workers, thread_nices

WORKERS = 2


def main(workdir: str, prestart: str, compaction_nice: str | None) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_state

    input_dir = os.path.join(workdir, "input")
    expected = write_key_batches(input_dir, batches=2, rows=300, keys=41, step=11)

    spark = spark_state.configure(
        SparkSession.builder.master("local[2]").appName("spark-state-prestart-test")
        .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false"),
        options={"prestartWorkers": prestart, "workersPerExecutor": str(WORKERS),
                 **({"rocksdb.compactionNice": compaction_nice} if compaction_nice is not None else {})},
    ).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # With the plugin the workers are starting already; give them time (a start takes ~1 s).
    # Without it, the same wait shows that nothing starts them before a store needs one.
    deadline = time.monotonic() + (60 if prestart == "true" else 5)
    while time.monotonic() < deadline and len(state_workers()) < WORKERS:
        time.sleep(0.2)
    before = state_workers()

    query = (spark.readStream.schema("k long").option("maxFilesPerTrigger", 1).json(input_dir)
             .groupBy("k").count().writeStream.outputMode("complete").format("memory").queryName("counts")
             .option("checkpointLocation", os.path.join(workdir, "ckpt")).trigger(availableNow=True).start())
    query.awaitTermination(300)
    counts = {row["k"]: row["count"] for row in spark.sql("select * from counts").collect()}
    after = state_workers()
    compaction_nices = [n for pid in after for n in thread_nices(pid, "rocksdb:low")]
    flush_nices = [n for pid in after for n in thread_nices(pid, "rocksdb:high")]
    with_pandas = []
    for pid in after:
        with open(f"/proc/{pid}/maps") as maps:
            if "/pandas/" in maps.read():
                with_pandas.append(pid)
    slots = spark.range(1, numPartitions=1).mapInArrow(_published_slots, "slots long").collect()[0]["slots"]
    spark.stop()
    print("RESULT " + json.dumps({"published_slots": slots, "before": before, "after": after,
                                  "counts_ok": counts == dict(expected),
                                  "with_pandas": with_pandas, "compaction_nices": compaction_nices,
                                  "flush_nices": flush_nices}), flush=True)


def _published_slots(batches):
    """The task slots the executor's JVM published to its Python processes (-1: none)."""
    import pyarrow as pa

    from spark_state import memory

    for _ in batches:
        pass
    figures = memory.executor_figures()
    yield pa.RecordBatch.from_pydict({"slots": [figures.task_slots if figures else -1]})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)

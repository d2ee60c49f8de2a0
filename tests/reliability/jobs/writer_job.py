"""A streaming aggregation on spark-state's provider over many small micro-batches, run in its
own process (its own Spark application) so that a test can start a second copy of the same job
on the same checkpoint while the first runs.

Usage: writer_job.py WORKDIR first   -- process every input file, printing "BATCH <id>" after
                                       each; at the end "RESULT <json>" with the final counts
       writer_job.py WORKDIR second  -- the same query on the same checkpoint; prints
                                       "RESULT <json>" with the message it failed with
"""

from __future__ import annotations

import json
import os
import sys


def main(workdir: str, role: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_state

    spark = spark_state.configure(
        SparkSession.builder.master("local[2]").appName(f"spark-state-writer-{role}")
        .config("spark.sql.shuffle.partitions", "3").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
    ).getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    counts: dict = {}

    def sink(df, batch_id: int) -> None:
        for row in df.collect():
            counts[row["k"]] = row["count"]
        print(f"BATCH {batch_id}", flush=True)

    query = (spark.readStream.schema("k long").option("maxFilesPerTrigger", 1).json(os.path.join(workdir, "input"))
             .groupBy("k").count().writeStream.outputMode("update").foreachBatch(sink)
             .option("checkpointLocation", os.path.join(workdir, "ckpt")).trigger(availableNow=True).start())
    try:
        query.awaitTermination()
        result = {"ok": True, "counts": {str(k): v for k, v in counts.items()}}
    except Exception as exc:  # StreamingQueryException with the task failure
        result = {"ok": False, "message": str(exc)[:4000]}
    print("RESULT " + json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

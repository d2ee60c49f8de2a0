"""A stateful query on spark-state whose set-up is wrong, which must fail with a message that
says what is wrong and how to fix it. Prints one ``RESULT <json>`` line with the message.

Usage: failing_setup_job.py WORKDIR python PATH   -- the executors' Python (PATH) cannot import spark_state
       failing_setup_job.py WORKDIR workers VALUE -- workersPerExecutor=VALUE, set on the builder directly
                                                     (past configure's own check)
"""

from __future__ import annotations

import json
import os
import sys


def main(workdir: str, what: str, value: str) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_state

    builder = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "1").config("spark.ui.showConsoleProgress", "false"))
    if what == "python":
        builder = spark_state.configure(builder, python=value)
    else:
        builder = spark_state.configure(builder).config(
            "spark.sql.streaming.stateStore.sparkState.workersPerExecutor", value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("OFF")
    query = (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
             .groupBy(F.col("value") % 3).count()
             .writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", os.path.join(workdir, "ckpt")).start())
    try:
        query.awaitTermination(120)
        message = "query did not fail"
    except Exception as exc:  # the StreamingQueryException carries the task failure
        message = str(exc)
    spark.stop()
    print("RESULT " + json.dumps({"message": message}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])

"""A stateful query on spark-state whose ``workersPerExecutor`` conf is not a number (set on the
builder directly, past ``configure``'s own check): the query must fail with a message naming
the conf and the value. Prints one ``RESULT <json>`` line."""

from __future__ import annotations

import json
import os
import sys


def main(workdir: str) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import spark_state

    spark = (spark_state.configure(
        SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1").config("spark.ui.showConsoleProgress", "false"))
        .config("spark.sql.streaming.stateStore.sparkState.workersPerExecutor", "abc").getOrCreate())
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
    main(sys.argv[1])

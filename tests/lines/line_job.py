"""A part of a streaming query run by another Spark line's Python (its compatibility venv), for the
cross-line tests (``test_cross_line.py``): the checkpoint it leaves is continued, or its savepoint
restored, by the newest line.

Usage (prints ``RESULT <json>``):

* ``line_job.py case NAME PROVIDER INPUT_ROOT CHECKPOINT START UPTO``: write batches ``[START, UPTO)``
  of operator case NAME (``test_operator_equivalence``) under INPUT_ROOT and run the query on
  CHECKPOINT with PROVIDER; the result holds each batch's rows.
* ``line_job.py pageviews INPUT_ROOT CHECKPOINT STATE_ROOT START UPTO PARALLELISM``: the same for
  the event-time page-view counter of ``time_fns`` (keyed_process with timers).
* ``line_job.py savepoint CHECKPOINT TARGET [PROCESS_ROOT]``: take a savepoint (spark_state.ops).
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(TESTS, "spark"), os.path.join(TESTS, "process"), HERE]


def session():
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_state.spark.jvm import jar_path

    spark = (SparkSession.builder.master("local[2,4]").appName("spark-state-line-job")
             .config("spark.jars", jar_path()).config("spark.pyspark.python", sys.executable)
             .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
             .config("spark.sql.ansi.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main(argv: list[str]) -> dict:
    kind = argv[0]
    if kind == "savepoint":
        from spark_state import ops

        result = ops.savepoint(argv[1], argv[2], process_root=argv[3] if len(argv) > 3 else None, progress=False)
        return {"batch_id": result.batch_id, "keys": result.keys, "partitions": result.partitions}
    spark = session()
    import pyspark

    if kind == "case":
        import test_operator_equivalence as E

        name, provider, root, checkpoint, start, upto = argv[1:7]
        case = E.CASES_BY_NAME[name]
        dirs = E.write_inputs(case, root, start=int(start), upto=int(upto))
        run = E.run_case(spark, case, provider, dirs, checkpoint)
    elif kind == "pageviews":
        import cross_line_fns as X

        root, checkpoint, state_root, start, upto, parallelism = argv[1:7]
        run = X.run_page_views(spark, root, checkpoint, state_root, int(start), int(upto), int(parallelism))
    else:
        raise SystemExit(f"unknown job {kind!r}")
    return {"pyspark": pyspark.__version__, "batches": {str(b): rows for b, rows in run.batches.items()}}


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1:]), default=str), flush=True)

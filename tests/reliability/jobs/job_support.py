"""What the reliability jobs (run in their own processes by the kill tests) share."""

from __future__ import annotations

import sys


def await_queries(spark, queries) -> int:
    """Wait for every query to end: print ``DONE`` and stop the session when all ended well (exit
    status 0), else 1 after printing each failure to stderr, which the test shows."""
    failed = False
    for query in queries:
        try:
            query.awaitTermination()
        except Exception as exc:  # StreamingQueryException
            print(f"QUERY FAILED {query.name or query.id}: {exc}", file=sys.stderr, flush=True)
            failed = True
    if failed:
        return 1
    print("DONE", flush=True)
    spark.stop()
    return 0

"""Streaming queries as the benchmarks drive them: a file stream in, the ``noop`` sink out, and
the query's progress read batch by batch.

Progress is read as JSON dicts (``StreamingQueryProgress.json()`` on the JVM side), not as
PySpark's progress objects: PySpark 3.5 gives dicts and 4.x objects, and ``bench/provider_lines.py``
runs the same benchmark on every line. Each dict has ``batchId``, ``numInputRows``,
``durationMs`` (``triggerExecution``: the whole micro-batch; ``addBatch``: executing it, where the
state store work happens), ``stateOperators`` and ``observedMetrics``.
"""

from __future__ import annotations

import json
from typing import Iterator


def file_stream(spark, schema, input_dir: str):
    """The parquet files of ``input_dir`` as a stream, one file per micro-batch."""
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(input_dir)


def start_to_noop(df, checkpoint: str, mode: str = "update", available_now: bool = True):
    """Start ``df`` into the ``noop`` sink (nothing collected to the driver); with
    ``available_now`` the query stops once the input present at its start is read."""
    writer = df.writeStream.format("noop").outputMode(mode).option("checkpointLocation", checkpoint)
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def progress(query) -> list[dict]:
    """The query's recent progress (``spark.sql.streaming.numRecentProgressUpdates``, 100 by
    default), oldest first, as dicts."""
    return [json.loads(p.json()) for p in query._jsq.recentProgress()]


def completed(progress_list: list[dict]) -> list[dict]:
    """The entries of micro-batches that ran (not the idle polls of a running query)."""
    return [p for p in progress_list if "batchId" in p and "triggerExecution" in (p.get("durationMs") or {})]


def follow(query, poll_s: float = 1.0) -> Iterator[dict]:
    """Every completed micro-batch's progress once, as it lands, until the query ends."""
    seen = -1
    while True:
        done = query.awaitTermination(poll_s)
        for p in completed(progress(query)):
            if p["batchId"] > seen:
                seen = p["batchId"]
                yield p
        if done:
            return


def state_sum(p: dict, metric: str) -> int:
    """A state operator metric (``numRowsTotal``, ``commitTimeMs``, ...) summed over the operators."""
    return sum(op.get(metric, 0) or 0 for op in p.get("stateOperators") or [])


def custom_sums(p: dict) -> dict[str, int]:
    """Every custom metric of the state operators (``sparkState*``), summed over the operators."""
    out: dict[str, int] = {}
    for op in p.get("stateOperators") or []:
        for key, value in (op.get("customMetrics") or {}).items():
            out[key] = out.get(key, 0) + value
    return out


def observed(p: dict, prefix: str) -> dict:
    """The first observation whose name starts with ``prefix`` (a keyed function's figures are
    observed as ``spark_state.<name>``), as a dict; empty if none."""
    for name, row in (p.get("observedMetrics") or {}).items():
        if name.startswith(prefix):
            return row if isinstance(row, dict) else {}
    return {}


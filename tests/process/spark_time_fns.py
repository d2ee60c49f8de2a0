"""A keyed function that reports the time of every row's batch (shipped to the Python workers by
value), for tests/process/test_spark_time.py, and a reader of Spark's own time of a batch from a
query's offset log."""

from __future__ import annotations

import os

from spark_state.process import KeyedProcessFunction
from spark_state.spark.logs import OffsetEntry

BATCH_TIMES_OUTPUT = "user string, ts bigint, late boolean, watermark bigint, processing_time bigint, batch bigint"


class BatchTimes(KeyedProcessFunction):
    """Emits every row it receives (deliver late rows) with the batch's watermark and
    processing time as the function sees them."""

    def process_element(self, row, ctx):
        service = ctx.timer_service()
        yield (ctx.current_key, ctx.timestamp(), ctx.is_late(), service.current_watermark(),
               service.current_processing_time(), ctx.batch_id)


def spark_times(checkpoint: str) -> dict[int, tuple[int, int]]:
    """batch id -> (``batchWatermarkMs``, ``batchTimestampMs``) of every entry of the offset log
    of the query checkpointed at ``checkpoint``."""
    out = {}
    offsets = os.path.join(checkpoint, "offsets")
    for name in os.listdir(offsets):
        if name.isdigit():
            with open(os.path.join(offsets, name), "rb") as f:
                entry = OffsetEntry.decode(int(name), f.read(), name)
            out[entry.batch_id] = (entry.watermark_ms, entry.timestamp_ms)
    return out

"""A keyed function's batch time is Spark's, read from the query's offset log, without Spark: the
rules of :func:`spark_state.process.clock.compute` with Spark's time, the record the first task
writes, a checkpoint that cannot be read (the time computed from the rows, logged once), and a
batch Spark's readable offset log does not know (an error naming both)."""

from __future__ import annotations

import json
import logging

import pytest

from spark_state.errors import CheckpointCorruptError
from spark_state.process import clock as C
from spark_state.process.errors import BatchTimeMismatchError
from spark_state.process.spark_time import SparkBatchTime, SparkOffsetLog
from spark_state.spark.logs import OffsetEntry, next_batch_watermark
from spark_state.storage import open_storage


def _checkpoint(root, times: dict[int, tuple[int, int]]) -> str:
    """A Spark checkpoint at ``root`` whose offset log has ``batch -> (watermark, timestamp)``."""
    (root / "offsets").mkdir(parents=True)
    (root / "metadata").write_text('{"id":"q"}')
    for batch, (watermark, timestamp) in times.items():
        meta = {"batchWatermarkMs": watermark, "batchTimestampMs": timestamp, "conf": {}}
        (root / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{{\"logOffset\":{batch}}}")
    return f"file:{root}"


def test_sparks_time_is_the_batchs_time_never_backwards():
    previous = C.BatchTime(4, 9000, 500, {"1": 10_000}, C.SPARK)
    b5 = C.compute(5, previous, {"1": 30_000}, {"1": 1000}, now_ms=1, spark=SparkBatchTime(12_000, 600))
    # Spark's watermark, not the rows' (29 000): Spark's follows other rows, e.g. before a filter
    assert (b5.watermark_ms, b5.processing_time_ms, b5.source) == (12_000, 600, C.SPARK)
    assert b5.max_event_ms == {"1": 30_000}  # the maxima are kept for the observation and savepoints
    lower = C.compute(6, b5, {}, {"1": 1000}, now_ms=1, spark=SparkBatchTime(11_000, 550))
    assert (lower.watermark_ms, lower.processing_time_ms) == (12_000, 600)


def test_the_first_batch_on_sparks_time_after_computed_records_counts_their_rows():
    """A bootstrapped savepoint's history (or an earlier release's records): Spark never saw those
    rows, so its watermark may be lower; the watermark the rows give holds until Spark passes it."""
    computed = C.BatchTime(0, 0, 10, {}, C.COMPUTED)
    first = C.compute(1, computed, {"1": 50_000}, {"1": 10_000}, now_ms=99, spark=SparkBatchTime(0, 20))
    assert (first.watermark_ms, first.processing_time_ms, first.source) == (40_000, 20, C.SPARK)
    without_record = C.compute(1, None, {"1": 50_000}, {"1": 10_000}, now_ms=99, spark=SparkBatchTime(0, 20))
    assert without_record.watermark_ms == 40_000
    # from then on Spark's alone, never below
    second = C.compute(2, first, {"1": 90_000}, {"1": 10_000}, now_ms=99, spark=SparkBatchTime(45_000, 30))
    assert second.watermark_ms == 45_000


def test_the_first_task_records_sparks_time_of_the_batch(tmp_path):
    log = SparkOffsetLog(_checkpoint(tmp_path / "ckpt", {0: (0, 1000), 1: (7000, 2000)}), {})
    storage = open_storage(str(tmp_path / "loc"), {})
    assert C.resolve(storage, 0, {"1": 100}, now_ms=5, spark=log) == C.BatchTime(0, 0, 1000, {}, C.SPARK)
    C.record_max_event_time(storage, 0, 1, 2, 0, 9000)
    first = C.resolve(storage, 1, {"1": 100}, now_ms=5, spark=log)
    assert (first.watermark_ms, first.processing_time_ms, first.source) == (7000, 2000, C.SPARK)
    # every other task and attempt reads the record
    assert C.resolve(storage, 1, {"1": 100}, now_ms=999, spark=None) == first
    assert json.loads(storage.read_bytes(C.clock_path(1)))["source"] == "spark"


def test_an_offset_log_that_cannot_be_read_leaves_the_computed_time_and_says_so_once(tmp_path, caplog):
    log = SparkOffsetLog(f"file:{tmp_path / 'elsewhere'}", {})
    storage = open_storage(str(tmp_path / "loc"), {})
    with caplog.at_level(logging.WARNING, logger="spark_state.process.spark_time"):
        assert C.resolve(storage, 0, {"1": 100}, now_ms=5, spark=log) == C.BatchTime(0, 0, 5, {}, C.COMPUTED)
        C.record_max_event_time(storage, 0, 1, 1, 0, 9000)
        assert C.resolve(storage, 1, {"1": 100}, now_ms=6, spark=log).watermark_ms == 8900
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "elsewhere" in warnings[0] and "cannot be read" in warnings[0]


def test_a_batch_the_readable_offset_log_does_not_know_is_an_error_naming_both(tmp_path):
    log = SparkOffsetLog(_checkpoint(tmp_path / "ckpt", {0: (0, 1000), 1: (7000, 2000)}), {})
    storage = open_storage(str(tmp_path / "loc"), {})
    with pytest.raises(BatchTimeMismatchError, match=r"runs batch 2 \(Spark's task property streaming.sql.batchId\)"
                       r".*offsets/2 is missing"):
        C.resolve(storage, 2, {"1": 100}, now_ms=5, spark=log)
    assert storage.list_dir(C.CLOCK_DIR) == [], "nothing recorded for a batch Spark does not know"


def test_spark_log_entries_decode_and_refuse_what_is_not_one():
    entry = OffsetEntry.decode(3, b'v1\n{"batchWatermarkMs":5,"batchTimestampMs":6}\n{"logOffset":2}', "offsets/3")
    assert (entry.watermark_ms, entry.timestamp_ms, entry.source_lines) == (5, 6, ('{"logOffset":2}',))
    with pytest.raises(CheckpointCorruptError, match="offsets/3.*not a Spark offset log entry"):
        OffsetEntry.decode(3, b"garbage", "offsets/3")
    with pytest.raises(CheckpointCorruptError, match="not a JSON object"):
        OffsetEntry.decode(3, b"v1\n[1]", "offsets/3")
    assert next_batch_watermark(b'v1\n{"nextBatchWatermarkMs":42}') == 42
    assert next_batch_watermark(b"v1") == 0

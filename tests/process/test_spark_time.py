"""A keyed function's watermark and processing time are Spark's own time of each batch, the
``batchWatermarkMs`` and ``batchTimestampMs`` of the query's offset log, also where Spark's
watermark follows other rows than the function sees: a filter after ``withWatermark``, and two
inputs under ``multipleWatermarkPolicy=max``. (The rows the function sees would give another
watermark in both cases, which the tests check first, so that they can fail.)"""

from __future__ import annotations

import os
import random

import pytest

import spark_time_fns
import time_fns
from spark_state.process import keyed_co_process, keyed_process
from spark_time_fns import BATCH_TIMES_OUTPUT, BatchTimes, spark_times
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches
from time_fns import CO_EVENTS_SCHEMA, CO_TIMER_OUTPUT, EVENTS_SCHEMA, CoCounts, at, ms_of, watermarks

pytestmark = pytest.mark.spark

DELAY_MS = 2000


def _ship():
    ship_module_by_value(time_fns)
    ship_module_by_value(spark_time_fns)


def test_a_filter_after_with_watermark_gives_the_function_sparks_watermark_and_batch_timestamp(spark, tmp_path):
    """Rows of ``/hidden`` pages lead each batch's event time by 30 s and are filtered out after
    ``withWatermark``: Spark's watermark counts them, the function never sees them. (The filter
    names the event-time column: Spark pushes a filter that does not below the watermark.)"""
    rng = random.Random(3)
    batches = [[(f"u{rng.randrange(5)}", "/p", at(b * 4000 + rng.randrange(3000))) for _ in range(12)]
               + [("u0", "/hidden", at(b * 4000 + 30_000))] for b in range(5)]
    write_batches(tmp_path / "in", batches, EVENTS_SCHEMA)
    _ship()

    def build(df):
        visible = df.withWatermark("ts", f"{DELAY_MS} milliseconds").where("url != '/hidden' OR ts IS NULL")
        return keyed_process(visible, "user", BatchTimes(), BATCH_TIMES_OUTPUT, parallelism=2, late_rows="deliver",
                             state_location=str(tmp_path / "state"))

    run = run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"), schema=EVENTS_SCHEMA,
                    checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    spark_rule = watermarks(batches, lambda r: ms_of(r[2]), DELAY_MS)
    seen_rule = watermarks([[r for r in rows if r[1] != "/hidden"] for rows in batches], lambda r: ms_of(r[2]),
                           DELAY_MS)
    assert spark_rule != seen_rule, "the filtered rows move Spark's watermark"
    times = spark_times(str(tmp_path / "ckpt"))
    assert [times[b][0] for b in range(len(batches))] == spark_rule
    assert sorted(run.batches) == list(range(len(batches)))
    for b, rows in run.batches.items():
        assert rows and {(r[3], r[4], r[5]) for r in rows} == {(*times[b], b)}, f"batch {b}"
        # late is by Spark's watermark: rows at or below it, visible ones included
        assert [r[2] for r in rows] == [r[1] <= times[b][0] for r in rows]
    assert any(r[2] for rows in run.batches.values() for r in rows), "some visible rows are late by Spark's watermark"


def test_two_inputs_under_the_max_watermark_policy_fire_timers_at_sparks_watermark(spark, tmp_path):
    """The left input runs 20 s ahead of the right: Spark's ``max`` policy follows the left,
    the documented ``min`` over the inputs would follow the right."""
    rng = random.Random(5)
    def rows(ahead_ms: int) -> list[list[tuple]]:
        return [[(f"k{rng.randrange(4)}", at(ahead_ms + b * 3000 + rng.randrange(2000))) for _ in range(6)]
                for b in range(6)]

    lefts, rights = rows(20_000), rows(0)
    write_batches(tmp_path / "left", lefts, CO_EVENTS_SCHEMA)
    write_batches(tmp_path / "right", rights, CO_EVENTS_SCHEMA)
    _ship()

    def build(left, right):
        return keyed_co_process(left.withWatermark("ts", f"{DELAY_MS} milliseconds"),
                                right.withWatermark("ts", f"{DELAY_MS} milliseconds"), "id", "id", CoCounts(),
                                CO_TIMER_OUTPUT, parallelism=2, state_location=str(tmp_path / "state"))

    run = run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=[str(tmp_path / "left"),
                    str(tmp_path / "right")], schema=[CO_EVENTS_SCHEMA, CO_EVENTS_SCHEMA],
                    checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append",
                    extra_confs={"spark.sql.streaming.multipleWatermarkPolicy": "max"})
    times = spark_times(str(tmp_path / "ckpt"))
    by_left = watermarks(lefts, lambda r: ms_of(r[1]), DELAY_MS)
    by_right = watermarks(rights, lambda r: ms_of(r[1]), DELAY_MS)
    assert [times[b][0] for b in range(len(lefts))] == by_left != by_right
    fired = [(b, r) for b, rows in run.batches.items() for r in rows]
    assert len({b for b, _ in fired}) >= 2, "timers fire in several batches"
    for b, r in fired:
        assert r[4] == times[b][0] and r[1] <= times[b][0], f"batch {b}: {r}"
    assert os.path.isdir(tmp_path / "state" / "time" / "clock")

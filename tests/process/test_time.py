"""Time in keyed functions on real streaming queries: event-time timers, watermarks, late rows,
deleting timers, restarts, a task retry inside on_timer, a rescale 4 -> 3 -> 6 with pending
timers, and processing-time timers that fire while the source is idle. Every run is compared
with a plain-Python model of the documented time model (tests/process/time_fns/)."""

from __future__ import annotations

import random
import threading
import time

import pytest
from pyspark.errors import StreamingQueryException

import time_fns
from spark_state.process import ProcessDefinitionError, keyed_process
from streaming_harness import HDFS_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches
from time_fns import EVENTS_SCHEMA, at

pytestmark = pytest.mark.spark

DELAY_MS = 3000
NUM_BATCHES = 8


def _events(seed: int = 11, users: int = 12) -> list[list[tuple]]:
    """Views moving ~4 s of event time per batch, out of order by up to 6 s, with a few rows
    far behind (late) in every batch after the first."""
    rng = random.Random(seed)
    batches = []
    for b in range(NUM_BATCHES):
        rows = []
        for _ in range(40):
            t = b * 4000 + rng.randrange(-6000, 2000)
            rows.append((f"u{rng.randrange(users)}", f"/p{rng.randrange(5)}", at(max(t, 0) + rng.randrange(1000))))
        if b:
            rows.append((f"u{rng.randrange(users)}", "/late", at(max(0, b * 4000 - 20_000))))
        batches.append(rows)
    return batches


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    ship_module_by_value(time_fns)
    root = tmp_path_factory.mktemp("events")
    batches = _events()
    write_batches(root, batches, EVENTS_SCHEMA)
    return str(root), batches


def _run(spark, input_dir, checkpoint, function, output, parallelism, state_root, delay=DELAY_MS, options=None,
         **kwargs):
    ship_module_by_value(time_fns)

    def build(df):
        return keyed_process(df.withWatermark("ts", f"{delay} milliseconds"), "user", function, output,
                             parallelism=parallelism, state_root=state_root, **(options or {}))

    return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=EVENTS_SCHEMA,
                     checkpoint_dir=checkpoint, output_mode="append", **kwargs)


@pytest.fixture(scope="module")
def page_views(spark, events, tmp_path_factory):
    input_dir, _ = events
    tmp = tmp_path_factory.mktemp("pv")
    return _run(spark, input_dir, str(tmp / "ckpt"), time_fns.PageViews(), time_fns.PV_OUTPUT, 4, str(tmp / "state"))


@pytest.mark.lines
def test_event_time_page_view_counter_matches_the_model(events, page_views):
    _, batches = events
    expected = time_fns.expected_page_views(batches, DELAY_MS)
    assert page_views.batches == expected
    fired = [r for rows in expected.values() for r in rows]
    assert len(fired) >= 15 and len({r[3] for r in fired}) >= 2, "timers fire, in several batches"
    late = sum(1 for b, rows in enumerate(batches) for r in rows
               if time_fns.ms_of(r[2]) <= time_fns.watermarks(batches, lambda r: time_fns.ms_of(r[2]), DELAY_MS)[b])
    assert late >= NUM_BATCHES - 1, "the input has late rows, which the model drops"


@pytest.mark.lines
def test_restart_and_a_task_retry_inside_on_timer_give_identical_results(spark, events, page_views, tmp_path):
    """Batch 4 (the first whose watermark passes the first timers) fails inside on_timer on
    its first attempt, after two timers fired and cleared state; the query also stops after
    batch 2 and restarts: the output equals the uninterrupted run."""
    input_dir, _ = events
    ckpt, root = str(tmp_path / "ckpt"), str(tmp_path / "state")
    fn = time_fns.FailingPageViews(fail_batch=4)
    first = _run(spark, input_dir, ckpt, fn, time_fns.PV_OUTPUT, 4, root, stop_after_batches=3)
    assert first.stopped_early and first.batch_ids == [0, 1, 2]
    second = _run(spark, input_dir, ckpt, fn, time_fns.PV_OUTPUT, 4, root)
    assert second.batch_ids == [3, 4, 5, 6, 7, 8], "batch 8 runs without input, for the timers due after 7"
    assert page_views.batches[4], "timers fire in the batch that fails"
    assert merge_runs(first, second) == page_views.batches


def test_rescale_4_to_3_to_6_with_pending_timers(spark, events, page_views, tmp_path):
    input_dir, _ = events
    ckpt, root = str(tmp_path / "ckpt"), str(tmp_path / "state")
    runs = [
        _run(spark, input_dir, ckpt, time_fns.PageViews(), time_fns.PV_OUTPUT, 4, root, stop_after_batches=3),
        _run(spark, input_dir, ckpt, time_fns.PageViews(), time_fns.PV_OUTPUT, 3, root, stop_after_batches=2),
        _run(spark, input_dir, ckpt, time_fns.PageViews(), time_fns.PV_OUTPUT, 6, root),
    ]
    assert [r.batch_ids for r in runs] == [[0, 1, 2], [3, 4], [5, 6, 7, 8]]
    # every timer that fires at 3 and 6 partitions was registered before the rescale it crossed
    assert page_views.batches[4] and page_views.batches[7]
    assert merge_runs(*runs) == page_views.batches


def test_deleting_re_registering_and_timers_registered_while_firing(spark, tmp_path):
    """Users active in some batches only (so inactivity timers fire), some logging out (so
    their timer is deleted without a new one)."""
    rng = random.Random(4)
    batches = [[(f"u{u}", rng.choice(["/a", "/b", "logout"]), at(b * 4000 + rng.randrange(3000)))
                for u in range(12) if rng.random() < 0.25 for _ in range(rng.randrange(1, 3))] for b in range(NUM_BATCHES)]
    input_dir = str(tmp_path / "in")
    write_batches(input_dir, batches, EVENTS_SCHEMA)
    out = _run(spark, input_dir, str(tmp_path / "ckpt"), time_fns.InactivityAlert(), time_fns.SESSION_OUTPUT, 3,
               str(tmp_path / "state"))
    expected = time_fns.expected_inactivity(batches, DELAY_MS)
    assert out.batches == expected
    kinds = {r[1] for rows in expected.values() for r in rows}
    assert kinds == {"idle", "again"}


@pytest.mark.parametrize("late_rows", ["drop", "deliver"])
def test_late_rows_dropped_or_delivered_flagged(spark, events, tmp_path, late_rows):
    input_dir, batches = events
    out = _run(spark, input_dir, str(tmp_path / "ckpt"), time_fns.ReportLateness(), time_fns.LATE_OUTPUT, 2,
               str(tmp_path / "state"), options={"late_rows": late_rows})
    expected = time_fns.expected_lateness(batches, DELAY_MS, deliver=late_rows == "deliver")
    assert out.batches == expected
    flagged = sum(1 for rows in expected.values() for r in rows if r[2])
    assert (flagged > 0) == (late_rows == "deliver")


def test_tumbling_window_from_map_state_and_timers(spark, events, tmp_path):
    input_dir, batches = events

    def build(df):
        return keyed_process(df.withWatermark("ts", f"{DELAY_MS} milliseconds"), "url", time_fns.FakeWindow(5000),
                             time_fns.WINDOW_OUTPUT, parallelism=3, state_root=str(tmp_path / "state"))

    out = run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=EVENTS_SCHEMA,
                    checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    expected = time_fns.expected_windows(batches, 5000, DELAY_MS)
    assert out.batches == expected
    assert sum(len(r) for r in expected.values()) >= 20


# ------------------------------------------------------------------------------ clear errors
def test_event_time_timer_without_a_watermark_and_a_dropped_event_time_column_fail_clearly(spark, events, tmp_path):
    input_dir, _ = events
    with pytest.raises(StreamingQueryException,
                       match=r"ProcessDefinitionError: RegistersEventTimer registers an event-time timer, but its "
                             r"input declares no event time: pass df.withWatermark"):
        run_query(spark, lambda df: keyed_process(df, "user", time_fns.RegistersEventTimer(), time_fns.PV_OUTPUT,
                                                  parallelism=2, state_root=str(tmp_path / "s")),
                  provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=EVENTS_SCHEMA,
                  checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    df = spark.readStream.schema(EVENTS_SCHEMA).parquet(input_dir).withWatermark("ts", "1 second").drop("ts")
    with pytest.raises(ProcessDefinitionError, match=r"event-time column 'ts' is not among the input's columns"):
        keyed_process(df, "user", time_fns.PageViews(), time_fns.PV_OUTPUT)
    ok = spark.readStream.schema(EVENTS_SCHEMA).parquet(input_dir).withWatermark("ts", "1 second")
    with pytest.raises(ProcessDefinitionError, match="late_rows must be"):
        keyed_process(ok, "user", time_fns.PageViews(), time_fns.PV_OUTPUT, late_rows="keep")


# ------------------------------------------------------------------ processing time, idle source
def test_processing_time_timers_fire_while_the_source_is_idle(spark, tmp_path):
    """One input file, then nothing: the tick source runs a batch once the earliest
    processing-time timer has passed (no heartbeat), and the timers registered 1.5 s after the
    first batch's processing time fire in that later batch. Waits for the output (bounded),
    asserts on content."""
    ship_module_by_value(time_fns)
    input_dir = tmp_path / "in"
    write_batches(input_dir, [[(f"u{i}", "/", at(i)) for i in range(5)]], EVENTS_SCHEMA)
    outputs: dict[int, list] = {}
    lock = threading.Lock()

    def sink(batch_df, batch_id):
        rows = [tuple(r) for r in batch_df.collect()]
        with lock:
            outputs[batch_id] = rows

    df = spark.readStream.schema(EVENTS_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(input_dir))
    out = keyed_process(df, "user", time_fns.ProcessingTimeReminder(1500), "user string, fired bigint, seen bigint, now bigint",
                        parallelism=2, state_root=str(tmp_path / "state"))
    query = (out.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with lock:
                fired = [r for rows in outputs.values() for r in rows]
            if len(fired) >= 5:
                break
            time.sleep(0.5)
    finally:
        query.stop()
    with lock:
        fired_batches = {b: rows for b, rows in outputs.items() if rows}
        ran = sorted(outputs)
    fired = sorted(r for rows in fired_batches.values() for r in rows)
    assert [r[0] for r in fired] == [f"u{i}" for i in range(5)], f"each user's timer fires once: {fired}"
    for user, fired_at, seen, now in fired:
        assert fired_at == seen + 1500 and now >= fired_at
    assert min(fired_batches) >= 1 and len(ran) >= 2, "they fired in a later batch, without new input"
    assert max(ran) <= 2, f"one batch for the input, then one for each timer time that passed: {ran}"


def test_idle_heartbeat_is_ignored_with_a_warning(spark, events):
    input_dir, _ = events
    df = spark.readStream.schema(EVENTS_SCHEMA).parquet(input_dir)
    with pytest.warns(FutureWarning, match="idle_heartbeat"):
        keyed_process(df, "user", time_fns.ProcessingTimeReminder(1500), "user string, fired bigint",
                      parallelism=2, idle_heartbeat=True)

"""Time in keyed functions on real streaming queries: event-time timers, watermarks, late rows,
deleting timers, restarts, a task retry inside on_timer, a rescale 4 -> 3 -> 6 with pending
timers, and processing-time timers that fire while the source is idle. Every run is compared
with a plain-Python model of the documented time model (tests/process/time_fns.py)."""

from __future__ import annotations

import random
import threading
import time

import pytest

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


def test_event_time_page_view_counter_matches_the_model(events, page_views):
    _, batches = events
    expected = time_fns.expected_page_views(batches, DELAY_MS)
    assert page_views.batches == expected
    fired = [r for rows in expected.values() for r in rows]
    assert len(fired) >= 15 and len({r[3] for r in fired}) >= 2, "timers fire, in several batches"
    late = sum(1 for b, rows in enumerate(batches) for r in rows
               if time_fns.ms_of(r[2]) <= time_fns.watermarks(batches, lambda r: time_fns.ms_of(r[2]), DELAY_MS)[b])
    assert late >= NUM_BATCHES - 1, "the input has late rows, which the model drops"

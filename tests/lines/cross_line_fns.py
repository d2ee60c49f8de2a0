"""Shared by the cross-line tests and their jobs (``line_job.py``): the event-time page-view counter
(``time_fns.PageViews``: keyed_process with event-time timers) over seeded input, run on any part
of its batches, and its model."""

from __future__ import annotations

import os
import random

import time_fns
from spark_state.process import keyed_process
from streaming_harness import HDFS_PROVIDER, RunResult, run_query, ship_module_by_value, write_batches
from time_fns import EVENTS_SCHEMA, at

DELAY_MS = 3000
NUM_BATCHES = 6


def events(seed: int = 23, users: int = 12) -> list[list[tuple]]:
    """Views moving ~4 s of event time per batch, out of order by up to 6 s."""
    rng = random.Random(seed)
    return [[(f"u{rng.randrange(users)}", f"/p{rng.randrange(5)}",
              at(max(b * 4000 + rng.randrange(-6000, 2000), 0) + rng.randrange(1000))) for _ in range(40)]
            for b in range(NUM_BATCHES)]


def expected() -> dict[int, list]:
    return time_fns.expected_page_views(events(), DELAY_MS)


def run_page_views(spark, root: str, checkpoint: str, state_root: str, start: int, upto: int,
                   parallelism: int) -> RunResult:
    """Write batches ``[start, upto)`` under ``root`` and run the counter on ``checkpoint``."""
    ship_module_by_value(time_fns)
    write_batches(os.path.join(root, "in"), events()[start:upto], EVENTS_SCHEMA, start=start)

    def build(df):
        return keyed_process(df.withWatermark("ts", f"{DELAY_MS} milliseconds"), "user", time_fns.PageViews(),
                             time_fns.PV_OUTPUT, parallelism=parallelism, state_root=state_root)

    return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=os.path.join(root, "in"),
                     schema=EVENTS_SCHEMA, checkpoint_dir=checkpoint, output_mode="append")

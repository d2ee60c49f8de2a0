"""Functions of the time kill test (``test_time_kills.py``; shipped to the Python workers by value),
their plain-Python models, its input, and the hold points the test's harness controls.

* :class:`Sessions` -- the function of the report the test comes from: per key a count and the
  last event time, one event-time timer at ``last + GAP_MS``, deleted and registered again when
  a later row comes; the timer emits the session and clears the key.
* :class:`ProcessingCounts` -- processing-time timers: a key's first row of a batch registers a
  timer at the batch's processing time, which fires in the next batch and emits the rows
  counted since, with that batch's processing time.
* ``time_fns.CoCounts`` -- two inputs with event time.

Each model takes the input per batch *as Spark formed the batches* (the files each batch read,
from the query's checkpoint), so a kill that makes Spark read two files in one batch (Spark's
file source is exactly-once per file, not per batch boundary) is modelled as what it is.
"""

from __future__ import annotations

import os
import random
import time
from collections import defaultdict

from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from spark_state.process import KeyedProcessFunction
from spark_state.state import ValueStateDescriptor
from time_fns import at, model_batches, ms_of

EVENTS_SCHEMA = StructType([StructField("k", StringType()), StructField("ts", TimestampType())])
SESSION_OUTPUT = "k string, n bigint, last bigint, timer bigint, batch bigint, watermark bigint"
PTIME_OUTPUT = "k string, n bigint, batch bigint, processing_time bigint"
DELAY_MS = 3000
GAP_MS = 2000


def events(seed: int, batches: int, rows: int = 24, keys: int = 30) -> list[list[tuple]]:
    """Rows ``(k, ts)``: each batch moves ~2 s of event time, out of order within it, with one
    late row per batch after the first; many keys go idle for a few batches, so sessions end."""
    rng = random.Random(seed)
    out = []
    for b in range(batches):
        batch = [(f"k{rng.randrange(keys):02d}", at(b * 2000 + rng.randrange(2000))) for _ in range(rows)]
        if b:
            batch.append((f"k{rng.randrange(keys):02d}", at(max(0, b * 2000 - 9000))))
        out.append(batch)
    return out


class Holding:
    """A hold point the harness controls: while ``<control>/<name>`` exists the caller writes
    ``<control>/<name>.held-<pid>`` once and waits (the harness kills it or removes the file)."""

    def __init__(self, control: str) -> None:
        self.control = control

    def hold(self, name: str) -> None:
        flag = os.path.join(self.control, name)
        if not os.path.exists(flag):
            return
        with open(f"{flag}.held-{os.getpid()}", "w") as f:
            f.write(str(os.getpid()))
        while os.path.exists(flag):
            time.sleep(0.1)


class Sessions(KeyedProcessFunction):
    """See the module docstring. ``open`` holds at the harness's ``fn-<batch>`` flag."""

    def __init__(self, control: str) -> None:
        self.holding = Holding(control)

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        self.last = ctx.get_state(ValueStateDescriptor("last", LongType()))
        self.holding.hold(f"fn-{ctx.batch_id}")

    def process_element(self, row, ctx):
        service = ctx.timer_service()
        old = self.last.value()
        if old is not None:
            service.delete_event_time_timer(old + GAP_MS)
        last = ctx.timestamp() if old is None else max(old, ctx.timestamp())
        self.count.update((self.count.value() or 0) + 1)
        self.last.update(last)
        service.register_event_time_timer(last + GAP_MS)
        return ()

    def on_timer(self, timestamp, ctx):
        yield (ctx.current_key, self.count.value(), self.last.value(), timestamp, ctx.batch_id,
               ctx.timer_service().current_watermark())
        self.count.clear()
        self.last.clear()


def expected_sessions(batches: list[list[tuple]]) -> dict[int, list]:
    """:class:`Sessions` over ``batches`` (rows ``(k, ts)``), by batch."""
    count: dict[str, int] = defaultdict(int)
    last: dict[str, int] = {}
    out: dict[int, list] = {}

    def pending() -> list[int]:
        return [t + GAP_MS for t in last.values()]

    for b, rows, w in model_batches(batches, lambda r: ms_of(r[1]), DELAY_MS, pending):
        emitted = []
        for k in sorted(k for k, t in last.items() if t + GAP_MS <= w):
            emitted.append((k, count.pop(k), last[k], last.pop(k) + GAP_MS, b, w))
        for k, ts in rows:
            t = ms_of(ts)
            if t <= w:
                continue  # late: dropped
            count[k] += 1
            last[k] = max(last.get(k, t), t)
        out[b] = sorted(emitted)
    return out


class ProcessingCounts(KeyedProcessFunction):
    """See the module docstring."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        self.timer = ctx.get_state(ValueStateDescriptor("timer", LongType()))

    def process_element(self, row, ctx):
        self.count.update((self.count.value() or 0) + 1)
        if self.timer.value() is None:
            now = ctx.timer_service().current_processing_time()
            ctx.timer_service().register_processing_time_timer(now)
            self.timer.update(now)
        return ()

    def on_timer(self, timestamp, ctx):
        yield (ctx.current_key, self.count.value(), ctx.batch_id, ctx.timer_service().current_processing_time())
        self.count.clear()
        self.timer.clear()


def expected_processing_counts(batches: list[list[tuple]], timestamps: dict[int, int]) -> dict[int, list]:
    """:class:`ProcessingCounts` over ``batches``: every key of batch ``b - 1`` emits its rows of
    that batch in batch ``b``, at ``b``'s processing time (``timestamps``: Spark's, by batch).
    The last batch's timers are still pending (no batch runs for processing-time timers under
    ``availableNow``)."""
    out: dict[int, list] = {0: []}
    for b in range(1, len(batches)):
        counts: dict[str, int] = defaultdict(int)
        for k, _ in batches[b - 1]:
            counts[k] += 1
        out[b] = sorted((k, n, b, timestamps[b]) for k, n in counts.items())
    return out

"""Keyed functions with time on one input (event-time and processing-time timers, late rows,
operator state), and the outputs the time model (``model``) says each must emit.
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from typing import Optional

from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_state.process import KeyedProcessFunction, TimeDomain
from spark_state.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

from .model import ms_of, model_batches, watermarks

# ------------------------------------------------------------------------ page-view counter
PV_OUTPUT = "user string, pv bigint, fired_at bigint, batch bigint"


class PageViews(KeyedProcessFunction):
    """Flink's PeriodicPvResult: count page views per user; the first view after an emission
    registers an event-time timer 10 s later (kept in value state); the timer emits the
    count and clears the timer state."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        self.timer = ctx.get_state(ValueStateDescriptor("timer_ts", LongType()))

    def process_element(self, row, ctx):
        self.count.update((self.count.value() or 0) + 1)
        if self.timer.value() is None:
            t = ctx.timestamp() + 10_000
            ctx.timer_service().register_event_time_timer(t)
            self.timer.update(t)
        return ()

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() is TimeDomain.EVENT_TIME
        assert timestamp <= ctx.timer_service().current_watermark()
        yield (ctx.current_key, self.count.value(), timestamp, ctx.batch_id)
        self.timer.clear()


class FailingPageViews(PageViews):
    """:class:`PageViews` whose first attempt of batch ``fail_batch`` fails inside
    ``on_timer``, after some timers already fired and changed state."""

    def __init__(self, fail_batch: int) -> None:
        self.fail_batch = fail_batch

    def open(self, ctx):
        super().open(ctx)
        from pyspark import TaskContext

        self.failing = ctx.batch_id == self.fail_batch and TaskContext.get().attemptNumber() == 0
        self.fired = 0

    def on_timer(self, timestamp, ctx):
        yield from super().on_timer(timestamp, ctx)
        self.fired += 1
        if self.failing and self.fired == 2:
            raise RuntimeError("injected failure inside on_timer")


def expected_page_views(batches, delay_ms: int) -> dict[int, list]:
    count: dict[str, int] = defaultdict(int)
    timer: dict[str, Optional[int]] = {}
    out: dict[int, list] = {}
    pending = lambda: [t for t in timer.values() if t is not None]  # noqa: E731
    for b, rows, w in model_batches(batches, lambda r: ms_of(r[2]), delay_ms, pending):
        emitted = []
        for user, t in sorted((u, t) for u, t in timer.items() if t is not None and t <= w):
            emitted.append((user, count[user], t, b))
            timer[user] = None
        for user, _, ts in rows:
            t = ms_of(ts)
            if t <= w:
                continue  # late: dropped
            count[user] += 1
            if timer.get(user) is None:
                timer[user] = t + 10_000
        out[b] = sorted(emitted)
    return out


# ------------------------------------------------------------------ tumbling window by hand
WINDOW_OUTPUT = "url string, window_start bigint, window_end bigint, pv bigint"


class FakeWindow(KeyedProcessFunction):
    """Flink's FakeWindowResult: a tumbling event-time window per url from map state
    (window start -> count) and a timer at window end - 1."""

    def __init__(self, size_ms: int) -> None:
        self.size = size_ms

    def open(self, ctx):
        self.counts = ctx.get_map_state(MapStateDescriptor("window_pv", LongType(), LongType()))

    def process_element(self, row, ctx):
        start = ctx.timestamp() // self.size * self.size
        ctx.timer_service().register_event_time_timer(start + self.size - 1)
        self.counts.put(start, (self.counts.get(start) or 0) + 1)
        return ()

    def on_timer(self, timestamp, ctx):
        start = timestamp + 1 - self.size
        yield (ctx.current_key, start, start + self.size, self.counts.get(start))
        self.counts.remove(start)


def expected_windows(batches, size_ms: int, delay_ms: int) -> dict[int, list]:
    """Rows are (user, url, ts); windows per url."""
    counts: dict[tuple[str, int], int] = defaultdict(int)
    out: dict[int, list] = {}
    pending = lambda: [start + size_ms - 1 for _, start in counts]  # noqa: E731
    for b, rows, w in model_batches(batches, lambda r: ms_of(r[2]), delay_ms, pending):
        emitted = []
        for (url, start) in sorted(k for k in counts if k[1] + size_ms - 1 <= w):
            emitted.append((url, start, start + size_ms, counts.pop((url, start))))
        for _, url, ts in rows:
            t = ms_of(ts)
            if t <= w:
                continue
            counts[(url, t // size_ms * size_ms)] += 1
        out[b] = sorted(emitted)
    return out


# -------------------------------------------------------------- timers registered and deleted
SESSION_OUTPUT = "user string, kind string, at bigint, n bigint, batch bigint"


class InactivityAlert(KeyedProcessFunction):
    """Every view moves the user's inactivity timer: delete the old one, register one 5 s
    after the view. ``url == 'logout'`` deletes it without a new one. When the timer fires it
    emits the views since the last alert and registers a follow-up 1 ms later, which is
    already due, so it fires in the same pass ('again', once)."""

    def open(self, ctx):
        self.timer = ctx.get_state(ValueStateDescriptor("timer", LongType()))
        self.views = ctx.get_state(ValueStateDescriptor("views", LongType()))
        self.again = ctx.get_state(ValueStateDescriptor("again", LongType()))

    def process_element(self, row, ctx):
        ts = ctx.timer_service()
        old = self.timer.value()
        if old is not None:
            ts.delete_event_time_timer(old)
            self.timer.clear()
        self.views.update((self.views.value() or 0) + 1)
        if row.url != "logout":
            t = ctx.timestamp() + 5000
            ts.register_event_time_timer(t)
            ts.register_event_time_timer(t)  # a second registration is a no-op
            self.timer.update(t)
        return ()

    def on_timer(self, timestamp, ctx):
        if self.again.value() == timestamp:
            self.again.clear()
            yield (ctx.current_key, "again", timestamp, None, ctx.batch_id)
            return
        yield (ctx.current_key, "idle", timestamp, self.views.value(), ctx.batch_id)
        self.views.clear()
        self.timer.clear()
        self.again.update(timestamp + 1)
        ctx.timer_service().register_event_time_timer(timestamp + 1)


def expected_inactivity(batches, delay_ms: int) -> dict[int, list]:
    pending: dict[tuple[str, int], str] = {}  # (user, ts) -> "idle" | "again"
    current: dict[str, Optional[int]] = {}
    views: dict[str, int] = defaultdict(int)
    out: dict[int, list] = {}
    pending_times = lambda: [t for _, t in pending]  # noqa: E731
    for b, rows, w in model_batches(batches, lambda r: ms_of(r[2]), delay_ms, pending_times):
        emitted = []
        heap = [(t, u) for (u, t) in pending if t <= w]
        heapq.heapify(heap)
        while heap:
            t, u = heapq.heappop(heap)
            kind = pending.pop((u, t))
            if kind == "idle":
                emitted.append((u, "idle", t, views[u], b))
                views[u] = 0
                current[u] = None
                pending[(u, t + 1)] = "again"
                if t + 1 <= w:
                    heapq.heappush(heap, (t + 1, u))
            else:
                emitted.append((u, "again", t, None, b))
        for user, url, ts in rows:
            t = ms_of(ts)
            if t <= w:
                continue
            if current.get(user) is not None:
                pending.pop((user, current[user]), None)
                current[user] = None
            views[user] += 1
            if url != "logout":
                current[user] = t + 5000
                pending[(user, t + 5000)] = "idle"
        out[b] = sorted(emitted)
    return out


# ------------------------------------------------------------------------------ late rows
LATE_OUTPUT = "user string, ts bigint, late boolean, watermark bigint, batch bigint"


class ReportLateness(KeyedProcessFunction):
    """Emits every row it receives with ``ctx.is_late()`` and the batch's watermark."""

    def process_element(self, row, ctx):
        yield (ctx.current_key, ctx.timestamp(), ctx.is_late(), ctx.timer_service().current_watermark(), ctx.batch_id)


def expected_lateness(batches, delay_ms: int, deliver: bool) -> dict[int, list]:
    out: dict[int, list] = {}
    for b, (rows, w) in enumerate(zip(batches, watermarks(batches, lambda r: ms_of(r[2]), delay_ms))):
        emitted = []
        for user, _, ts in rows:
            t = ms_of(ts)
            late = t <= w
            if late and not deliver:
                continue
            emitted.append((user, t, late, w, b))
        out[b] = sorted(emitted)
    return out


# -------------------------------------------------------------------- processing-time timers
class ProcessingTimeReminder(KeyedProcessFunction):
    """Registers a processing-time timer ``delay_ms`` after the batch's processing time for
    every new user; the timer emits once."""

    def __init__(self, delay_ms: int) -> None:
        self.delay = delay_ms

    def open(self, ctx):
        self.seen = ctx.get_state(ValueStateDescriptor("seen", LongType()))

    def process_element(self, row, ctx):
        if self.seen.value() is None:
            now = ctx.timer_service().current_processing_time()
            self.seen.update(now)
            ctx.timer_service().register_processing_time_timer(now + self.delay)
        return ()

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() is TimeDomain.PROCESSING_TIME
        yield (ctx.current_key, timestamp, self.seen.value(), ctx.timer_service().current_processing_time())


# ------------------------------------------------------------ keyed function + operator state
BUFFER_OUTPUT = "kind string, k string, v bigint, n bigint"


class BufferingCounter(KeyedProcessFunction):
    """A keyed running count that also buffers every row in operator list state (Flink's
    BufferingSink on a keyed stream, ``CheckpointedFunction``): the buffer is restored in
    ``initialize_state``, flushed as 'flush' rows once it holds ``threshold`` rows, and
    snapshotted in ``snapshot_state``."""

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold

    def initialize_state(self, ctx):
        row_type = StructType([StructField("k", StringType()), StructField("v", LongType())])
        self.checkpointed = ctx.get_list_state(ListStateDescriptor("buffered", row_type))
        self.buffer = [tuple(r) for r in self.checkpointed.get()] if ctx.is_restored else []

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))

    def process_element(self, row, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield ("count", row.k, row.v, n)
        self.buffer.append((row.k, row.v))
        if len(self.buffer) >= self.threshold:
            for k, v in self.buffer:
                yield ("flush", k, v, ctx.partition_id)
            self.buffer = []

    def snapshot_state(self, ctx):
        self.checkpointed.update(self.buffer)


class RegistersEventTimer(KeyedProcessFunction):
    """Registers an event-time timer at a fixed time (fails without event time)."""

    def process_element(self, row, ctx):
        ctx.timer_service().register_event_time_timer(1000)
        return ()

    def on_timer(self, timestamp, ctx):
        return ()

"""Keyed functions with time (timers, event time, two inputs, broadcast rules), run in Spark's
Python workers (shipped by value), and plain-Python models of what each must emit.

The models do not use spark-state: they replay the documented time model on the input
batches -- the watermark of batch ``B`` is ``max(W(B-1), max event time of batches < B -
delay)``, 0 at first; due event-time timers fire (time order) before the batch's rows; rows
with event time ``<= W(B)`` are late. After the last input batch, one more batch runs without
input when the watermark it would have is above the last batch's and an event-time timer is
due at it (spark-state's tick source; :func:`model_batches`).
"""

from __future__ import annotations

import datetime as dt
import heapq
from collections import defaultdict
from typing import Any, Iterable, Optional, Sequence

from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from spark_state.process import (
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    TimeDomain,
)
from spark_state.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

EVENTS_SCHEMA = StructType([StructField("user", StringType()), StructField("url", StringType()),
                            StructField("ts", TimestampType())])
EPOCH = dt.datetime(2024, 1, 1)
EPOCH_MS = int(EPOCH.replace(tzinfo=dt.timezone.utc).timestamp() * 1000)


def at(ms: int) -> dt.datetime:
    """The event time ``EPOCH + ms`` as a naive UTC datetime (what the input files hold)."""
    return EPOCH + dt.timedelta(milliseconds=ms)


def ms_of(t: dt.datetime) -> int:
    return EPOCH_MS + int((t - EPOCH) / dt.timedelta(milliseconds=1))


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


def watermarks(batches: Sequence[Sequence[Any]], ts_of, delay_ms: int) -> list[int]:
    """The documented watermark of each batch (0 first, never backwards)."""
    out, w, max_ev = [], 0, None
    for rows in batches:
        if max_ev is not None:
            w = max(w, max_ev - delay_ms)
        out.append(w)
        for r in rows:
            t = ts_of(r)
            if t is not None and (max_ev is None or t > max_ev):
                max_ev = t
    return out


def model_batches(batches: Sequence[Sequence[Any]], ts_of, delay_ms: int, pending) -> Iterable[tuple[int, Any, int]]:
    """``(batch id, rows, watermark)`` of each input batch, then of the batch without input that
    runs after them when its watermark is above the last one and some event-time timer in
    ``pending()`` (called after the last input batch was modelled) is due at it."""
    ws = watermarks(list(batches) + [[]], ts_of, delay_ms)
    n = len(batches)
    for b, rows in enumerate(batches):
        yield b, rows, ws[b]
    if n and ws[n] > ws[n - 1] and any(t <= ws[n] for t in pending()):
        yield n, [], ws[n]


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


# --------------------------------------------------------------------- two-stream full join
JOIN_SCHEMA = StructType([StructField("id", StringType()), StructField("src", StringType()),
                          StructField("ts", LongType())])
JOIN_OUTPUT = "id string, left string, right string"


class FullJoin(KeyedCoProcessFunction):
    """Flink's TwoStreamFullJoinExample: each side buffered in list state; a new row joins
    with everything the other side buffered for its key."""

    def open(self, ctx):
        row_type = StructType([StructField("src", StringType()), StructField("ts", LongType())])
        self.lefts = ctx.get_list_state(ListStateDescriptor("left", row_type))
        self.rights = ctx.get_list_state(ListStateDescriptor("right", row_type))

    def process_element1(self, row, ctx):
        self.lefts.add((row.src, row.ts))
        for r in self.rights.get():
            yield (ctx.current_key, f"{row.src}@{row.ts}", f"{r[0]}@{r[1]}")

    def process_element2(self, row, ctx):
        self.rights.add((row.src, row.ts))
        for lft in self.lefts.get():
            yield (ctx.current_key, f"{lft[0]}@{lft[1]}", f"{row.src}@{row.ts}")


def expected_full_join(left_batches, right_batches) -> list:
    """All pairs per key (order-free: every pair is emitted exactly once, by whichever
    side arrived second)."""
    lefts, rights = defaultdict(list), defaultdict(list)
    for lb in left_batches:
        for k, s, t in lb:
            lefts[k].append(f"{s}@{t}")
    for rb in right_batches:
        for k, s, t in rb:
            rights[k].append(f"{s}@{t}")
    return sorted((k, a, b) for k in lefts for a in lefts[k] for b in rights.get(k, []))


# ------------------------------------------------------------------ broadcast rule patterns
ACTION_SCHEMA = StructType([StructField("user", StringType()), StructField("action", StringType()),
                            StructField("seq", LongType())])
RULE_SCHEMA = StructType([StructField("version", LongType()), StructField("first", StringType()),
                          StructField("second", StringType())])
PATTERN_OUTPUT = "user string, first string, second string, seq bigint, rule_version bigint"
PATTERNS = MapStateDescriptor("patterns", LongType(), RULE_SCHEMA)


class PatternEvaluator(KeyedBroadcastProcessFunction):
    """Flink's BroadcastStateExample: the rule stream sets the current pattern (the rule with
    the highest version wins, one state entry); a user's previous action and this one
    matching the pattern emit a match."""

    def open(self, ctx):
        self.prev = ctx.get_state(ValueStateDescriptor("last_action", StringType()))

    def process_broadcast_element(self, row, ctx):
        rules = ctx.get_broadcast_state(PATTERNS)
        current = rules.get(0)
        if current is None or row.version >= current[0]:
            rules.put(0, (row.version, row.first, row.second))
        return ()

    def process_element(self, row, ctx):
        rule = ctx.get_broadcast_state(PATTERNS).get(0)
        prev = self.prev.value()
        if rule is not None and prev is not None and (prev, row.action) == (rule[1], rule[2]):
            yield (ctx.current_key, rule[1], rule[2], row.seq, rule[0])
        self.prev.update(row.action)


def expected_patterns(action_batches, rule_batches) -> dict[int, list]:
    rule: Optional[tuple] = None
    prev: dict[str, str] = {}
    out: dict[int, list] = {}
    for b, (actions, rules) in enumerate(zip(action_batches, rule_batches)):
        for r in sorted(rules, key=lambda r: r[0]):
            if rule is None or r[0] >= rule[0]:
                rule = tuple(r)
        emitted = []
        for user, action, seq in sorted(actions, key=lambda a: a[2]):
            p = prev.get(user)
            if rule is not None and p is not None and (p, action) == (rule[1], rule[2]):
                emitted.append((user, rule[1], rule[2], seq, rule[0]))
            prev[user] = action
        out[b] = sorted(emitted)
    return out


def flatten(batches: dict[int, list]) -> list:
    return sorted(r for rows in batches.values() for r in rows)


def rows_by_batch(batches: dict[int, Iterable]) -> dict[int, list]:
    return {b: sorted(rows) for b, rows in batches.items()}


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


# ---------------------------------------------------------------- two inputs with event time
CO_EVENTS_SCHEMA = StructType([StructField("id", StringType()), StructField("ts", TimestampType())])
CO_TIMER_OUTPUT = "id string, at bigint, lefts bigint, rights bigint, watermark bigint"


class CoCounts(KeyedCoProcessFunction):
    """Counts each key's rows per side; every row registers an event-time timer 5 s after
    it, which reports the key's counts (both sides share the key's state and timers)."""

    def open(self, ctx):
        self.lefts = ctx.get_state(ValueStateDescriptor("lefts", LongType()))
        self.rights = ctx.get_state(ValueStateDescriptor("rights", LongType()))

    def _row(self, state, ctx):
        state.update((state.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 5000)
        return ()

    def process_element1(self, row, ctx):
        return self._row(self.lefts, ctx)

    def process_element2(self, row, ctx):
        return self._row(self.rights, ctx)

    def on_timer(self, timestamp, ctx):
        yield (ctx.current_key, timestamp, self.lefts.value() or 0, self.rights.value() or 0,
               ctx.timer_service().current_watermark())


def expected_co_counts(left_batches, right_batches, left_delay: int, right_delay: int) -> dict[int, list]:
    """Watermark: min over the sides that have seen rows of (max event time - delay), never
    backwards, 0 at first; a row is late (dropped) if its time <= the batch's watermark."""
    w, max_l, max_r = 0, None, None
    counts: dict[str, list] = defaultdict(lambda: [0, 0])
    timers: set = set()
    out: dict[int, list] = {}
    inputs = list(zip(left_batches, right_batches))
    b = 0
    while b < len(inputs) + 1:
        cands = [m - d for m, d in ((max_l, left_delay), (max_r, right_delay)) if m is not None]
        next_w = max(w, min(cands)) if cands else w
        if b == len(inputs):  # the batch without input: runs if a timer is due at a higher watermark
            if not (next_w > w and any(t <= next_w for _, t in timers)):
                break
            inputs.append(([], []))
        lrows, rrows = inputs[b]
        w = next_w
        emitted = []
        for t, k in sorted((t, k) for k, t in timers if t <= w):
            timers.discard((k, t))
            emitted.append((k, t, counts[k][0], counts[k][1], w))
        for side, rows in ((0, lrows), (1, rrows)):
            for k, ts in rows:
                t = ms_of(ts)
                if t <= w:
                    continue
                counts[k][side] += 1
                timers.add((k, t + 5000))
        for _k, ts in lrows:
            max_l = ms_of(ts) if max_l is None else max(max_l, ms_of(ts))
        for _k, ts in rrows:
            max_r = ms_of(ts) if max_r is None else max(max_r, ms_of(ts))
        out[b] = sorted(emitted)
        b += 1
    return out

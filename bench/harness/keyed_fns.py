"""The keyed functions the benchmarks run, one definition each.

* :class:`RunningCount` -- the keyed running count (value state ``count``), per row: the
  workload every keyed benchmark has, and the state ``bench/state_data_bench.py`` reads back;
* :class:`RunningCountVector` -- the same in the vectorized form (``process_elements``);
* :class:`ListMap` / :class:`ListMapVector` -- a list and a map state per key;
* :class:`CountWithTimer` -- the count with one event-time timer per key (Flink's page-view
  counter); :class:`TimerPerKey` -- one timer per key at :data:`TIMER_MS`, all due at once;
* :class:`PendingTimers` -- timers an hour away (an idle source with timers pending);
* :class:`SoakCount` -- the soak test's bounded per-key state (count, last three, buckets).

PySpark's Python workers do not have ``bench/`` on their path, so this module registers itself
with PySpark's cloudpickle to be pickled *by value* when it is imported: the classes travel with
the function that uses them, and a worker needs only ``spark_state`` and ``pyspark``.
"""

from __future__ import annotations

import sys

from pyspark import cloudpickle
from pyspark.sql.types import LongType

from spark_state.process import KeyedProcessFunction
from spark_state.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

cloudpickle.register_pickle_by_value(sys.modules[__name__])

#: Every key's timer in :class:`TimerPerKey`: 1 ms after the epoch, so the first watermark above
#: it makes them all due at once.
TIMER_MS = 1


class RunningCount(KeyedProcessFunction):
    """Counts each key's rows in value state and emits ``(k, running count)`` per row."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))

    def process_element(self, row, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        return ((row.k, n),)


class RunningCountVector(KeyedProcessFunction):
    """:class:`RunningCount` in the vectorized form: one call per key and Arrow batch."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))

    def process_elements(self, rows, ctx):
        n = self.count.value() or 0
        self.count.update(n + len(rows))
        k = ctx.current_key
        return [(k, c) for c in range(n + 1, n + len(rows) + 1)]


class ListMap(KeyedProcessFunction):
    """Appends ``v`` to the key's list state, counts bucket ``v % 10`` in its map state, and emits
    ``(k, bucket, bucket count)`` per row."""

    def open(self, ctx):
        self.values = ctx.get_list_state(ListStateDescriptor("values", LongType()))
        self.buckets = ctx.get_map_state(MapStateDescriptor("buckets", LongType(), LongType()))

    def process_element(self, row, ctx):
        self.values.add(row.v)
        b = row.v % 10
        n = (self.buckets.get(b) or 0) + 1
        self.buckets.put(b, n)
        return ((row.k, b, n),)


class ListMapVector(ListMap):
    """:class:`ListMap` in the vectorized form (one ``add_all`` and one ``put_all`` per call)."""

    def process_elements(self, rows, ctx):
        vs = [r.v for r in rows]
        self.values.add_all(vs)
        counts: dict = {}
        get = self.buckets.get
        out = []
        for v in vs:
            b = v % 10
            n = counts.get(b)
            if n is None:
                n = get(b) or 0
            counts[b] = n = n + 1
            out.append((ctx.current_key, b, n))
        self.buckets.put_all(counts)
        return out


class CountWithTimer(KeyedProcessFunction):
    """Counts each key's rows; the first row after an emission registers an event-time timer at
    ``ts + 10 s`` (kept in value state), whose firing emits ``(k, count)``."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        self.timer = ctx.get_state(ValueStateDescriptor("timer", LongType()))

    def process_element(self, row, ctx):
        self.count.update((self.count.value() or 0) + 1)
        if self.timer.value() is None:
            t = ctx.timestamp() + 10_000
            ctx.timer_service().register_event_time_timer(t)
            self.timer.update(t)
        return ()

    def on_timer(self, timestamp, ctx):
        self.timer.clear()
        return ((ctx.current_key, self.count.value()),)


class TimerPerKey(KeyedProcessFunction):
    """Registers one event-time timer per key (at :data:`TIMER_MS`); its firing emits the key."""

    def open(self, ctx):
        pass

    def process_element(self, row, ctx):
        ctx.timer_service().register_event_time_timer(TIMER_MS)
        return ()

    def on_timer(self, timestamp, ctx):
        return ((ctx.current_key, timestamp),)


class PendingTimers(KeyedProcessFunction):
    """An event-time and a processing-time timer per key, an hour away: nothing is due."""

    def process_element(self, row, ctx):
        ts = ctx.timer_service()
        ts.register_event_time_timer(ctx.timestamp() + 3_600_000)  # an hour of event time away
        ts.register_processing_time_timer(ts.current_processing_time() + 3_600_000)
        return ()

    def on_timer(self, timestamp, ctx):
        return ()


class SoakCount(KeyedProcessFunction):
    """Per key a running count (value state), the last three values (list state, trimmed) and a
    count per ``v % 3`` (map state): all bounded per key, so the state is bounded by the key space."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        self.recent = ctx.get_list_state(ListStateDescriptor("recent", LongType()))
        self.buckets = ctx.get_map_state(MapStateDescriptor("buckets", LongType(), LongType()))

    def process_element(self, row, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        recent = self.recent.get() + [row.v]
        self.recent.update(recent[-3:])
        b = row.v % 3
        self.buckets.put(b, (self.buckets.get(b) or 0) + 1)
        return ((row.k, n),)

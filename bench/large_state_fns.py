"""The keyed functions of ``large_state_bench.py --suite keyed`` (a module of their own, shipped to the
workers by value)."""

from __future__ import annotations

from pyspark.sql.types import LongType

from spark_state.process import KeyedProcessFunction
from spark_state.state import ValueStateDescriptor

#: Every key's timer: 1 ms after the epoch, so the first watermark above it makes them all due at once.
TIMER_MS = 1


class RunningCount(KeyedProcessFunction):
    """Counts each key's rows in value state and emits the running count."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))

    def process_element(self, row, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        return ((row.k, n),)


class TimerPerKey(KeyedProcessFunction):
    """Registers one event-time timer per key (at :data:`TIMER_MS`); its firing emits the key."""

    def open(self, ctx):
        pass

    def process_element(self, row, ctx):
        ctx.timer_service().register_event_time_timer(TIMER_MS)
        return ()

    def on_timer(self, timestamp, ctx):
        return ((ctx.current_key, timestamp),)

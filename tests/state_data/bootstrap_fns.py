"""The keyed function of tests/state_data/test_bootstrap.py (shipped to the Python workers by
value): value, list and map state, and an event-time timer per row that reports the key's count."""

from __future__ import annotations

import json

from pyspark.sql.types import LongType, StringType

from spark_state.process import KeyedProcessFunction
from spark_state.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

OUTPUT = "k string, kind string, n bigint, vals string, buckets string, at bigint"
#: A row's timer fires this long after its event time.
TIMER_AFTER_MS = 30_000


class Activity(KeyedProcessFunction):
    """Per key: the row count (value), every value (list), the count per ``v % 3`` (map); each
    row registers an event-time timer ``TIMER_AFTER_MS`` after it, whose firing emits the count.
    Outputs are independent of the order of a key's rows within a batch except ``n``."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        self.vals = ctx.get_list_state(ListStateDescriptor("vals", LongType()))
        self.buckets = ctx.get_map_state(MapStateDescriptor("buckets", LongType(), LongType()))

    def process_element(self, row, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.vals.add(row.v)
        b = row.v % 3
        self.buckets.put(b, (self.buckets.get(b) or 0) + 1)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + TIMER_AFTER_MS)
        yield (ctx.current_key, "row", n, json.dumps(sorted(self.vals.get())),
               json.dumps(sorted(self.buckets.items())), ctx.timestamp())

    def on_timer(self, timestamp, ctx):
        yield (ctx.current_key, "timer", self.count.value(), json.dumps(sorted(self.vals.get())),
               json.dumps(sorted(self.buckets.items())), timestamp)


class CountAsText(KeyedProcessFunction):
    """A bootstrap function whose ``count`` state is declared with another type (string)."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", StringType()))

    def process_element(self, row, ctx):
        self.count.update("1")

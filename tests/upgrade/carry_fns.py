"""The keyed function of tests/upgrade/test_carry_over.py (shipped to the Python workers by value):
a running count per key with a list of the key's ``n`` and a timer that never fires in the test.
It emits ``(*key, count)`` per row, so the set of a batch's outputs does not depend on the order of
a key's rows, whatever the key's columns."""

from __future__ import annotations

from pyspark.sql.types import IntegerType, LongType, StringType

from spark_state.process import KeyedProcessFunction
from spark_state.state import ListStateDescriptor, ValueStateDescriptor

#: A processing time no test reaches (year 2286), registered per key: a timer state to re-key.
FAR = 10 ** 13


class RunningCount(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", IntegerType()))

    def process_element(self, row, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.seen.add(row.n)
        ctx.timer_service().register_processing_time_timer(FAR + n)
        key = ctx.current_key if isinstance(ctx.current_key, tuple) else (ctx.current_key,)
        yield (*key, n)

    def on_timer(self, timestamp, ctx):
        return ()


class RunningCountAsText(RunningCount):
    """``RunningCount`` declaring its count as a string: a change its state's record refuses."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", StringType()))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", IntegerType()))

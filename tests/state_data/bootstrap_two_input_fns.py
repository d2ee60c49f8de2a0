"""The two-input functions of tests/state_data/test_bootstrap.py's co-process and broadcast
bootstraps (shipped to the Python workers by value). Their states do not depend on the order of a
key's rows; their output rows do, identically in the runs compared."""

from __future__ import annotations

from pyspark.sql.types import LongType

from spark_state.process import KeyedBroadcastProcessFunction, KeyedCoProcessFunction
from spark_state.state import MapStateDescriptor, ValueStateDescriptor

PAIRS_OUTPUT = "k string, side string, left_sum bigint, rights bigint"
SCALED_OUTPUT = "k string, n bigint, scaled bigint"
#: the broadcast state of :class:`Scaled`: key -> multiplier
MULTIPLIERS = MapStateDescriptor("multipliers", "string", "bigint")


class Pairs(KeyedCoProcessFunction):
    """Per key: the sum of the left rows' ``v`` and the count of the right rows."""

    def open(self, ctx):
        self.left_sum = ctx.get_state(ValueStateDescriptor("left_sum", LongType()))
        self.rights = ctx.get_state(ValueStateDescriptor("rights", LongType()))

    def process_element1(self, row, ctx):
        self.left_sum.update((self.left_sum.value() or 0) + row.v)
        yield (ctx.current_key, "left", self.left_sum.value(), self.rights.value() or 0)

    def process_element2(self, row, ctx):
        self.rights.update((self.rights.value() or 0) + 1)
        yield (ctx.current_key, "right", self.left_sum.value() or 0, self.rights.value())


class Scaled(KeyedBroadcastProcessFunction):
    """Broadcast rows set a key's multiplier; keyed rows count per key and emit ``v`` scaled."""

    def process_broadcast_element(self, row, ctx):
        ctx.get_broadcast_state(MULTIPLIERS).put(row.k, row.m)
        return ()

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))

    def process_element(self, row, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        multiplier = ctx.get_broadcast_state(MULTIPLIERS).get(row.k)
        yield (ctx.current_key, n, row.v * (multiplier if multiplier is not None else 1))

"""The keyed functions of tests/state_data/test_savepoint_surgery.py (shipped to the Python workers
by value): one counter function, ``Counter``, in the variants a surgery makes the restored query
declare. Every variant emits ``(k, n)`` per row, ``n`` the key's row count after the row: the set
of a batch's outputs does not depend on the order of a key's rows."""

from __future__ import annotations

from pyspark.sql.types import LongType

from spark_state.process import KeyedProcessFunction
from spark_state.state import ValueStateDescriptor
from spark_state.ttl import TtlConfig

OUTPUT = "k string, n bigint"
#: A TTL no test reaches, so that the state has a TTL marker, index entries and stamped values.
TTL = TtlConfig.builder("1 day").build()


class Counter(KeyedProcessFunction):
    """``count`` (value) and ``total`` (value with TTL): the key's rows and the sum of its ``v``."""

    SUM = "total"

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        self.total = ctx.get_state(ValueStateDescriptor(self.SUM, LongType(), ttl=TTL))

    def process_element(self, row, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.total.update((self.total.value() or 0) + row.v)
        yield (ctx.current_key, n)


class CountOnly(KeyedProcessFunction):
    """``Counter`` without its ``total`` state."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))

    def process_element(self, row, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield (ctx.current_key, n)


class CounterRenamed(Counter):
    """``Counter`` whose ``total`` state is called ``sum``."""

    SUM = "sum"


class CounterWithBonus(Counter):
    """``Counter`` plus a ``bonus`` state (value) that adds up ``v`` from what it was given."""

    def open(self, ctx):
        super().open(ctx)
        self.bonus = ctx.get_state(ValueStateDescriptor("bonus", LongType()))

    def process_element(self, row, ctx):
        self.bonus.update((self.bonus.value() or 0) + row.v)
        yield from super().process_element(row, ctx)

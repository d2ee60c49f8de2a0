"""Functions the process tests run inside Spark's Python workers (shipped by value).

Each is deterministic given its input, so runs can be compared exactly; ``expected_*``
helpers compute the same results in plain Python.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Iterable

from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_state.process import CheckpointedFunction, KeyedProcessFunction
from spark_state.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)

INPUT_SCHEMA = StructType([StructField("k", StringType()), StructField("v", LongType())])
ALL_STATES_OUTPUT = "k string, count bigint, recent string, per_bucket string, total bigint, mean double"


class Mean(AggregateFunction):
    """(sum, count) accumulator -> mean."""

    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def _add(a, b):
    return a + b


def all_states_descriptors() -> tuple:
    """The descriptors of :class:`AllStates`'s states: count, recent, buckets, total, mean."""
    return (ValueStateDescriptor("count", LongType()), ListStateDescriptor("recent", LongType()),
            MapStateDescriptor("buckets", LongType(), LongType()), ReducingStateDescriptor("total", _add, LongType()),
            AggregatingStateDescriptor("mean", Mean(), StructType([
                StructField("s", LongType()), StructField("n", LongType())])))


class AllStates(KeyedProcessFunction):
    """Every keyed state type per key; ``v == 0`` clears all of the key's state first.

    Emits per row: running count (value), the last 3 values (list), count per ``v % 3``
    bucket (map), running sum (reducing) and mean (aggregating) since the last clear.
    """

    def open(self, ctx):
        count, recent, buckets, total, mean = all_states_descriptors()
        self.count = ctx.get_state(count)
        self.recent = ctx.get_list_state(recent)
        self.buckets = ctx.get_map_state(buckets)
        self.total = ctx.get_reducing_state(total)
        self.mean = ctx.get_aggregating_state(mean)

    def process_element(self, row, ctx):
        if row.v == 0:
            for s in (self.count, self.recent, self.buckets, self.total, self.mean):
                s.clear()
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.recent.add(row.v)
        recent = self.recent.get()
        if len(recent) > 3:
            recent = recent[-3:]
            self.recent.update(recent)
        b = row.v % 3
        self.buckets.put(b, (self.buckets.get(b) or 0) + 1)
        self.total.add(row.v)
        self.mean.add(row.v)
        yield (ctx.current_key, n, json.dumps(recent), json.dumps(sorted(self.buckets.items())),
               self.total.get(), self.mean.get())


def all_states_add(state: dict[str, dict[str, Any]], k: str, v: int) -> dict[str, Any]:
    """The model of :class:`AllStates` taking row ``(k, v)``: updates ``state[k]`` and returns it
    (``count``, ``recent``, ``buckets``, ``total`` and the values ``vals`` since the last clear)."""
    s = state.get(k)
    if s is None or v == 0:
        s = state[k] = {"count": 0, "recent": [], "buckets": defaultdict(int), "total": 0, "vals": []}
    s["count"] += 1
    s["recent"] = (s["recent"] + [v])[-3:]
    s["buckets"][v % 3] += 1
    s["total"] += v
    s["vals"].append(v)
    return s


def expected_all_states(batches: Iterable[Iterable[tuple[str, int]]]) -> dict[int, list]:
    """What :class:`AllStates` must emit, per batch (rows sorted)."""
    state: dict[str, dict[str, Any]] = {}
    out: dict[int, list] = {}
    for b, rows in enumerate(batches):
        emitted = []
        for k, v in rows:
            s = all_states_add(state, k, v)
            emitted.append((k, s["count"], json.dumps(s["recent"]), json.dumps(sorted(s["buckets"].items())),
                            s["total"], sum(s["vals"]) / len(s["vals"])))
        out[b] = sorted(emitted)
    return out


class FailOnce(AllStates):
    """:class:`AllStates` that fails the first attempt of batch ``fail_batch`` in every
    partition, after it has already changed state for some rows."""

    def __init__(self, fail_batch: int) -> None:
        self.fail_batch = fail_batch

    def open(self, ctx):
        super().open(ctx)
        from pyspark import TaskContext

        self.failing = ctx.batch_id == self.fail_batch and TaskContext.get().attemptNumber() == 0
        self.seen = 0

    def process_element(self, row, ctx):
        yield from super().process_element(row, ctx)
        self.seen += 1
        if self.failing and self.seen == 2:
            raise RuntimeError("injected failure: first attempt of the batch")


def fail_first_attempt_of_batch(batch_to_fail: int):
    """A Python UDF after the function: fails the task's first attempt in ``batch_to_fail``
    (possibly after the function committed), so Spark retries the whole task."""
    from pyspark.sql import functions as F

    def check(k):
        from pyspark import TaskContext

        tc = TaskContext.get()
        if (tc.getLocalProperty("streaming.sql.batchId") == str(batch_to_fail)
                and tc.attemptNumber() == 0):
            raise RuntimeError("injected downstream failure")
        return k

    return F.udf(check, StringType())


class OperatorStates(CheckpointedFunction):
    """All three operator state modes. Every row appends ``v`` to the even-split list and the
    union list; the broadcast map records which partition first wrote it. Each row emits the
    state as restored at the start of the batch (``seq == 0`` marks the partition's first row)."""

    def initialize_state(self, ctx):
        self.split = ctx.get_list_state(ListStateDescriptor("split", LongType()))
        self.union = ctx.get_union_list_state(ListStateDescriptor("union", LongType()))
        self.bcast = ctx.get_broadcast_state(MapStateDescriptor("bcast", StringType(), LongType()))
        if not ctx.is_restored:
            self.bcast.put("writer", ctx.partition_id)
        self.restored = (self.split.get(), self.union.get(), self.bcast.get("writer"))
        self.seq = 0

    def process_element(self, row, ctx):
        split, union, writer = self.restored
        self.split.add(row.v)
        self.union.add(row.v)
        yield (ctx.batch_id, ctx.partition_id, ctx.parallelism, self.seq, row.v,
               json.dumps(split), json.dumps(union), writer)
        self.seq += 1

    def snapshot_state(self, ctx):
        self.bcast.put("batches", (self.bcast.get("batches") or 0) + 1)


OPERATOR_OUTPUT = ("batch bigint, partition int, parallelism int, seq int, v bigint, "
                   "split string, union_ string, writer bigint")


class WrongOutput(KeyedProcessFunction):
    """Emits a string where ``output_schema`` has a bigint."""

    def process_element(self, row, ctx):
        yield (ctx.current_key, "one", "[]", "[]", 0, 0.0)


class NullKeyOutput(KeyedProcessFunction):
    """Emits None for the key of rows with an odd ``v``, in a column declared ``not null``."""

    def process_element(self, row, ctx):
        yield (None if row.v % 2 else ctx.current_key, row.v)


NULL_KEY_OUTPUT = "k string not null, v bigint"


class ExpiringCount(KeyedProcessFunction):
    """A running count (value state) and the batches a key was seen in (list state, each
    element expiring on its own), both with a 2.5 s TTL on a clock that reads the batch id
    in seconds -- an injected clock, so expiry is deterministic."""

    TTL_MS = 2500

    def open(self, ctx):
        from spark_state.ttl import ManualClock, TtlConfig

        ttl = TtlConfig.builder(self.TTL_MS).clock(ManualClock(ctx.batch_id * 1000)).build()
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType(), default=0, ttl=ttl))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", LongType(), ttl=ttl))

    def process_element(self, row, ctx):
        n = self.count.value() + 1
        self.count.update(n)
        self.seen.add(ctx.batch_id)
        yield (ctx.current_key, n, json.dumps(self.seen.get()))


EXPIRING_OUTPUT = "k string, count bigint, seen string"


def expected_expiring_count(batches: Iterable[Iterable[tuple[str, int]]]) -> dict[int, list]:
    """What :class:`ExpiringCount` must emit: state written at batch w is gone at batch b
    once (b - w) * 1000 >= 2500."""
    count: dict[str, tuple[int, int]] = {}
    seen: dict[str, list[int]] = defaultdict(list)
    out: dict[int, list] = {}
    for b, rows in enumerate(batches):
        emitted = []
        for k, _ in rows:
            n, written = count.get(k, (0, b))
            n = n + 1 if (b - written) * 1000 < ExpiringCount.TTL_MS else 1
            count[k] = (n, b)
            seen[k] = [s for s in seen[k] if (b - s) * 1000 < ExpiringCount.TTL_MS] + [b]
            emitted.append((k, n, json.dumps(seen[k])))
        out[b] = sorted(emitted)
    return out


class InitializeOnly(KeyedProcessFunction):
    """Operator state kept with ``initialize_state`` alone: every row's value appended to the
    partition's list, each row emitting the list's length so far."""

    def initialize_state(self, ctx):
        self.seen = ctx.get_list_state(ListStateDescriptor("seen", LongType()))

    def process_element(self, row, ctx):
        self.seen.add(row.v)
        yield (row.k, len(list(self.seen.get())))


class SnapshotOnly(KeyedProcessFunction):
    """Operator state written by ``snapshot_state`` alone: the count of the partition's rows
    of each batch appended to a list (emitted as 0: the list is read back by the test)."""

    def open(self, ctx):
        self.rows = 0

    def process_element(self, row, ctx):
        self.rows += 1
        yield (row.k, 0)

    def snapshot_state(self, ctx):
        ctx.get_list_state(ListStateDescriptor("rows", LongType())).add(self.rows)

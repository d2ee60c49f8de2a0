"""Vectorized keyed functions (``process_elements``) the process tests run in Spark's Python
workers (shipped by value), and the plain-Python models of what they must emit."""

from __future__ import annotations

import json
from typing import Any, Iterable

from pyspark.sql.types import LongType

from spark_state.process import KeyedProcessFunction
from spark_state.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

VECTOR_OUTPUT = "k string, count bigint, recent string, per_bucket string"


class VectorStates(KeyedProcessFunction):
    """Per key: a running count (value state), the last 3 values (list state) and the count
    per ``v % 3`` bucket (map state), read once and written once per call; emits one row per
    input row, as the per-row form would."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        self.recent = ctx.get_list_state(ListStateDescriptor("recent", LongType()))
        self.buckets = ctx.get_map_state(MapStateDescriptor("buckets", LongType(), LongType()))

    def process_elements(self, rows, ctx):
        n = self.count.value() or 0
        recent = self.recent.get()
        buckets = dict(self.buckets.items())
        out = []
        for row in rows:
            assert row.k == ctx.current_key
            n += 1
            recent = (recent + [row.v])[-3:]
            buckets[row.v % 3] = buckets.get(row.v % 3, 0) + 1
            out.append((ctx.current_key, n, json.dumps(recent), json.dumps(sorted(buckets.items()))))
        self.count.update(n)
        self.recent.update(recent)
        self.buckets.put_all(buckets)
        return out


class FailingVectorStates(VectorStates):
    """:class:`VectorStates` failing the first attempt of batch ``fail_batch`` in every
    partition after its second call (state already changed, some of it still pending)."""

    def __init__(self, fail_batch: int) -> None:
        self.fail_batch = fail_batch

    def open(self, ctx):
        super().open(ctx)
        from pyspark import TaskContext

        self.failing = ctx.batch_id == self.fail_batch and TaskContext.get().attemptNumber() == 0
        self.calls = 0

    def process_elements(self, rows, ctx):
        out = super().process_elements(rows, ctx)
        self.calls += 1
        if self.failing and self.calls == 2:
            raise RuntimeError("injected failure: first attempt of the batch")
        return out


def expected_vector_states(batches: Iterable[Iterable[tuple[str, int]]]) -> dict[int, list]:
    state: dict[str, dict[str, Any]] = {}
    out: dict[int, list] = {}
    for b, rows in enumerate(batches):
        emitted = []
        for k, v in rows:
            s = state.setdefault(k, {"count": 0, "recent": [], "buckets": {}})
            s["count"] += 1
            s["recent"] = (s["recent"] + [v])[-3:]
            s["buckets"][v % 3] = s["buckets"].get(v % 3, 0) + 1
            emitted.append((k, s["count"], json.dumps(s["recent"]), json.dumps(sorted(s["buckets"].items()))))
        out[b] = sorted(emitted)
    return out


class OneRowAtATime(KeyedProcessFunction):
    """On the event-time loop: emits, per call, the key, how many rows came, the running
    count and the row's event time in seconds (``ctx.timestamp()`` is the row's)."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))

    def process_elements(self, rows, ctx):
        n = (self.count.value() or 0) + len(rows)
        self.count.update(n)
        return [(ctx.current_key, len(rows), n, ctx.timestamp() // 1000)]


ONE_ROW_OUTPUT = "k string, rows bigint, count bigint, ts bigint"

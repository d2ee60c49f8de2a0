"""Functions the schema evolution tests run in Spark's Python workers (shipped by value).

Each takes the state's declared type (or kind) as a constructor argument, so one class
plays both the old and the new code of a redeployment.
"""

from __future__ import annotations

import json
import warnings
from collections import defaultdict
from typing import Iterable

from pyspark.sql.types import LongType, StructType

from spark_state.process import CheckpointedFunction, KeyedProcessFunction
from spark_state.state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    PickleSerializer,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from spark_state.ttl import ManualClock, TtlConfig

COUNT_OUTPUT = "k string, count double, type string"


def _typed(type_name: str):
    if type_name == "pickle":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return PickleSerializer()
    return type_name


class TypedCount(KeyedProcessFunction):
    """A running count per key in state ``count`` declared as ``count_type`` (a type string
    or ``"pickle"``), as a value state or, with ``kind="list"``, a one-element list state.
    Emits the count and the Python type it was read back as."""

    def __init__(self, count_type: str = "bigint", kind: str = "value") -> None:
        self.count_type = count_type
        self.kind = kind

    def open(self, ctx):
        if self.kind == "list":
            self.list = ctx.get_list_state(ListStateDescriptor("count", _typed(self.count_type)))
        else:
            self.count = ctx.get_state(ValueStateDescriptor("count", _typed(self.count_type)))

    def process_element(self, row, ctx):
        if self.kind == "list":
            old = (self.list.get() or [None])[0]
        else:
            old = self.count.value()
        n = (old if old is not None else 0) + 1
        if self.kind == "list":
            self.list.update([n])
        else:
            self.count.update(n)
        yield (ctx.current_key, float(n), type(n).__name__)


def expected_counts(batches: Iterable[Iterable[tuple[str, int]]]) -> dict[int, list]:
    """What :class:`TypedCount` emits per batch, as (key, count) pairs (types checked apart)."""
    counts: dict[str, int] = defaultdict(int)
    out = {}
    for b, rows in enumerate(batches):
        emitted = []
        for k, _ in rows:
            counts[k] += 1
            emitted.append((k, float(counts[k])))
        out[b] = sorted(emitted)
    return out


PROFILE_OUTPUT = "k string, n bigint, last bigint, fields string, note string"


class Profile(KeyedProcessFunction):
    """A struct per key in value state ``profile`` declared as ``profile_type``; fields ``n``
    (rows seen) and ``last`` (last v) are maintained, the rest passed through. Emits the
    struct's fields as read at the row (before the update)."""

    V1 = "struct<first:bigint,n:int,last:bigint>"
    # ``first`` dropped, ``n`` widened to bigint, ``note`` new and nullable, order changed
    V2 = "struct<last:bigint,n:bigint,note:string>"

    def __init__(self, profile_type: str) -> None:
        self.profile_type = profile_type

    def open(self, ctx):
        self.profile = ctx.get_state(ValueStateDescriptor("profile", self.profile_type))

    def process_element(self, row, ctx):
        old = self.profile.value()
        fields = list(old.asDict()) if old is not None else []
        d = old.asDict() if old is not None else {}
        new = dict(d, n=(d.get("n") or 0) + 1, last=row.v)
        new.setdefault("first", row.v)
        self.profile.update(new)
        yield (ctx.current_key, d.get("n"), d.get("last"), json.dumps(fields), d.get("note"))


OPERATOR_OUTPUT = "partition int, restored string, types string"


class TypedBuffer(CheckpointedFunction):
    """Operator list state ``buffer`` of ``element_type`` (``mode``: ``list`` or ``union``):
    every row's ``v`` is appended; the first row of each partition emits what was restored."""

    def __init__(self, element_type: str = "bigint", mode: str = "list") -> None:
        self.element_type = element_type
        self.mode = mode

    def initialize_state(self, ctx):
        descriptor = ListStateDescriptor("buffer", self.element_type)
        if self.mode == "union":
            self.buffer = ctx.get_union_list_state(descriptor)
        else:
            self.buffer = ctx.get_list_state(descriptor)
        self.restored = self.buffer.get()
        self.emitted = False

    def process_element(self, row, ctx):
        self.buffer.add(row.v)
        if not self.emitted:
            self.emitted = True
            yield (ctx.partition_id, json.dumps(sorted(self.restored)),
                   json.dumps(sorted({type(x).__name__ for x in self.restored})))


# ------------------------------------------------------------------ descriptors held by the function
class Mean(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, acc):
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc):
        return acc[0] / acc[1]


HELD_OUTPUT = "k string, count bigint, recent string, buckets string, total bigint, mean double"


class HeldDescriptors(KeyedProcessFunction):
    """Flink style: descriptors are class attributes or built in ``__init__`` (the function
    object, descriptors included, is pickled to the executors), with a TTL on a manual
    clock that never lets anything expire."""

    COUNT = ValueStateDescriptor("count", LongType(), default=0,
                                 ttl=TtlConfig.builder("1h").clock(ManualClock(0)).build())
    TOTAL = ReducingStateDescriptor("total", lambda a, b: a + b, "bigint")

    def __init__(self) -> None:
        self.recent_d = ListStateDescriptor("recent", "bigint",
                                            ttl=TtlConfig.builder("1h").clock(ManualClock(0)).build())
        self.buckets_d = MapStateDescriptor("buckets", "bigint", LongType())
        self.mean_d = AggregatingStateDescriptor("mean", Mean(), StructType.fromJson({
            "type": "struct", "fields": [
                {"name": "s", "type": "long", "nullable": True, "metadata": {}},
                {"name": "n", "type": "long", "nullable": True, "metadata": {}}]}))

    def open(self, ctx):
        self.count = ctx.get_state(self.COUNT)
        self.total = ctx.get_reducing_state(self.TOTAL)
        self.recent = ctx.get_list_state(self.recent_d)
        self.buckets = ctx.get_map_state(self.buckets_d)
        self.mean = ctx.get_aggregating_state(self.mean_d)

    def process_element(self, row, ctx):
        n = self.count.value() + 1
        self.count.update(n)
        self.recent.update((self.recent.get() + [row.v])[-3:])
        b = row.v % 3
        self.buckets.put(b, (self.buckets.get(b) or 0) + 1)
        self.total.add(row.v)
        self.mean.add(row.v)
        yield (ctx.current_key, n, json.dumps(self.recent.get()), json.dumps(sorted(self.buckets.items())),
               self.total.get(), self.mean.get())


def expected_held(batches: Iterable[Iterable[tuple[str, int]]]) -> dict[int, list]:
    """What :class:`HeldDescriptors` emits per batch (rows sorted)."""
    state: dict[str, dict] = {}
    out = {}
    for b, rows in enumerate(batches):
        emitted = []
        for k, v in rows:
            s = state.setdefault(k, {"count": 0, "recent": [], "buckets": defaultdict(int), "vals": []})
            s["count"] += 1
            s["recent"] = (s["recent"] + [v])[-3:]
            s["buckets"][v % 3] += 1
            s["vals"].append(v)
            emitted.append((k, s["count"], json.dumps(s["recent"]), json.dumps(sorted(s["buckets"].items())),
                            sum(s["vals"]), sum(s["vals"]) / len(s["vals"])))
        out[b] = sorted(emitted)
    return out


class HeldOperatorDescriptors(CheckpointedFunction):
    """Operator state from a descriptor built in ``__init__``: a running sum per partition,
    emitted after every row (so each partition's last row of a batch carries its total)."""

    def __init__(self) -> None:
        self.sum_d = ListStateDescriptor("sum", LongType())

    def initialize_state(self, ctx):
        self.sum = ctx.get_list_state(self.sum_d)

    def process_element(self, row, ctx):
        total = sum(self.sum.get()) + row.v
        self.sum.update([total])
        yield (ctx.partition_id, total)


HELD_OPERATOR_OUTPUT = "partition int, total bigint"

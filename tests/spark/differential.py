"""Randomized differential testing of state store providers: generated stateful queries over
generated micro-batches, run on Spark's HDFS provider (the reference) and on the providers under
test, compared row by row *with batch ids* (in append mode when a row is emitted is part of the
contract) and by the number of state rows each operator reports after every batch.

A :class:`Spec` is drawn from a seed: one of the stateful operators that keep state by key and
evict by watermark or timeout (windowed aggregation, sliding windows, session windows,
``dropDuplicatesWithinWatermark``, ``dropDuplicates`` with event time, stream-stream inner and
left outer joins with time bounds, ``applyInPandasWithState`` with event-time timeouts) or that
keep state for ever (aggregation in update mode), with a key count, a watermark delay, a batch
count, rows per batch, how late rows may come, and a shuffle partition count. Inputs are made so
that eviction happens in the middle of the run, in several rounds.

Used by ``tests/spark/test_differential.py`` (a fixed seed in CI) and ``bench/differential.py``
(as many queries as asked for, with a summary of what was covered).
"""

from __future__ import annotations

import datetime as dt
import os
import random
from dataclasses import dataclass
from typing import Callable, Sequence

from streaming_harness import HDFS_PROVIDER, RunResult, run_query, write_batches

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
S0 = int(T0.timestamp())

OPERATORS = ("window", "sliding_window", "session_window", "dedup_within_watermark", "dedup_event_time",
             "join_inner", "join_left_outer", "apply_event_timeout", "agg_update")


@dataclass(frozen=True)
class Spec:
    """One generated query and its input."""

    seed: int
    operator: str
    keys: int
    delay_s: int
    batches: int
    rows_per_batch: int
    late_s: int
    partitions: int

    @property
    def two_inputs(self) -> bool:
        return self.operator.startswith("join")

    @property
    def output_mode(self) -> str:
        return "update" if self.operator in ("agg_update", "apply_event_timeout") else "append"

    def describe(self) -> str:
        return (f"seed {self.seed}: {self.operator}, {self.keys} keys, watermark {self.delay_s} s, "
                f"{self.batches} batches x {self.rows_per_batch} rows, up to {self.late_s} s late, "
                f"{self.partitions} partitions")


def draw(seed: int, operators: Sequence[str] = OPERATORS) -> Spec:
    rng = random.Random(seed)
    return Spec(
        seed=seed,
        operator=rng.choice(list(operators)),
        keys=rng.choice([3, 8, 20, 40, 80]),
        delay_s=rng.choice([10, 30, 60, 120]),
        batches=rng.randint(4, 8),
        rows_per_batch=rng.choice([5, 20, 60]),
        late_s=rng.choice([0, 30, 90]),
        partitions=rng.randint(2, 5),
    )


def schema():
    from pyspark.sql import types as T

    return T.StructType([T.StructField("k", T.StringType()), T.StructField("ts", T.TimestampType()),
                         T.StructField("v", T.LongType())])


def batches_of(spec: Spec, side: int = 0) -> list[list[tuple]]:
    """Batch b holds event times from ``60 b - late_s`` to ``60 b + 60`` seconds (10 s steps for
    ``dedup_event_time``, so that (key, time) pairs repeat across batches)."""
    rng = random.Random(spec.seed * 31 + side)
    step = 10 if spec.operator == "dedup_event_time" else 1
    out = []
    for b in range(spec.batches):
        rows = []
        for _ in range(rng.randint(max(1, spec.rows_per_batch // 2), spec.rows_per_batch)):
            offset = rng.randrange(-spec.late_s, 60) if spec.late_s else rng.randrange(0, 60)
            t = 60 * b + offset // step * step
            rows.append((f"k{rng.randrange(spec.keys)}", T0 + dt.timedelta(seconds=t), rng.randrange(1000)))
        out.append(sorted(rows, key=lambda r: (r[0], r[1], r[2])))
    return out


def timeout_fn(key, pdf_iter, state):
    """Running (n, total) per key; the state times out ``delay`` after the key's newest event (at
    least one event-time step past the watermark), and the timeout emits the final totals."""
    import pandas as pd

    if state.hasTimedOut:
        n, total, _ = state.get
        state.remove()
        yield pd.DataFrame({"k": [key[0]], "n": [n], "total": [total], "status": ["expired"]})
        return
    n, total, newest = state.get if state.exists else (0, 0, 0)
    for pdf in pdf_iter:
        n += len(pdf)
        total += int(pdf["v"].sum())
        newest = max(newest, int(pdf["tsl"].max()))
    state.update((n, total, newest))
    state.setTimeoutTimestamp(max(newest * 1000 + 20_000, state.getCurrentWatermarkMs() + 1))
    yield pd.DataFrame({"k": [key[0]], "n": [n], "total": [total], "status": ["active"]})


def build(spec: Spec) -> Callable:
    """The query of ``spec``: a function of its input DataFrame(s)."""
    from pyspark.sql import functions as F

    delay = f"{spec.delay_s} seconds"
    secs = (F.col("ts").cast("long") - S0)

    def wm(df):
        return df.withWatermark("ts", delay)

    if spec.operator == "window":
        return lambda df: (wm(df).groupBy(F.window("ts", "1 minute"), "k").agg(F.count("*").alias("n"),
                           F.sum("v").alias("total")).select((F.col("window.start").cast("long") - S0).alias("w"),
                                                             "k", "n", "total"))
    if spec.operator == "sliding_window":
        return lambda df: (wm(df).groupBy(F.window("ts", "1 minute", "30 seconds"), "k").count()
                           .select((F.col("window.start").cast("long") - S0).alias("w"), "k", "count"))
    if spec.operator == "session_window":
        return lambda df: (wm(df).groupBy(F.session_window("ts", "20 seconds"), "k").agg(F.count("*").alias("n"))
                           .select("k", (F.col("session_window.start").cast("long") - S0).alias("s"),
                                   (F.col("session_window.end").cast("long") - S0).alias("e"), "n"))
    if spec.operator == "dedup_within_watermark":
        return lambda df: wm(df).dropDuplicatesWithinWatermark(["k"]).select("k", secs.alias("t"), "v")
    if spec.operator == "dedup_event_time":
        return lambda df: wm(df).dropDuplicates(["k", "ts"]).select("k", secs.alias("t"))
    if spec.operator in ("join_inner", "join_left_outer"):
        how = "inner" if spec.operator == "join_inner" else "left_outer"

        def join(left, right):
            left = left.select("k", F.col("ts").alias("lt"), F.col("v").alias("lv")).withWatermark("lt", delay)
            right = right.select(F.col("k").alias("rk"), F.col("ts").alias("rt"),
                                 F.col("v").alias("rv")).withWatermark("rt", delay)
            joined = left.join(right, F.expr("k = rk AND rt >= lt AND rt <= lt + interval 30 seconds"), how)
            return joined.select("k", (F.col("lt").cast("long") - S0).alias("lt"), "lv",
                                 (F.col("rt").cast("long") - S0).alias("rt"), "rv")
        return join
    if spec.operator == "apply_event_timeout":
        from pyspark.sql.streaming.state import GroupStateTimeout

        return lambda df: (wm(df).withColumn("tsl", F.col("ts").cast("long")).groupBy("k").applyInPandasWithState(
            timeout_fn, "k string, n long, total long, status string", "n long, total long, newest long",
            "update", GroupStateTimeout.EventTimeTimeout))
    if spec.operator == "agg_update":
        return lambda df: df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
    raise ValueError(f"unknown operator {spec.operator!r}")


def write_inputs(spec: Spec, root: str) -> list[str]:
    dirs = []
    for side in range(2 if spec.two_inputs else 1):
        d = os.path.join(root, f"in{side}")
        write_batches(d, batches_of(spec, side), schema())
        dirs.append(d)
    return dirs


def state_rows(result: RunResult) -> dict[int, list[int]]:
    return {p["batchId"]: [op["numRowsTotal"] for op in p.get("stateOperators") or []]
            for p in result.progress if "batchId" in p}


def run_spec(spark, spec: Spec, provider: str, dirs: list[str], checkpoint: str) -> RunResult:
    return run_query(spark, build(spec), provider_class=provider, input_dir=dirs, schema=[schema()] * len(dirs),
                     checkpoint_dir=checkpoint, output_mode=spec.output_mode,
                     extra_confs={"spark.sql.shuffle.partitions": str(spec.partitions)})


@dataclass
class Outcome:
    """What one spec's runs showed: differences (empty when every provider matched the reference)."""

    spec: Spec
    batches: int
    rows: int
    evicting_batches: int
    differences: list[str]


def compare(spark, spec: Spec, providers: Sequence[str], root: str) -> Outcome:
    """Run ``spec`` on the HDFS provider and each of ``providers``; report every difference."""
    dirs = write_inputs(spec, root)
    want = run_spec(spark, spec, HDFS_PROVIDER, dirs, os.path.join(root, "ck-reference"))
    differences = []
    for i, provider in enumerate(providers):
        got = run_spec(spark, spec, provider, dirs, os.path.join(root, f"ck-{i}"))
        for b in sorted(set(got.batches) | set(want.batches)):
            if got.batches.get(b) != want.batches.get(b):
                differences.append(f"{provider}: batch {b}: got {got.batches.get(b)!r}, want {want.batches.get(b)!r}")
        if state_rows(got) != state_rows(want):
            differences.append(f"{provider}: state rows per batch {state_rows(got)}, want {state_rows(want)}")
    removed = [sum(op["numRowsRemoved"] for op in p.get("stateOperators") or [])
               for p in want.progress if "batchId" in p]
    return Outcome(spec, len(want.batches), sum(len(r) for r in want.batches.values()),
                   sum(1 for n in removed if n > 0), differences)

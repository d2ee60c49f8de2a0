"""Every built-in stateful operator gives the same output on a provider under test as on
Spark's HDFS provider, micro-batch by micro-batch.

Each case is a small stateful query over 5-6 deterministic micro-batches (one parquet file
per batch and source, ``maxFilesPerTrigger=1``, ``trigger(availableNow=True)``; see
``streaming_harness``). The HDFS provider's run is the reference; it is computed once per case
and checked against what the case's data was designed to produce (state carried across
batches, late rows dropped, evictions and timeouts firing), so a provider that loses state
cannot match it by accident. Every provider in ``PROVIDERS_UNDER_TEST`` must then emit the same
rows in every batch and report the same number of state rows per operator and batch.

Further tests: restart from a checkpoint in the middle of the input (new provider instances
must restore the committed state), and a task that fails *after* the state store committed,
so the retried attempt re-commits an already committed version.

Providers under test are ids of ``streaming_harness``: a class, or ``<class>#<backend>`` for
spark-state's provider on one of its backends.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

import pytest

from streaming_harness import (
    HDFS_PROVIDER,
    ROCKSDB_PROVIDER,
    SPARKSTATE_HASHMAP,
    SPARKSTATE_PROVIDER,
    SPARKSTATE_SPILLING,
    RunResult,
    backends_default_on_every_line,
    merge_runs,
    run_query,
    ship_module_by_value,
    short_name,
    state_operator_metrics,
    write_batches,
)

pytestmark = pytest.mark.spark

#: Compared against the HDFS provider: spark-state's on both backends. Spark's RocksDB provider
#: passes these tests too (it was the suite's first provider under test, to show that the cases
#: compare providers fairly); add ROCKSDB_PROVIDER here to run it again, e.g. after changing a
#: case. CI leaves it out: it tests Spark's code, not ours, and was a third of this module's time.
PROVIDERS_UNDER_TEST = [SPARKSTATE_PROVIDER, SPARKSTATE_HASHMAP]

REFERENCE_PROVIDER = HDFS_PROVIDER

# The functions applyInPandasWithState / mapInPandas run live in Python workers, which cannot
# import this module (tests/ is not on their path): pickle them by value.
ship_module_by_value(sys.modules[__name__])

T0 = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def at(seconds: float) -> dt.datetime:
    """Event time ``seconds`` after T0; queries emit times as epoch seconds (``cast long``)."""
    return T0 + dt.timedelta(seconds=seconds)


S0 = int(T0.timestamp())  # epoch seconds of T0, to read emitted times back as offsets


def _types():
    from pyspark.sql import types as T

    return T


def schema_kv():
    T = _types()
    return T.StructType([T.StructField("k", T.StringType()), T.StructField("v", T.LongType())])


def schema_kts():
    T = _types()
    return T.StructType(
        [T.StructField("k", T.StringType()), T.StructField("ts", T.TimestampType()), T.StructField("v", T.LongType())]
    )


def schema_id_v():
    T = _types()
    return T.StructType([T.StructField("id", T.LongType()), T.StructField("v", T.LongType())])


def schema_id_ts():
    T = _types()
    return T.StructType(
        [T.StructField("id", T.LongType()), T.StructField("ts", T.TimestampType()), T.StructField("v", T.LongType())]
    )


# ---------------------------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    name: str
    schemas: list  # one StructType per source (factories are called lazily)
    batches: list  # per source: list of batches, each a list of rows
    build: Callable
    output_mode: str
    check: Callable[["Case", RunResult], None]  # asserts on the HDFS reference output
    #: whether a run stopped and restarted emits in the batches of the uninterrupted run (no
    #: watermark); with one, a run that stops ends with a no-data batch, so tests that restart
    #: compare with a reference restarted at the same batches (``reference_run(cuts=...)``)
    restart_per_batch: bool = True
    extra_confs: dict = field(default_factory=dict)

    @property
    def num_batches(self) -> int:
        return len(self.batches[0])


def _running_totals(batches, complete: bool = False) -> dict[int, list]:
    """Expected output of a per-key running (count, sum) in update or complete mode."""
    n: Counter = Counter()
    total: Counter = Counter()
    out = {}
    for b, rows in enumerate(batches):
        for k, v in rows:
            n[k] += 1
            total[k] += v
        keys = n if complete else {k for k, _ in rows}
        out[b] = sorted((k, n[k], total[k]) for k in keys)
    return out


# --- streaming aggregation ------------------------------------------------------------------

_rng = random.Random(20240101)
KV_BATCHES = [[(f"k{_rng.randrange(6)}", _rng.randint(1, 9)) for _ in range(10)] for _ in range(6)]


def build_agg(df):
    from pyspark.sql import functions as F

    return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))


def check_agg_update(case, ref):
    expected = _running_totals(case.batches[0])
    assert ref.batches == expected
    # counts carried across batches exceed what any single batch holds for a key
    max_in_batch = max(max(Counter(k for k, _ in rows).values()) for rows in case.batches[0])
    assert max(n for _, n, _ in ref.rows()) > max_in_batch


def check_agg_complete(case, ref):
    assert ref.batches == _running_totals(case.batches[0], complete=True)


def build_agg_window(df):
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "10 seconds")
        .groupBy(F.window("ts", "10 seconds"), "k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"))
        .select(
            (F.col("window.start").cast("long") - S0).alias("start"),
            (F.col("window.end").cast("long") - S0).alias("end"),
            "k",
            "n",
            "total",
        )
    )


def _window_batches():
    batches = []
    for i in range(6):
        rows = [(k, at(10 * i + off), int(10 * i + off)) for off in (0.5, 4, 8, 11) for k in ("a", "b")]
        batches.append(rows)
    batches[3].append(("a", at(5), 1000))  # late: the watermark is 21 s by batch 3
    return batches


def check_agg_window(case, ref):
    rows = ref.rows()
    assert rows, "append mode emitted nothing: the watermark never passed a window"
    by_window = {(s, k): (n, t) for s, _, k, n, t in rows}
    # window [10, 20) of "a" holds 10.5, 14, 18 from batch 1 and 11 from batch 0
    assert by_window[(10, "a")] == (4, 10 + 14 + 18 + 11)
    # the late row (ts 5, batch 3) was dropped: window [0, 10) holds batch 0's three rows
    assert by_window[(0, "a")] == (3, 0 + 4 + 8)
    assert len(rows) == len(set(rows)), "a window was emitted twice"


# --- deduplication --------------------------------------------------------------------------


def _dedup_batches():
    rng = random.Random(7)
    batches = []
    for b in range(6):
        ids = sorted({rng.randrange(25) for _ in range(8)})
        # within a batch, duplicates of an id are identical rows (v = f(id, batch)); across
        # batches v differs, so a re-emitted id shows which batch it came from
        rows = [(i, 100 * b + i) for i in ids for _ in range(1 + i % 2)]
        batches.append(rows)
    return batches


def build_dedup(df):
    return df.dropDuplicates(["id"])


def check_dedup(case, ref):
    first = {}
    expected = defaultdict(list)
    for b, rows in enumerate(case.batches[0]):
        for i, v in rows:
            if i not in first:
                first[i] = v
                expected[b].append((i, v))
    assert ref.batches == {b: sorted(set(expected.get(b, []))) for b in range(case.num_batches)}
    total_rows = sum(len(r) for r in case.batches[0])
    assert len(ref.rows()) < total_rows - case.num_batches  # cross-batch duplicates were dropped


def _dedup_wm_batches():
    batches = []
    for b in range(6):
        rows = [(10 * b + j, at(10 * b + j), b) for j in (1, 5, 9)]
        if b >= 1:  # redelivery of the previous batch's events: within the watermark
            rows += [(10 * (b - 1) + j, at(10 * (b - 1) + j), b) for j in (5, 9)]
        if b >= 3:  # redelivery of an old event: behind the watermark, dropped as late
            rows.append((1, at(1), b))
        batches.append(rows)
    return batches


def build_dedup_wm(df):
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "10 seconds")
        .dropDuplicates(["id", "ts"])
        .select("id", (F.col("ts").cast("long") - S0).alias("ts"), "v")
    )


def check_dedup_wm(case, ref):
    rows = ref.rows()
    keys = [(i, t) for i, t, _ in rows]
    assert len(keys) == len(set(keys)), "a duplicate (id, ts) was emitted twice"
    # every event was emitted once, from the batch that first delivered it
    assert sorted(rows) == sorted((10 * b + j, 10 * b + j, b) for b in range(6) for j in (1, 5, 9))
    last = state_operator_metrics(ref)
    assert last and last[0]["numRowsTotal"] < len(rows), "no dedup state was evicted"


def _dedup_within_batches():
    return [
        [(1, at(1), 10), (2, at(2), 20), (3, at(3), 30)],
        [(1, at(5), 11), (4, at(12), 40), (2, at(14), 21)],
        [(5, at(22), 50), (3, at(24), 31)],
        [(6, at(35), 60)],
        [(1, at(45), 12), (7, at(44), 70)],
        [(2, at(55), 22), (8, at(52), 80), (8, at(52), 80)],
    ]


def build_dedup_within(df):
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "10 seconds")
        .dropDuplicatesWithinWatermark(["id"])
        .select("id", (F.col("ts").cast("long") - S0).alias("ts"), "v")
    )


def check_dedup_within(case, ref):
    rows = ref.rows()
    ids = Counter(i for i, _, _ in rows)
    assert (1, 5, 11) not in rows and (2, 14, 21) not in rows, "duplicates within the watermark were emitted"
    assert ids[1] == 2 and (1, 45, 12) in rows, "id 1 was not emitted again after its state expired"
    assert ids[8] == 1


# --- stream-stream joins ----------------------------------------------------------------------


def _join_batches():
    """Left (k, lt, lv) and right (k, rt, rv) rows per batch. Matches need rt in [lt, lt+5]:
    some right rows come one batch after their left row, some one batch *before* it, a
    quarter of the left rows never match (left outer: emitted with nulls once evicted)."""
    left = [[] for _ in range(6)]
    right = [[] for _ in range(6)]
    n = 0
    for i in range(6):
        for off in (1, 4, 8):
            n += 1
            lt = 10 * i + off
            key = f"k{n % 3}"
            left[i].append((key, at(lt), n))
            if n % 4:
                rt = lt + 3
                right[min(int(rt // 10), 5)].append((key, at(rt), 100 + n))
        if i >= 1:  # left row arriving one batch after its matching right row
            lt = 10 * i - 4
            left[i].append(("kx", at(lt), 200 + i))
            right[i - 1].append(("kx", at(lt + 2), 300 + i))
        right[i].append(("kz", at(10 * i + 2), 400 + i))  # never matches
    return left, right


def _join_inputs(left_df, right_df, how):
    from pyspark.sql import functions as F

    left_df = left_df.select("k", F.col("ts").alias("lt"), F.col("v").alias("lv")).withWatermark("lt", "10 seconds")
    right_df = right_df.select(
        F.col("k").alias("rk"), F.col("ts").alias("rt"), F.col("v").alias("rv")
    ).withWatermark("rt", "10 seconds")
    joined = left_df.join(
        right_df, F.expr("k = rk AND rt >= lt AND rt <= lt + interval 5 seconds"), how
    )
    return joined.select(
        "k",
        (F.col("lt").cast("long") - S0).alias("lt"),
        "lv",
        (F.col("rt").cast("long") - S0).alias("rt"),
        "rv",
    )


def build_join_inner(left_df, right_df):
    return _join_inputs(left_df, right_df, "inner")


def build_join_left(left_df, right_df):
    return _join_inputs(left_df, right_df, "left_outer")


def _naive_join(case):
    left = [r for b in case.batches[0] for r in b]
    right = [r for b in case.batches[1] for r in b]
    return sorted(
        (k, int(lt.timestamp()) - S0, lv, int(rt.timestamp()) - S0, rv)
        for k, lt, lv in left
        for rk, rt, rv in right
        if k == rk and lt <= rt <= lt + dt.timedelta(seconds=5)
    )


def _batch_of(case, side: int, value) -> int:
    return next(b for b, rows in enumerate(case.batches[side]) if any(r[2] == value for r in rows))


def check_join_inner(case, ref):
    rows = ref.rows()
    assert sorted(rows) == _naive_join(case)
    cross = [r for r in rows if _batch_of(case, 0, r[2]) != _batch_of(case, 1, r[4])]
    assert len(cross) >= 8, "too few matches across batches: the test would not need join state"


def check_join_left(case, ref):
    rows = ref.rows()
    matched = [r for r in rows if r[3] is not None]
    unmatched = [r for r in rows if r[3] is None]
    assert sorted(matched) == _naive_join(case)
    assert len(unmatched) >= 3, "no unmatched left row was evicted and emitted with nulls"
    assert all(r[2] % 4 == 0 for r in unmatched)


# --- applyInPandasWithState -------------------------------------------------------------------


def running_total_fn(key, pdf_iter, state):
    """Per key: running (n, total) over all batches; emits the new totals of updated keys."""
    import pandas as pd

    n, total = state.get if state.exists else (0, 0)
    for pdf in pdf_iter:
        n += len(pdf)
        total += int(pdf["v"].sum())
    state.update((n, total))
    yield pd.DataFrame({"k": [key[0]], "n": [n], "total": [total]})


def build_apply_no_timeout(df):
    from pyspark.sql.streaming.state import GroupStateTimeout

    return df.groupBy("k").applyInPandasWithState(
        running_total_fn,
        "k string, n long, total long",
        "n long, total long",
        "update",
        GroupStateTimeout.NoTimeout,
    )


def check_apply_no_timeout(case, ref):
    assert ref.batches == _running_totals(case.batches[0])


def session_timeout_fn(key, pdf_iter, state):
    """Running (n, total) per key; the state expires 5 s (event time) after the key's newest
    event, and the expiry emits the final totals with status "expired"."""
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
    state.setTimeoutTimestamp(max(newest * 1000 + 5000, state.getCurrentWatermarkMs() + 1))
    yield pd.DataFrame({"k": [key[0]], "n": [n], "total": [total], "status": ["active"]})


def build_apply_event_timeout(df):
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (
        df.withWatermark("ts", "10 seconds")
        .withColumn("tsl", F.col("ts").cast("long"))
        .groupBy("k")
        .applyInPandasWithState(
            session_timeout_fn,
            "k string, n long, total long, status string",
            "n long, total long, newest long",
            "update",
            GroupStateTimeout.EventTimeTimeout,
        )
    )


def _timeout_batches():
    batches = [[("a", at(10 * i + 1), 1), ("a", at(10 * i + 8), 2)] for i in range(6)]
    batches[0] += [("b", at(2), 10), ("c", at(3), 100)]
    batches[1] += [("b", at(12), 20)]
    batches[4] += [("c", at(44), 200)]  # c timed out in batch 3; this starts a new state
    return batches


def check_apply_event_timeout(case, ref):
    rows = ref.rows()
    expired = sorted(r for r in rows if r[3] == "expired")
    assert expired == [("b", 2, 30, "expired"), ("c", 1, 100, "expired")]
    assert ("c", 1, 200, "active") in rows, "c's state was not removed at its timeout"
    assert ("a", 12, 18, "active") in rows  # a's state carried through all six batches


# --- session windows ------------------------------------------------------------------------


def _session_batches():
    spec = [
        [("a", 1), ("a", 4), ("a", 7), ("b", 2), ("c", 5)],
        [("a", 11), ("a", 14), ("b", 9), ("c", 8)],
        [("b", 21), ("b", 24), ("c", 22)],
        [("a", 30), ("a", 33), ("b", 27), ("c", 40)],
        [("a", 38), ("b", 45), ("c", 43), ("a", 2)],  # ("a", 2) is behind the watermark (30 s)
        [("a", 50), ("b", 52), ("c", 55), ("c", 58)],
    ]
    return [[(k, at(s), s) for k, s in rows] for rows in spec]


def build_session(df):
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "10 seconds")
        .groupBy(F.session_window("ts", "5 seconds"), "k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"))
        .select(
            "k",
            (F.col("session_window.start").cast("long") - S0).alias("start"),
            (F.col("session_window.end").cast("long") - S0).alias("end"),
            "n",
            "total",
        )
    )


def check_session(case, ref):
    rows = ref.rows()
    # a's first session spans batches 0 and 1 and is closed by the watermark later on;
    # the late ("a", 2) row of batch 4 did not reopen or extend it
    assert ("a", 1, 19, 5, 1 + 4 + 7 + 11 + 14) in rows
    assert ("b", 2, 7, 1, 2) in rows and ("b", 9, 14, 1, 9) in rows
    assert ("b", 21, 32, 3, 21 + 24 + 27) in rows  # spans batches 2 and 3
    assert len(rows) == len(set(rows))


# --- streaming limit ------------------------------------------------------------------------


def build_limit(df):
    return df.limit(7)


def check_limit(case, ref):
    assert [len(ref.batches.get(b, [])) for b in range(case.num_batches)] == [3, 3, 1, 0, 0]


# --- many keys, eviction in rounds ---------------------------------------------------------------
#
# The small cases above show each operator's semantics with hand-made rows; these make the state
# store do what production queries make it do: 30-40 keys over 3-4 partitions, event time moving a
# minute per batch with rows up to 90 s late, so that every batch from the third on evicts part of
# the state (windows closed, sessions ended, dedup entries and join rows expired, timeouts fired)
# while other keys live on. Each reference run is checked to evict in several rounds before its
# last batch; the providers under test must emit the same rows in the same batches.


def _eventful_batches(seed: int, keys: int, batches: int = 7, rows: int = 50) -> list:
    """``(k, ts, v)`` rows: batch b holds event times from ``60 b - 90`` to ``60 b + 60`` seconds."""
    rng = random.Random(seed)
    return [
        sorted(
            ((f"k{rng.randrange(keys)}", at(60 * b + rng.randrange(-90, 60)), rng.randrange(100)) for _ in range(rows)),
            key=lambda r: (r[0], r[1], r[2]),
        )
        for b in range(batches)
    ]


def check_evicts_in_rounds(case, ref):
    """State rows were removed in at least two batches before the last (eviction in the middle of
    the run, more than once), and output came out in at least three batches."""
    removed = {p["batchId"]: sum(op["numRowsRemoved"] for op in p.get("stateOperators") or [])
               for p in ref.progress if "batchId" in p}
    last = max(removed)
    rounds = [b for b, n in removed.items() if n > 0 and b < last]
    emitting = [b for b, rows in ref.batches.items() if rows]
    assert len(rounds) >= 2, f"rows removed per batch {removed}: eviction did not happen in rounds"
    assert len(emitting) >= 3, f"output only in batches {emitting}"


def build_window_many(df):
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "2 minutes")
        .groupBy(F.window("ts", "1 minute"), "k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"))
        .select((F.col("window.start").cast("long") - S0).alias("start"), "k", "n", "total")
    )


def build_session_many(df):
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "1 minute")
        .groupBy(F.session_window("ts", "30 seconds"), "k")
        .agg(F.count("*").alias("n"), F.sum("v").alias("total"))
        .select("k", (F.col("session_window.start").cast("long") - S0).alias("start"),
                (F.col("session_window.end").cast("long") - S0).alias("end"), "n", "total")
    )


def build_dedup_within_many(df):
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "1 minute")
        .dropDuplicatesWithinWatermark(["k"])
        .select("k", (F.col("ts").cast("long") - S0).alias("ts"), "v")
    )


def check_dedup_within_many(case, ref):
    check_evicts_in_rounds(case, ref)
    emitted = Counter(k for k, _, _ in ref.rows())
    assert max(emitted.values()) >= 3, "no key was emitted again after its dedup state expired"


def build_dedup_wm_many(df):
    from pyspark.sql import functions as F

    return (
        df.withWatermark("ts", "1 minute")
        .dropDuplicates(["k", "ts"])
        .select("k", (F.col("ts").cast("long") - S0).alias("ts"), "v")
    )


def _eventful_coarse(seed: int, keys: int) -> list:
    """:func:`_eventful_batches` at 10-second event times, so that (k, ts) repeats across batches."""
    return [[(k, ts.replace(second=ts.second // 10 * 10), v) for k, ts, v in rows]
            for rows in _eventful_batches(seed, keys)]


def _join_many(left_df, right_df, how):
    from pyspark.sql import functions as F

    left_df = left_df.select("k", F.col("ts").alias("lt"), F.col("v").alias("lv")).withWatermark("lt", "1 minute")
    right_df = right_df.select(
        F.col("k").alias("rk"), F.col("ts").alias("rt"), F.col("v").alias("rv")
    ).withWatermark("rt", "1 minute")
    joined = left_df.join(right_df, F.expr("k = rk AND rt >= lt AND rt <= lt + interval 30 seconds"), how)
    return joined.select(
        "k", (F.col("lt").cast("long") - S0).alias("lt"), "lv", (F.col("rt").cast("long") - S0).alias("rt"), "rv"
    )


def build_join_inner_many(left_df, right_df):
    return _join_many(left_df, right_df, "inner")


def build_join_left_many(left_df, right_df):
    return _join_many(left_df, right_df, "left_outer")


def check_join_left_many(case, ref):
    check_evicts_in_rounds(case, ref)
    assert sum(1 for r in ref.rows() if r[3] is None) >= 10, "few unmatched left rows were evicted"


def build_apply_timeout_many(df):
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (
        df.withWatermark("ts", "1 minute")
        .withColumn("tsl", F.col("ts").cast("long"))
        .groupBy("k")
        .applyInPandasWithState(
            session_timeout_fn,
            "k string, n long, total long, status string",
            "n long, total long, newest long",
            "update",
            GroupStateTimeout.EventTimeTimeout,
        )
    )


def check_apply_timeout_many(case, ref):
    check_evicts_in_rounds(case, ref)
    expired = [r for r in ref.rows() if r[3] == "expired"]
    assert len(expired) >= 10 and len({b for b, rows in ref.batches.items() for r in rows if r[3] == "expired"}) >= 3


CASES = [
    Case("agg_update", [schema_kv], [KV_BATCHES], build_agg, "update", check_agg_update),
    Case("agg_complete", [schema_kv], [KV_BATCHES], build_agg, "complete", check_agg_complete),
    Case("agg_window_append", [schema_kts], [_window_batches()], build_agg_window, "append", check_agg_window,
         restart_per_batch=False),
    Case("dedup", [schema_id_v], [_dedup_batches()], build_dedup, "append", check_dedup),
    Case("dedup_watermark", [schema_id_ts], [_dedup_wm_batches()], build_dedup_wm, "append", check_dedup_wm,
         restart_per_batch=False),
    Case("dedup_within_watermark", [schema_id_ts], [_dedup_within_batches()], build_dedup_within, "append",
         check_dedup_within, restart_per_batch=False),
    Case("join_inner", [schema_kts, schema_kts], list(_join_batches()), build_join_inner, "append",
         check_join_inner, restart_per_batch=False),
    Case("join_left_outer", [schema_kts, schema_kts], list(_join_batches()), build_join_left, "append",
         check_join_left, restart_per_batch=False),
    Case("apply_no_timeout", [schema_kv], [KV_BATCHES], build_apply_no_timeout, "update", check_apply_no_timeout),
    Case("apply_event_timeout", [schema_kts], [_timeout_batches()], build_apply_event_timeout, "update",
         check_apply_event_timeout, restart_per_batch=False),
    Case("session_window", [schema_kts], [_session_batches()], build_session, "append", check_session,
         restart_per_batch=False),
    Case("limit", [schema_id_v], [[[(10 * b + j, b) for j in range(3)] for b in range(5)]], build_limit, "append",
         check_limit),
    Case("window_many", [schema_kts], [_eventful_batches(7, 40)], build_window_many, "append",
         check_evicts_in_rounds, restart_per_batch=False),
    Case("session_many", [schema_kts], [_eventful_batches(8, 30)], build_session_many, "append",
         check_evicts_in_rounds, restart_per_batch=False),
    Case("dedup_within_many", [schema_kts], [_eventful_batches(9, 40)], build_dedup_within_many, "append",
         check_dedup_within_many, restart_per_batch=False),
    Case("dedup_wm_many", [schema_kts], [_eventful_coarse(10, 20)], build_dedup_wm_many, "append",
         check_evicts_in_rounds, restart_per_batch=False),
    Case("join_inner_many", [schema_kts, schema_kts], [_eventful_batches(11, 30), _eventful_batches(12, 30)],
         build_join_inner_many, "append", check_evicts_in_rounds, restart_per_batch=False),
    Case("join_left_many", [schema_kts, schema_kts], [_eventful_batches(13, 30), _eventful_batches(14, 30)],
         build_join_left_many, "append", check_join_left_many, restart_per_batch=False),
    Case("apply_timeout_many", [schema_kts], [_eventful_batches(15, 40)], build_apply_timeout_many, "update",
         check_apply_timeout_many, restart_per_batch=False),
]
CASES_BY_NAME = {c.name: c for c in CASES}
#: The hand-made cases (each operator's semantics) and the many-key ones (eviction in rounds); the
#: ops tests run the former.
EVICTION_CASES = [c for c in CASES if c.name.endswith("_many")]
SEMANTIC_CASES = [c for c in CASES if c not in EVICTION_CASES]

RESTART_CASES = ["agg_update", "dedup", "join_inner", "apply_event_timeout", "session_window", "window_many",
                 "dedup_within_many"]


# ---------------------------------------------------------------------------------------------
# Running


def write_inputs(case: Case, root, upto: Optional[int] = None, start: int = 0) -> list:
    """Write batches ``[start, upto)`` of every source under ``root/in<i>``; return the dirs."""
    dirs = []
    for i, (schema, batches) in enumerate(zip(case.schemas, case.batches)):
        d = os.path.join(os.fspath(root), f"in{i}")
        end = len(batches) if upto is None else upto
        write_batches(d, batches[start:end], schema(), start=start)
        dirs.append(d)
    return dirs


def run_case(spark, case: Case, provider: str, dirs, checkpoint, **kwargs) -> RunResult:
    return run_query(
        spark,
        case.build,
        provider_class=provider,
        input_dir=dirs,
        schema=[s() for s in case.schemas],
        checkpoint_dir=checkpoint,
        output_mode=case.output_mode,
        extra_confs=case.extra_confs,
        **kwargs,
    )


#: Input files of each case, written once for the whole test session.
_INPUTS: dict[str, list] = {}


def inputs_of(case: Case, tmp_path_factory) -> list:
    """The input files of ``case``, shared by all providers' runs and the reference runs."""
    if case.name not in _INPUTS:
        _INPUTS[case.name] = write_inputs(case, tmp_path_factory.mktemp(f"in-{case.name}"))
    return _INPUTS[case.name]


@pytest.fixture(scope="module")
def case_inputs(tmp_path_factory):
    """Input files of each case, written once and shared by all providers' runs."""
    return lambda case: inputs_of(case, tmp_path_factory)


#: Runs of the cases, per (case, provider, cuts), for the whole test session: this module's tests
#: and the ops tests (``ops_support.reference``) compare with the same runs.
_REFERENCES: dict[tuple[str, str, tuple[int, ...]], RunResult] = {}


def reference_run(spark, case: Case, tmp_path_factory, provider: str = REFERENCE_PROVIDER,
                  cuts: tuple[int, ...] = ()) -> RunResult:
    """The run of ``case`` on ``provider`` over all its batches, computed once per test session,
    provider and ``cuts``.

    Without cuts the run is uninterrupted, and first checked against what the case's data was
    designed to produce. With ``cuts`` the input arrives in parts: the query runs over the batches
    before the first cut, stops, and is restarted on its checkpoint with the next part added, and
    so on -- the reference for a test that stops and restarts (or savepoints and restores) at the
    same batches. With a watermark its output may differ from the uninterrupted run's: a run that
    stops with the watermark ahead of its state ends with a no-data batch that evicts, which an
    uninterrupted run does when the next data arrives (dropDuplicatesWithinWatermark then even
    emits other rows). Compared with it, every row and its batch id must match.
    """
    cuts = tuple(cuts)
    key = (case.name, provider, cuts)
    if key not in _REFERENCES:
        tag = "-".join(map(str, cuts))
        root = tmp_path_factory.mktemp(f"ref-{case.name}{'-cut-' + tag if cuts else ''}")
        if not cuts:
            result = run_case(spark, case, provider, inputs_of(case, tmp_path_factory), root / "ckpt")
            case.check(case, result)
        else:
            bounds = [0, *cuts, case.num_batches]
            runs = [run_case(spark, case, provider, write_inputs(case, root, start=start, upto=end), root / "ckpt")
                    for start, end in zip(bounds, bounds[1:])]
            result = RunResult(provider, merge_runs(*runs), [p for r in runs for p in r.progress])
        _REFERENCES[key] = result
    return _REFERENCES[key]


@pytest.fixture(scope="module")
def reference(spark, tmp_path_factory):
    """The HDFS provider's uninterrupted run of a case (computed once, sanity-checked)."""
    return lambda case: reference_run(spark, case, tmp_path_factory)


def state_rows(result: RunResult) -> dict[int, list]:
    """numRowsTotal of each stateful operator, per batch."""
    return {
        p["batchId"]: [op["numRowsTotal"] for op in p.get("stateOperators") or []]
        for p in result.progress
        if "batchId" in p
    }


def assert_same_batches(got: dict, want: dict, what: str) -> None:
    if got == want:
        return
    lines = [f"{what}: per-batch outputs differ"]
    for b in sorted(set(got) | set(want)):
        if got.get(b) != want.get(b):
            lines.append(f"  batch {b}: got {got.get(b)!r}\n  {' ' * len(str(b))}      want {want.get(b)!r}")
    pytest.fail("\n".join(lines[:12]))


PROVIDER_IDS = [short_name(p) for p in PROVIDERS_UNDER_TEST]


# ---------------------------------------------------------------------------------------------
# Tests


def _match_params() -> list:
    """Every (case, provider) pair. The compatibility suite (mark ``lines``, run on every Spark line)
    takes :func:`_on_every_line`'s pairs; the newest line's full suite runs them all."""
    return [pytest.param(case, provider, id=f"{case.name}-{short_name(provider)}",
                         marks=[pytest.mark.lines] if _on_every_line(case, provider) else [])
            for case in CASES for provider in PROVIDERS_UNDER_TEST] + [
        # Pending writes that spill every few writes: the cases that evict in the middle of runs
        # (scans that write while they iterate) and the complete-mode aggregation (Spark 3.5 iterates
        # its store after the commit). The spill runs are the JVM's, the same for both backends; the
        # backends differ in how a commit that spilled reaches their views (rocksdb: a fresh export;
        # hashmap: the state reloaded), which the cases of SPILL_CASES_ON_BOTH show on hashmap too.
        pytest.param(case, provider, id=f"{case.name}-{short_name(provider)}")
        for case in EVICTION_CASES + [CASES_BY_NAME["agg_complete"]] for provider in SPARKSTATE_SPILLING
        if provider == SPARKSTATE_SPILLING[0] or case.name in SPILL_CASES_ON_BOTH]


#: The cases where a Spark line meets a backend's own path: complete mode (Spark 3.5 iterates its
#: store after the commit, which the hashmap view serves from the reloaded state) and session
#: windows (prefix scans, whose key layout Spark records per line).
LINE_CASES_ON_HASHMAP = frozenset({"agg_complete", "session_window"})
#: The many-key eviction cases every line runs: a join's four stores evicted by key and by value
#: condition, and session windows merged and evicted through prefix scans. The others call the
#: provider as their one-operator cases do, at more keys.
LINE_EVICTION_CASES = frozenset({"join_left_many", "session_many"})


def _on_every_line(case: Case, provider: str) -> bool:
    """Whether the compatibility suite runs ``case`` on ``provider``. What a Spark line changes is
    how Spark calls the provider (the shim's per-line folders): the same calls for both backends,
    and for a case and its many-key twin. So every one-operator case on the default backend, the
    eviction cases of :data:`LINE_EVICTION_CASES`, and on ``hashmap`` the cases of
    :data:`LINE_CASES_ON_HASHMAP`; the backends' own code is common to every line."""
    if provider == SPARKSTATE_HASHMAP:
        return case.name in LINE_CASES_ON_HASHMAP
    return case not in EVICTION_CASES or case.name in LINE_EVICTION_CASES

#: The spilling cases also run on the hashmap backend: several stores per operator (a join),
#: session windows (scan and rewrite under a merge), complete mode (iteration after the commit).
SPILL_CASES_ON_BOTH = frozenset({"join_left_many", "session_many", "agg_complete"})


@pytest.mark.parametrize("case, provider", _match_params())
def test_operator_matches_hdfs(spark, case_inputs, reference, case, provider, tmp_path):
    want = reference(case)
    got = run_case(spark, case, provider, case_inputs(case), tmp_path / "ckpt")
    assert_same_batches(got.batches, want.batches, f"{case.name} on {short_name(provider)}")
    assert state_rows(got) == state_rows(want), "numRowsTotal per operator and batch differs"
    if provider in SPARKSTATE_SPILLING:
        spills = sum(op["customMetrics"].get("sparkStateSpills", 0)
                     for p in got.progress if "batchId" in p for op in p.get("stateOperators") or [])
        assert spills > 0, "the run was meant to spill pending writes to local disk"


@pytest.mark.parametrize("provider", PROVIDERS_UNDER_TEST, ids=PROVIDER_IDS)
@pytest.mark.parametrize("name", RESTART_CASES)
def test_restart_from_checkpoint(spark, tmp_path_factory, name, provider, tmp_path):
    """Run the first half of the batches, stop, add the rest, run again on the checkpoint
    (new run id: new provider instances that must load the committed state). Every batch, its id
    included, equals the HDFS provider's run stopped and restarted at the same batch."""
    case = CASES_BY_NAME[name]
    split = case.num_batches // 2
    want = reference_run(spark, case, tmp_path_factory, cuts=(split,))
    ckpt = tmp_path / "ckpt"
    dirs = write_inputs(case, tmp_path, upto=split)
    first = run_case(spark, case, provider, dirs, ckpt)
    write_inputs(case, tmp_path, start=split)
    second = run_case(spark, case, provider, dirs, ckpt)
    assert first.batch_ids and second.batch_ids and min(second.batch_ids) > max(first.batch_ids)
    assert first.run_id != second.run_id and first.query_id == second.query_id
    assert_same_batches(merge_runs(first, second), want.batches, f"{name} restarted on {short_name(provider)}")


@pytest.mark.parametrize("provider", backends_default_on_every_line(PROVIDER_IDS))
def test_restart_after_crash_between_batches(spark, case_inputs, reference, provider, tmp_path):
    """All input present; the first run dies after 2 batches, when batch 2's offsets are
    already logged; the second run re-plans batch 2 from the offset log."""
    case = CASES_BY_NAME["agg_update"]
    want = reference(case)
    ckpt = tmp_path / "ckpt"
    first = run_case(spark, case, provider, case_inputs(case), ckpt, stop_after_batches=2)
    assert first.stopped_early and first.batch_ids == [0, 1]
    second = run_case(spark, case, provider, case_inputs(case), ckpt)
    assert second.batch_ids[0] == 2
    assert_same_batches(merge_runs(first, second), want.batches, f"crash/restart on {short_name(provider)}")


def _version_files(part_dir: str, version: int) -> list:
    """Files under a state partition directory named ``<version>`` followed by ``.``, ``_``
    or ``-``: HDFS ``2.delta``, RocksDB ``2.zip`` / ``2.changelog`` / ``2_<uuid>.zip``,
    spark-state ``manifests/2.json`` and ``changelogs/2-<id>.arrow``."""
    import re

    pattern = re.compile(rf"{version}[._-]")
    found = []
    for dirpath, _, names in os.walk(part_dir):
        found += [os.path.relpath(os.path.join(dirpath, n), part_dir) for n in names if pattern.match(n)]
    return sorted(found)


#: Providers whose files show a committed version (see _version_files).
KNOWN_LAYOUT_PROVIDERS = (HDFS_PROVIDER, ROCKSDB_PROVIDER, SPARKSTATE_PROVIDER, SPARKSTATE_HASHMAP)


def fail_once_after_commit(marker_dir: str, state_dir: str, fail_batches: frozenset):
    """A mapInPandas function placed right after the aggregation (same task as
    StateStoreSaveExec). It first drains its input -- the JVM ends the input only after the
    save operator's iterator is exhausted, i.e. after the state store committed -- then, on
    the first attempt of each (batch in ``fail_batches``, partition), records which files of
    the committed version exist and raises. The retried attempt passes the rows through."""

    def fn(frames: Iterator) -> Iterator:
        from pyspark import TaskContext

        frames = list(frames)
        ctx = TaskContext.get()
        batch = int(ctx.getLocalProperty("streaming.sql.batchId"))
        part = ctx.partitionId()
        tag = f"b{batch}-p{part}"
        failed = os.path.join(marker_dir, tag + ".failed")
        if batch in fail_batches and ctx.attemptNumber() == 0 and not os.path.exists(failed):
            files = _version_files(os.path.join(state_dir, str(part)), batch + 1)
            with open(failed, "w") as out:
                json.dump({"attempt": ctx.attemptNumber(), "committed_files": files}, out)
            raise RuntimeError(f"injected failure after the state commit ({tag})")
        if ctx.attemptNumber() > 0:
            with open(os.path.join(marker_dir, f"{tag}.retried-{ctx.attemptNumber()}"), "w"):
                pass
        yield from frames

    return fn


@pytest.mark.parametrize("provider", [REFERENCE_PROVIDER] + PROVIDERS_UNDER_TEST,
                         ids=[short_name(p) for p in [REFERENCE_PROVIDER] + PROVIDERS_UNDER_TEST])
def test_task_retry_after_commit(spark, case_inputs, reference, provider, tmp_path):
    """In batches 0, 2 and 4 every task of the aggregation fails once after its state store
    committed version batchId+1; the retry reloads version batchId and commits batchId+1
    again, and the next batch loads the re-committed version. The output must equal the run
    without failures."""
    case = CASES_BY_NAME["agg_update"]
    want = reference(case)
    markers = tmp_path / "markers"
    markers.mkdir()
    ckpt = tmp_path / "ckpt"
    fail_batches = frozenset({0, 2, 4})
    fn = fail_once_after_commit(str(markers), str(ckpt / "state" / "0"), fail_batches)

    def build(df):
        return build_agg(df).mapInPandas(fn, "k string, n long, total long")

    got = run_query(
        spark,
        build,
        provider_class=provider,
        input_dir=case_inputs(case),
        schema=schema_kv(),
        checkpoint_dir=ckpt,
        output_mode="update",
    )
    assert_same_batches(got.batches, want.batches, f"task retry on {short_name(provider)}")

    failed = {p.name[: -len(".failed")]: json.loads(p.read_text()) for p in markers.glob("*.failed")}
    retried = {p.name.split(".retried")[0] for p in markers.glob("*.retried-*")}
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    assert len(failed) == len(fail_batches) * partitions, f"expected a failure per task, got {sorted(failed)}"
    assert set(failed) == retried, "every failed task must have been retried"
    if provider in KNOWN_LAYOUT_PROVIDERS:
        # the committed version's files existed when the first attempt failed
        not_committed = sorted(t for t, info in failed.items() if not info["committed_files"])
        assert not not_committed, f"failed before the state commit: {not_committed}"

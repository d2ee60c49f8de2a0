"""The many-key cases of the equivalence tests (``test_operator_equivalence``): eviction in rounds.

The one-operator cases (``operator_cases``) show each operator's semantics with hand-made rows;
these make the state store do what production queries make it do: 30-40 keys over 3-4
partitions, event time moving a minute per batch with rows up to 90 s late, so that every batch
from the third on evicts part of the state (windows closed, sessions ended, dedup entries and
join rows expired, timeouts fired) while other keys live on. Each reference run is checked to
evict in several rounds before its last batch; the providers under test must emit the same rows
in the same batches.
"""

from __future__ import annotations

import random
import sys
from collections import Counter

from case_model import S0, Case, at, schema_kts
from operator_cases import build_apply_event_timeout
from streaming_harness import ship_module_by_value

# The functions applyInPandasWithState runs live in Python workers, which cannot import this
# module (tests/ is not on their path): pickle them by value.
ship_module_by_value(sys.modules[__name__])


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
    return build_apply_event_timeout(df, "1 minute")


def check_apply_timeout_many(case, ref):
    check_evicts_in_rounds(case, ref)
    expired = [r for r in ref.rows() if r[3] == "expired"]
    assert len(expired) >= 10 and len({b for b, rows in ref.batches.items() for r in rows if r[3] == "expired"}) >= 3


#: Many keys, eviction in rounds: named ``<operator>_many``.
EVICTION_CASES = [
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

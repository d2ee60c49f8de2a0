"""The one-operator cases of the equivalence tests (``test_operator_equivalence``): a small
stateful query per built-in operator over 5-6 hand-made micro-batches, and a check of what the
reference run (Spark's HDFS provider) must emit, so that a provider that loses state cannot match
it by accident.

A case (``case_model.Case``) is the query, its input (one list of batches per source), its
output mode and that check.
"""

from __future__ import annotations

import datetime as dt
import random
import sys
from collections import Counter, defaultdict

from case_model import S0, Case, at, schema_id_ts, schema_id_v, schema_kts, schema_kv
from streaming_harness import ship_module_by_value, state_operator_metrics

# The functions applyInPandasWithState runs live in Python workers, which cannot import this
# module (tests/ is not on their path): pickle them by value.
ship_module_by_value(sys.modules[__name__])


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


def build_apply_event_timeout(df, delay: str = "10 seconds"):
    """``session_timeout_fn`` per key under a watermark of ``delay`` (event-time timeouts)."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    return (
        df.withWatermark("ts", delay)
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


#: Each operator's semantics, with hand-made rows.
SEMANTIC_CASES = [
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
]

"""Two inputs and broadcast rules on real streaming queries: the two-stream full join held in
list state, the login-then-pay detector fed by a rule stream that changes mid-stream (across
a rescale 4 -> 3 -> 6), and a keyed function that keeps operator state (max_parallelism 1024,
so key groups above 255 share first bytes with operator-state mode bytes)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from pyspark.errors import StreamingQueryException

import time_fns
from process_fns import INPUT_SCHEMA
from spark_state.process import ProcessDefinitionError, keyed_broadcast_process, keyed_co_process, keyed_process
from spark_state.state import MapStateDescriptor
from streaming_harness import HDFS_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches
from time_fns import ACTION_SCHEMA, JOIN_SCHEMA, RULE_SCHEMA

pytestmark = pytest.mark.spark


@pytest.mark.lines
def test_two_stream_full_join_in_list_state(spark, tmp_path):
    ship_module_by_value(time_fns)
    rng = random.Random(3)
    left = [[(f"id{rng.randrange(8)}", "L", b * 100 + i) for i in range(rng.randrange(0, 6))] for b in range(5)]
    right = [[(f"id{rng.randrange(8)}", "R", b * 100 + i) for i in range(rng.randrange(0, 6))] for b in range(5)]
    write_batches(tmp_path / "l", left, JOIN_SCHEMA)
    write_batches(tmp_path / "r", right, JOIN_SCHEMA)
    ckpt, root = str(tmp_path / "ckpt"), str(tmp_path / "state")

    def run(parallelism, **kwargs):
        return run_query(
            spark, lambda l, r: keyed_co_process(l, r, "id", "id", time_fns.FullJoin(), time_fns.JOIN_OUTPUT,
                                                 parallelism=parallelism, state_root=root),
            provider_class=HDFS_PROVIDER, input_dir=[str(tmp_path / "l"), str(tmp_path / "r")],
            schema=[JOIN_SCHEMA, JOIN_SCHEMA], checkpoint_dir=ckpt, output_mode="append", **kwargs)

    out = merge_runs(run(2, stop_after_batches=2), run(3))
    assert sorted(out) == list(range(5))
    # each pair exactly once, in the batch where its later row arrived
    arrival = {f"{s}@{t}": b for side in (left, right) for b, rows in enumerate(side) for _, s, t in rows}
    expected = time_fns.expected_full_join(left, right)
    assert len(expected) >= 15
    assert {b: sorted(r) for b, r in out.items()} == {
        b: sorted(p for p in expected if max(arrival[p[1]], arrival[p[2]]) == b) for b in range(5)}


def test_co_process_key_types_must_match(spark, tmp_path):
    write_batches(tmp_path / "in", [[("a", "L", 1)]], JOIN_SCHEMA)
    df = spark.readStream.schema(JOIN_SCHEMA).parquet(str(tmp_path / "in"))
    other = df.withColumn("ts", df.ts.cast("int"))
    with pytest.raises(ProcessDefinitionError, match=r"key column 'id' \(string\) and 'ts' \(int\) have different types"):
        keyed_co_process(df, other, "id", "ts", time_fns.FullJoin(), time_fns.JOIN_OUTPUT)


def _actions(seed: int, batches: int) -> list[list[tuple]]:
    rng = random.Random(seed)
    seq = 0
    out = []
    for _ in range(batches):
        rows = []
        for _ in range(40):
            rows.append((f"u{rng.randrange(10)}", rng.choice(["login", "pay", "buy", "view"]), seq))
            seq += 1
        out.append(rows)
    return out


@pytest.mark.lines
def test_broadcast_rules_change_mid_stream_and_survive_a_rescale(spark, tmp_path):
    ship_module_by_value(time_fns)
    actions = _actions(9, 7)
    rules = [[(1, "login", "pay")], [], [], [(2, "login", "buy")], [(4, "view", "buy"), (3, "login", "view")], [], []]
    write_batches(tmp_path / "a", actions, ACTION_SCHEMA)
    write_batches(tmp_path / "r", rules, RULE_SCHEMA)
    ckpt, root = str(tmp_path / "ckpt"), str(tmp_path / "state")

    def run(parallelism, **kwargs):
        return run_query(
            spark, lambda a, r: keyed_broadcast_process(
                a, "user", r, time_fns.PatternEvaluator(), time_fns.PATTERN_OUTPUT,
                broadcast_states=[time_fns.PATTERNS], broadcast_order="version", parallelism=parallelism,
                state_root=root),
            provider_class=HDFS_PROVIDER, input_dir=[str(tmp_path / "a"), str(tmp_path / "r")],
            schema=[ACTION_SCHEMA, RULE_SCHEMA], checkpoint_dir=ckpt, output_mode="append", **kwargs)

    runs = [run(4, stop_after_batches=2), run(3, stop_after_batches=2), run(6)]
    assert [r.batch_ids for r in runs] == [[0, 1], [2, 3], [4, 5, 6]]
    expected = time_fns.expected_patterns(actions, rules)
    assert merge_runs(*runs) == expected
    versions = {r[4] for rows in expected.values() for r in rows}
    assert versions == {1, 2, 4}, "matches under the first rule, the changed one, and the later winner"


def test_broadcast_state_is_read_only_for_keyed_rows(spark, tmp_path):
    ship_module_by_value(time_fns)
    write_batches(tmp_path / "a", [[("u1", "login", 0)]], ACTION_SCHEMA)
    write_batches(tmp_path / "r", [[(1, "login", "pay")]], RULE_SCHEMA)

    class Writer(time_fns.PatternEvaluator):
        def process_element(self, row, ctx):
            ctx.get_broadcast_state(time_fns.PATTERNS).put(1, (9, "x", "y"))
            return ()

    with pytest.raises(StreamingQueryException,
                       match="ProcessDefinitionError: broadcast state 'patterns' is read-only in process_element"):
        run_query(spark, lambda a, r: keyed_broadcast_process(
            a, "user", r, Writer(), time_fns.PATTERN_OUTPUT, broadcast_states=[time_fns.PATTERNS],
            parallelism=2, state_root=str(tmp_path / "s")),
            provider_class=HDFS_PROVIDER, input_dir=[str(tmp_path / "a"), str(tmp_path / "r")],
            schema=[ACTION_SCHEMA, RULE_SCHEMA], checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    df = spark.readStream.schema(ACTION_SCHEMA).parquet(str(tmp_path / "a"))
    rules = spark.readStream.schema(RULE_SCHEMA).parquet(str(tmp_path / "r"))
    with pytest.raises(ProcessDefinitionError, match="broadcast_order column"):
        keyed_broadcast_process(df, "user", rules, time_fns.PatternEvaluator(), time_fns.PATTERN_OUTPUT,
                                broadcast_states=[MapStateDescriptor("p", "bigint", "string")], broadcast_order="nope")


def test_a_broadcast_value_that_does_not_fit_fails_the_put_naming_the_state(spark, tmp_path):
    """A str put into broadcast state declared with int values fails in
    process_broadcast_element, at the put, naming the state and its type -- not the write-back
    at the end of the task."""
    ship_module_by_value(time_fns)
    write_batches(tmp_path / "a", [[("u1", "login", 0)]], ACTION_SCHEMA)
    write_batches(tmp_path / "r", [[(4, "login", "pay")]], RULE_SCHEMA)
    rules = MapStateDescriptor("rules", str, int)

    class StringRule(time_fns.PatternEvaluator):
        def process_broadcast_element(self, row, ctx):
            ctx.get_broadcast_state(rules).put(row.first, str(row.version))  # the state holds ints
            return ()

    with pytest.raises(StreamingQueryException) as info:
        run_query(spark, lambda a, r: keyed_broadcast_process(
            a, "user", r, StringRule(), time_fns.PATTERN_OUTPUT, broadcast_states=[rules],
            parallelism=2, state_root=str(tmp_path / "s")),
            provider_class=HDFS_PROVIDER, input_dir=[str(tmp_path / "a"), str(tmp_path / "r")],
            schema=[ACTION_SCHEMA, RULE_SCHEMA], checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    message = str(info.value)
    assert ("StateValueError: broadcast state 'rules' holds values of type Python int, not str '4' (given to "
            "put(); TypeError: expected an integer state value, got str '4')") in message
    assert "in process_broadcast_element" in message and "in flush" not in message


def test_keyed_function_with_operator_state_across_rescales(spark, tmp_path):
    """Every row is counted per key (keyed state) and buffered in operator list state until a
    flush; the last run flushes at every row. Rows flushed over the whole run are exactly the
    input rows (none lost or repeated across 4 -> 3 -> 6), and the counts match a model."""
    ship_module_by_value(time_fns)
    rng = random.Random(21)
    batches = [[(f"k{rng.randrange(60)}", b * 1000 + i) for i in range(90)] for b in range(6)]
    write_batches(tmp_path / "in", batches, INPUT_SCHEMA)
    ckpt, root = str(tmp_path / "ckpt"), str(tmp_path / "state")

    def run(parallelism, threshold, **kwargs):
        return run_query(
            spark, lambda df: keyed_process(df, "k", time_fns.BufferingCounter(threshold), time_fns.BUFFER_OUTPUT,
                                            parallelism=parallelism, max_parallelism=1024, state_root=root),
            provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"), schema=INPUT_SCHEMA,
            checkpoint_dir=ckpt, output_mode="append", **kwargs)

    out = merge_runs(run(4, 40, stop_after_batches=2), run(3, 40, stop_after_batches=2), run(6, 1))
    rows = [r for b in sorted(out) for r in out[b]]
    flushed = Counter((k, v) for kind, k, v, _ in rows if kind == "flush")
    assert flushed == Counter((k, v) for bt in batches for k, v in bt)
    assert {p for kind, _, _, p in out[5] if kind == "flush"} == set(range(6)), "every partition flushed at the end"
    counts, expected = {}, []
    for bt in batches:
        for k, v in bt:
            counts[k] = counts.get(k, 0) + 1
            expected.append(("count", k, v, counts[k]))
    assert sorted(r for r in rows if r[0] == "count") == sorted(expected)


def test_two_inputs_with_event_time_share_timers_and_take_the_minimum_watermark(spark, tmp_path):
    """The right input starts two batches late and runs behind: the watermark is the minimum
    over the inputs that have seen rows (Spark's default), and timers registered by either
    side fire for the key with both sides' counts."""
    ship_module_by_value(time_fns)
    rng = random.Random(8)
    at = time_fns.at
    left = [[(f"id{rng.randrange(4)}", at(b * 3000 + rng.randrange(2000))) for _ in range(5)] for b in range(7)]
    right = [[] if b < 2 else [(f"id{rng.randrange(4)}", at(b * 2000 + rng.randrange(2000))) for _ in range(4)]
             for b in range(7)]
    write_batches(tmp_path / "l", left, time_fns.CO_EVENTS_SCHEMA)
    write_batches(tmp_path / "r", right, time_fns.CO_EVENTS_SCHEMA)
    out = run_query(
        spark, lambda l, r: keyed_co_process(l.withWatermark("ts", "1 second"), r.withWatermark("ts", "0 seconds"),
                                             "id", "id", time_fns.CoCounts(), time_fns.CO_TIMER_OUTPUT,
                                             parallelism=3, state_root=str(tmp_path / "state")),
        provider_class=HDFS_PROVIDER, input_dir=[str(tmp_path / "l"), str(tmp_path / "r")],
        schema=[time_fns.CO_EVENTS_SCHEMA, time_fns.CO_EVENTS_SCHEMA], checkpoint_dir=str(tmp_path / "ckpt"),
        output_mode="append")
    expected = time_fns.expected_co_counts(left, right, 1000, 0)
    assert out.batches == expected
    fired = [r for rows in expected.values() for r in rows]
    assert len(fired) >= 10 and any(r[3] > 0 for r in fired)
    # once the right input has rows, it holds the watermark back below the left's
    assert max(r[4] for r in fired) < max(time_fns.ms_of(t) for rows in left for _, t in rows) - 1000

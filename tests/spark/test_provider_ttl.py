"""TTL for Spark's built-in stateful operators through spark-state's provider: bounded state
without watermarks, expiry metrics, the state data source, restarts with another TTL, turning
TTL on and off on existing state, per-operator overrides, joins, OnReadAndWrite, bad confs.

Processing-time TTL makes outputs depend on the clock. Most tests use the testing-only clock
``ttl.testing.clock=batch:1000``: processing time = loaded version x 1000 ms, i.e. batch ``b``
runs at ``b * 1000`` ms, so a row written in batch ``b`` with TTL ``t`` ms is expired from the
first batch ``c`` with ``b * 1000 + t <= c * 1000`` on, exactly. One test uses the real clock.
"""

from __future__ import annotations

import time

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from streaming_harness import (HDFS_PROVIDER, SPARKSTATE_BACKENDS, SPARKSTATE_PROVIDER, backends_default_on_every_line,
                               run_query, write_batches)

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("k", LongType()), StructField("v", LongType())])
P = "spark.sql.streaming.stateStore.sparkState."
BATCH_CLOCK = {P + "ttl.testing.clock": "batch:1000"}


def ttl_confs(ttl: str, **more: str) -> dict:
    confs = dict(BATCH_CLOCK)
    confs[P + "ttl"] = ttl
    confs.update({P + k: v for k, v in more.items()})
    return confs


@pytest.fixture(params=SPARKSTATE_BACKENDS, ids=["rocksdb", "hashmap"])
def ours(request) -> str:
    """spark-state's provider on each backend: the JVM's views must hold what the worker stamped,
    expired and migrated (CommitDelta), on layered RocksDB views and in the heap map alike."""
    return request.param


def _dedup(df):
    return df.dropDuplicates(["k"])


def _count(df):
    return df.groupBy("k").agg(F.count("*").alias("n"))


def _rows_total(run, batch_id, operator=0):
    return run.state_operators(batch_id)[operator]["numRowsTotal"]


def _metric(run, batch_id, name, operator=0):
    return run.state_operators(batch_id)[operator]["customMetrics"][name]


# --- the acceptance test -----------------------------------------------------------
FRESH, REPEATS, BATCHES = 40, 8, 21


def _dedup_batches():
    """Batch b: FRESH new keys, REPEATS keys of batch b-1 (still live with a 2.5 s TTL, dropped)
    and from batch 5 on REPEATS keys of batch b-5 (expired with TTL, so emitted again)."""
    batches = []
    for b in range(BATCHES):
        rows = [(b * FRESH + i, b) for i in range(FRESH)]
        if b >= 1:
            rows += [((b - 1) * FRESH + i, b) for i in range(REPEATS)]
        if b >= 5:
            rows += [((b - 5) * FRESH + FRESH - 1 - i, b) for i in range(REPEATS)]
        batches.append(rows)
    return batches


@pytest.fixture(scope="module")
def dedup_input(tmp_path_factory):
    path = tmp_path_factory.mktemp("dedup-ttl") / "in"
    write_batches(path, _dedup_batches(), SCHEMA)
    return path


@pytest.fixture(scope="module")
def hdfs_dedup(spark, dedup_input, tmp_path_factory):
    """Spark's provider (no TTL) on the same input: one run for both backends' tests."""
    return run_query(spark, _dedup, provider_class=HDFS_PROVIDER, input_dir=dedup_input, schema=SCHEMA,
                     checkpoint_dir=tmp_path_factory.mktemp("dedup-ttl-hdfs") / "ckpt", output_mode="append")


@pytest.mark.parametrize("ours", backends_default_on_every_line())
def test_dedup_with_ttl_keeps_state_bounded_while_hdfs_grows(spark, tmp_path, ours, dedup_input, hdfs_dedup):
    ours = run_query(spark, _dedup, provider_class=ours, input_dir=dedup_input,
                     schema=SCHEMA, checkpoint_dir=tmp_path / "ours", output_mode="append",
                     extra_confs=ttl_confs("2500ms"))
    hdfs = hdfs_dedup
    assert ours.batch_ids == hdfs.batch_ids == list(range(BATCHES))

    ours_rows = [_rows_total(ours, b) for b in ours.batch_ids]
    hdfs_rows = [_rows_total(hdfs, b) for b in hdfs.batch_ids]
    # Spark's provider keeps every key ever seen.
    assert hdfs_rows == sorted(hdfs_rows) and hdfs_rows[-1] == BATCHES * FRESH
    # Ours keeps the keys written in the last 3 batches (TTL 2.5 s, batches 1 s apart):
    # rows stamped at batch b expire at b + 3, and that commit removes them. From batch 5 on a
    # batch writes FRESH new keys plus REPEATS expired keys that came back.
    written = [FRESH + (REPEATS if b >= 5 else 0) for b in range(BATCHES)]
    assert ours_rows == [sum(written[max(0, b - 2):b + 1]) for b in range(BATCHES)]
    assert max(ours_rows) <= 3 * (FRESH + REPEATS)
    expired = [_metric(ours, b, "sparkStateTtlExpiredRows") for b in ours.batch_ids]
    assert expired == [0, 0, 0] + written[:BATCHES - 3]
    assert sum(expired) == sum(written) - ours_rows[-1]

    # Outputs: within the TTL a duplicate is dropped, after it the key is new again.
    for b in ours.batch_ids:
        fresh = [(b * FRESH + i, b) for i in range(FRESH)]
        again = [((b - 5) * FRESH + FRESH - 1 - i, b) for i in range(REPEATS)] if b >= 5 else []
        assert ours.batches[b] == sorted(fresh + again)
        assert hdfs.batches[b] == sorted(fresh)


# --- aggregation without watermark ----------------------------------------------------------
def _state_rows(spark, checkpoint, batch_id=None, confs=None):
    """``{k: n}`` as the state data source reads it (with ``confs`` set while reading)."""
    confs = confs or {}
    for key, value in confs.items():
        spark.conf.set(key, value)
    try:
        reader = spark.read.format("statestore")
        if batch_id is not None:
            reader = reader.option("batchId", batch_id)
        return {r.key.k: r.value[0] for r in reader.load(str(checkpoint)).collect()}
    finally:
        for key in confs:
            spark.conf.unset(key)


def test_aggregation_count_restarts_after_expiry_and_expired_keys_leave_the_state(spark, tmp_path, ours):
    batches = [
        [(1, 0), (2, 0), (3, 0)],  # batch 0, now 0 ms
        [(1, 1)],                  # batch 1, now 1000: key 1 refreshed
        [(4, 2)],                  # batch 2, now 2000
        [(1, 3), (2, 3)],          # batch 3, now 3000: 2 and 3 (stamped 0) expired, 1 (1000) live
    ]
    write_batches(tmp_path / "in", batches, SCHEMA)
    run = run_query(spark, _count, provider_class=ours, input_dir=tmp_path / "in", schema=SCHEMA,
                    checkpoint_dir=tmp_path / "ours", extra_confs=ttl_confs("2500ms"))
    assert run.batches == {0: [(1, 1), (2, 1), (3, 1)], 1: [(1, 2)], 2: [(4, 1)], 3: [(1, 3), (2, 1)]}
    assert [_rows_total(run, b) for b in run.batch_ids] == [3, 3, 4, 3]
    # Key 3 expired and was removed; key 2 expired too, but its new count replaced it.
    assert [_metric(run, b, "sparkStateTtlExpiredRows") for b in run.batch_ids] == [0, 0, 0, 1]
    assert _state_rows(spark, tmp_path / "ours") == {1: 3, 2: 1, 4: 1}
    # Older versions still hold key 3. Without TTL confs a reader sees every stored row; with
    # them it sees what the query saw: version 2 is read at 2000 ms (key 3 live), version 3 at
    # 3000 ms (keys 2 and 3 expired).
    assert _state_rows(spark, tmp_path / "ours", batch_id=2) == {1: 2, 2: 1, 3: 1, 4: 1}
    assert _state_rows(spark, tmp_path / "ours", batch_id=1, confs=ttl_confs("2500ms")) == {1: 2, 2: 1, 3: 1}
    assert _state_rows(spark, tmp_path / "ours", batch_id=2, confs=ttl_confs("2500ms")) == {1: 2, 4: 1}
    # Reads honour the TTL configured when reading: with 1.5 s, key 4 (written at 2000 ms) is
    # expired at version 4 (4000 ms) and the reader does not return it.
    assert _state_rows(spark, tmp_path / "ours", confs=ttl_confs("1500ms")) == {1: 3, 2: 1}


def test_return_expired_if_not_cleaned_up_returns_rows_still_stored(spark, tmp_path, ours):
    """With incremental and background cleanup off, expired rows stay stored, and under
    ReturnExpiredIfNotCleanedUp the operator still gets them."""
    write_batches(tmp_path / "in", [[(1, 0), (2, 0)], [], [], [(1, 3)]], SCHEMA)
    confs = ttl_confs("2500ms", **{"ttl.visibility": "ReturnExpiredIfNotCleanedUp", "ttl.cleanupSize": "0",
                                   "ttl.backgroundCleanup": "false"})
    run = run_query(spark, _count, provider_class=ours, input_dir=tmp_path / "in", schema=SCHEMA,
                    checkpoint_dir=tmp_path / "ours", extra_confs=confs)
    assert run.nonempty_batches() == {0: [(1, 1), (2, 1)], 3: [(1, 2)]}  # not (1, 1): returned, not hidden
    assert _rows_total(run, 3) == 2 and _metric(run, 3, "sparkStateTtlExpiredRows") == 0
    assert _state_rows(spark, tmp_path / "ours", confs=confs) == {1: 2, 2: 1}  # key 2 expired, still returned
    assert _state_rows(spark, tmp_path / "ours", confs=ttl_confs("2500ms")) == {1: 2}  # NeverReturnExpired


def test_views_drop_what_expiry_removed_past_the_bound_and_below_it(spark, tmp_path, ours):
    """The keys a commit's expiry removed reach the JVM's views in record batches (2 keys each
    here), at most 8 of them per store: past that the views reload the version from the worker.
    ReturnExpiredIfNotCleanedUp makes a stale view visible: a row expiry removed but the view still
    held would be returned, and its count would go on instead of starting again."""
    write_batches(tmp_path / "in", [
        [(k, 0) for k in range(200)],       # batch 0, now 0: ~50 keys per store (4 partitions)
        [(k, 1) for k in range(1000, 1020)],
        [(5000, 2)],
        [(0, 3)],                           # 3000: 1..199 expired (returned, then removed at commit: reload)
        [(1, 4), (0, 4), (1000, 4)],        # 4000: 1001..1019 removed at commit (~5 per store: applied)
        [(1001, 5), (2, 5), (0, 5), (5000, 5)],
    ], SCHEMA)
    confs = ttl_confs("2500ms", **{"ttl.visibility": "ReturnExpiredIfNotCleanedUp",
                                   "ttl.backgroundCleanup": "false", "testing.expiredKeysBatchRows": "2"})
    run = run_query(spark, _count, provider_class=ours, input_dir=tmp_path / "in", schema=SCHEMA,
                    checkpoint_dir=tmp_path / "ours", extra_confs=confs)
    assert run.batches[3] == [(0, 2)]                                # expired, still stored: returned
    assert [_metric(run, b, "sparkStateTtlExpiredRows") for b in (3, 4, 5)] == [199, 19, 0]
    # Removed at the commit of batch 3 (each store over the bound: its views reloaded): gone; the live
    # row and one expired but not removed yet are read.
    assert sorted(run.batches[4]) == [(0, 3), (1, 1), (1000, 2)]
    # Removed at the commit of batch 4 (under the bound: the views applied the file): gone.
    assert sorted(run.batches[5]) == [(0, 4), (2, 1), (1001, 1), (5000, 2)]
    assert _rows_total(run, 5) == 6
    # Each path was taken: per store (Spark's hash partitioning of k), batch 3 removed more than
    # 8 batches of 2 keys, batch 4 fewer, in more than one batch somewhere.
    per_store = lambda keys: sorted(r[1] for r in spark.createDataFrame(  # noqa: E731
        [(k,) for k in keys], "k long").groupBy(F.expr("pmod(hash(k), 4)")).count().collect())
    assert min(per_store(range(1, 200))) > 16 and len(per_store(range(1, 200))) == 4
    assert 2 < max(per_store(range(1001, 1020))) <= 16
    assert _state_rows(spark, tmp_path / "ours", confs=confs) == {0: 4, 1: 1, 2: 1, 1000: 2, 1001: 1, 5000: 2}


def test_restart_with_a_different_ttl_applies_it_to_existing_state(spark, tmp_path, ours):
    """As in Flink, TTL is not part of the checkpoint: rows carry their last-access time, and
    the TTL of the running query decides."""
    write_batches(tmp_path / "in", [[(1, 0), (2, 0)], [(3, 1)]], SCHEMA)
    first = run_query(spark, _count, provider_class=ours, input_dir=tmp_path / "in", schema=SCHEMA,
                      checkpoint_dir=tmp_path / "ours", extra_confs=ttl_confs("10s"))
    assert first.batches == {0: [(1, 1), (2, 1)], 1: [(3, 1)]}
    write_batches(tmp_path / "in", [[(2, 2)], [(1, 3)]], SCHEMA, start=2)
    # With 10 s, key 1 (written at 0 ms) would count 2 at 3000 ms; with 2.5 s it has expired.
    second = run_query(spark, _count, provider_class=ours, input_dir=tmp_path / "in", schema=SCHEMA,
                       checkpoint_dir=tmp_path / "ours", extra_confs=ttl_confs("2500ms"))
    assert second.batches == {2: [(2, 2)], 3: [(1, 1)]}
    assert _metric(second, 2, "sparkStateTtlMigratedRows") == 0  # no migration: same layout


def test_turning_ttl_on_migrates_existing_state_and_off_again(spark, tmp_path, ours):
    ckpt = tmp_path / "ours"

    def run(confs):
        return run_query(spark, _count, provider_class=ours, input_dir=tmp_path / "in",
                         schema=SCHEMA, checkpoint_dir=ckpt, extra_confs=confs)

    write_batches(tmp_path / "in", [[(1, 0), (2, 0)], [(1, 1)]], SCHEMA)
    plain = run(BATCH_CLOCK)
    assert plain.batches == {0: [(1, 1), (2, 1)], 1: [(1, 2)]}
    # TTL on: the first commit stamps every existing row with its time (2000 ms); their TTL
    # starts then, so nothing is lost at the switch.
    write_batches(tmp_path / "in", [[(2, 2)], [(3, 3)], [], [(1, 5), (3, 5)]], SCHEMA, start=2)
    on = run(ttl_confs("2500ms"))
    assert on.batches == {2: [(2, 2)], 3: [(3, 1)], 4: [], 5: [(1, 1), (3, 2)]}
    assert _metric(on, 2, "sparkStateTtlMigratedRows") == 2
    assert _metric(on, 5, "sparkStateTtlExpiredRows") == 1  # key 2, stamped 2000 ms
    assert _rows_total(on, 5) == 2
    # TTL off again: stamps are stripped, nothing expires any more.
    write_batches(tmp_path / "in", [[(1, 6)], [(3, 7)]], SCHEMA, start=6)
    off = run(BATCH_CLOCK)
    assert off.batches == {6: [(1, 2)], 7: [(3, 3)]}
    assert _metric(off, 6, "sparkStateTtlMigratedRows") == 2
    assert _state_rows(spark, ckpt) == {1: 2, 3: 3}


# --- per-operator overrides and joins --------------------------------------------------------
def _dedup_then_count(df):
    return df.dropDuplicates(["k", "v"]).groupBy("k").agg(F.count("*").alias("n"))


def test_per_operator_override_exempts_one_operator(spark, tmp_path, ours):
    """The global TTL applies to every operator but the one whose id an override sets to none.
    Operator ids come from the state-metadata source, as the README tells users."""
    ckpt = tmp_path / "ours"
    write_batches(tmp_path / "in", [[(1, 0), (1, 0), (2, 0)]], SCHEMA)
    first = run_query(spark, _dedup_then_count, provider_class=ours, input_dir=tmp_path / "in",
                      schema=SCHEMA, checkpoint_dir=ckpt, extra_confs=BATCH_CLOCK)
    assert first.batches == {0: [(1, 1), (2, 1)]}
    ids = {r.operatorName: r.operatorId for r in spark.read.format("state-metadata").load(str(ckpt)).collect()}
    assert set(ids) == {"dedupe", "stateStoreSave"}, ids
    agg = ids["stateStoreSave"]

    write_batches(tmp_path / "in", [[(1, 1)], [(3, 2)], [], [(1, 0), (2, 4)]], SCHEMA, start=1)
    confs = ttl_confs("2500ms")
    confs[P + f"ttl.operator.{agg}"] = "none"
    second = run_query(spark, _dedup_then_count, provider_class=ours, input_dir=tmp_path / "in",
                       schema=SCHEMA, checkpoint_dir=ckpt, extra_confs=confs)
    # Batch 1 turns TTL on for the dedup only: its rows (1, 0) and (2, 0) get stamped 1000 ms.
    # Batch 4 (4000 ms): (1, 0) has expired, so it passes the dedup again; the counts have no
    # TTL and go on.
    assert second.batches == {1: [(1, 2)], 2: [(3, 1)], 3: [], 4: [(1, 3), (2, 2)]}
    by_name = {op["operatorName"]: op for op in second.state_operators(1)}
    assert by_name["dedupe"]["customMetrics"]["sparkStateTtlMigratedRows"] == 2
    assert by_name["stateStoreSave"]["customMetrics"]["sparkStateTtlMigratedRows"] == 0
    by_name = {op["operatorName"]: op for op in second.state_operators(4)}
    # (2, 0) and (1, 1) removed; (1, 0) expired too but was written again.
    assert by_name["dedupe"]["customMetrics"]["sparkStateTtlExpiredRows"] == 2
    assert by_name["stateStoreSave"]["customMetrics"]["sparkStateTtlExpiredRows"] == 0
    assert by_name["stateStoreSave"]["numRowsTotal"] == 3


JOIN_SCHEMA = StructType([StructField("k", LongType()), StructField("w", LongType())])


def _join(left, right):
    return left.join(right.withColumnRenamed("v", "w"), "k")


def test_join_state_gets_no_ttl_by_default_and_an_override_fails_clearly(spark, tmp_path, ours):
    left = [[(1, 10), (2, 20)], [(3, 30)], [(1, 11)]]
    right = [[(1, 100)], [(2, 200)], [(3, 300)]]
    write_batches(tmp_path / "l", left, SCHEMA)
    write_batches(tmp_path / "r", right, SCHEMA)
    # The global default skips the join's four stores: join results stay exact.
    run = run_query(spark, _join, provider_class=ours, input_dir=[tmp_path / "l", tmp_path / "r"],
                    schema=[SCHEMA, SCHEMA], checkpoint_dir=tmp_path / "ok", output_mode="append",
                    extra_confs=ttl_confs("1500ms"))
    assert run.rows() == [(1, 10, 100), (2, 20, 200), (1, 11, 100), (3, 30, 300)]
    assert _metric(run, 2, "sparkStateTtlExpiredRows") == 0
    with pytest.raises(StreamingQueryException) as excinfo:
        run_query(spark, _join, provider_class=ours, input_dir=[tmp_path / "l", tmp_path / "r"],
                  schema=[SCHEMA, SCHEMA], checkpoint_dir=tmp_path / "bad", output_mode="append",
                  extra_confs={P + "ttl.operator.0": "1h"})
    message = str(excinfo.value)
    assert "ConfigError: option " + P + "ttl.operator.0 sets a TTL for operator 0, a stream-stream join" in message
    assert "watermarks" in message


def test_an_override_for_an_operator_the_query_does_not_have_fails_clearly(spark, tmp_path):
    write_batches(tmp_path / "in", [[(1, 1), (2, 2)], [(1, 3)]], SCHEMA)
    with pytest.raises(StreamingQueryException) as excinfo:
        run_query(spark, _count, provider_class=SPARKSTATE_PROVIDER, input_dir=tmp_path / "in", schema=SCHEMA,
                  checkpoint_dir=tmp_path / "ckpt", output_mode="update",
                  extra_confs={P + "ttl.operator.7": "1h"})
    message = str(excinfo.value)
    assert ("ConfigError: option " + P + "ttl.operator.7 sets the TTL of operator 7, but this query has no stateful "
            "operator") in message
    assert "its operators: 0" in message


# --- OnReadAndWrite, bad confs, the real clock ----------------------------------------------
def test_on_read_and_write_dedup_duplicates_refresh_the_ttl(spark, tmp_path, ours):
    batches = [
        [(1, 0), (2, 0)],  # 0 ms
        [],                # 1000
        [(1, 2)],          # 2000: duplicate of 1, dropped, but its read refreshes key 1
        [],                # 3000
        [(1, 4), (2, 4)],  # 4000: 1 (refreshed at 2000) is live, 2 (0 ms) expired: new again
    ]
    write_batches(tmp_path / "in", batches, SCHEMA)
    run = run_query(spark, _dedup, provider_class=ours, input_dir=tmp_path / "in", schema=SCHEMA,
                    checkpoint_dir=tmp_path / "ours", output_mode="append",
                    extra_confs=ttl_confs("2500ms", **{"ttl.updateType": "OnReadAndWrite"}))
    assert run.nonempty_batches() == {0: [(1, 0), (2, 0)], 4: [(2, 4)]}


def test_bad_ttl_conf_fails_the_query_naming_it(spark, tmp_path):
    write_batches(tmp_path / "in", [[(1, 0)]], SCHEMA)
    with pytest.raises(StreamingQueryException) as excinfo:
        run_query(spark, _dedup, provider_class=SPARKSTATE_PROVIDER, input_dir=tmp_path / "in", schema=SCHEMA,
                  checkpoint_dir=tmp_path / "bad", output_mode="append", extra_confs={P + "ttl": "10 parsecs"})
    message = str(excinfo.value)
    assert f"ConfigError: option '{P}ttl' '10 parsecs' is not a duration" in message


def test_real_clock_expires_rows_between_runs(spark, tmp_path, ours):
    """Wall-clock TTL: loose but meaningful. Rows of a run expire after a pause longer than the
    TTL; within a run (batches well under the TTL apart) duplicates are still dropped."""
    ckpt, confs = tmp_path / "ours", {P + "ttl": "3s"}
    write_batches(tmp_path / "in", [[(k, 0) for k in range(20)]], SCHEMA)
    first = run_query(spark, _dedup, provider_class=ours, input_dir=tmp_path / "in", schema=SCHEMA,
                      checkpoint_dir=ckpt, output_mode="append", extra_confs=confs)
    assert len(first.batches[0]) == 20
    time.sleep(3.5)
    write_batches(tmp_path / "in", [[(k, 1) for k in range(10)] + [(k, 1) for k in range(100, 110)],
                                    [(k, 2) for k in range(100, 105)]], SCHEMA, start=1)
    second = run_query(spark, _dedup, provider_class=ours, input_dir=tmp_path / "in", schema=SCHEMA,
                       checkpoint_dir=ckpt, output_mode="append", extra_confs=confs)
    # Keys 0-9 expired during the pause: new again. Keys 10-19 expired and were removed.
    assert second.batches[1] == sorted([(k, 1) for k in range(10)] + [(k, 1) for k in range(100, 110)])
    assert _metric(second, 1, "sparkStateTtlExpiredRows") == 10
    assert _rows_total(second, 1) == 20
    # Batch 2 runs right after batch 1: keys 100-104 are live duplicates.
    assert second.batches[2] == []

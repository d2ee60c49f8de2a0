"""Carrying a savepoint's state over to a changed query, against a model: each case runs the old
query over the history on spark-state's provider, takes a savepoint, carries it over to the new
query, restores it and continues over new input. The continued run's output, batch by batch
(ids included), and its state afterwards must equal those of the new query run from scratch over
the whole input (history included) on Spark's own provider. The upgrade check must say "needs
migration" before the carry-over and "compatible" after it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Optional

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from spark_state.state_data.errors import StateDataError
from spark_state.upgrade import (COMPATIBLE, INCOMPATIBLE, MIGRATION, CarryOver, UpgradeCheckUnsupported,
                                 check_upgrade)

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("user", StringType()), StructField("device", StringType()),
                     StructField("day", IntegerType()), StructField("n", IntegerType())])

#: The lookup the new queries derive a user's region (and device) from: a function of the user.
REGION = "element_at(map('u0', 'eu', 'u1', 'us', 'u2', 'eu', 'u3', 'ap', 'u4', 'us', 'u9', 'ap'), user)"
DEVICE_OF_USER = "concat('d', cast(substring(user, 2) as int) % 2)"

Transform = Callable[[DataFrame], DataFrame]

#: Every case's last batch after the carry-over: keys the history and the batches before it had.
THIRD = [(f"u{i}", f"d{i % 2}", i % 3, i) for i in (0, 2, 3)] + [("u9", "d1", 0, 9)]


def _with_region(df: DataFrame) -> DataFrame:
    return df.withColumn("region", F.expr(REGION))


@dataclass(frozen=True)
class Case:
    old: Transform
    new: Transform
    output_mode: str
    history: list[list[tuple]]
    later: list[list[tuple]]
    #: what the carry-over is told (beyond its proposals)
    configure: Callable[[CarryOver, object], None] = lambda carry, spark: None
    #: the savepoint's operators the new query has no place for
    dropped: tuple[int, ...] = ()


def _user_device(i: int, device: Optional[str] = None) -> tuple:
    return (f"u{i}", device or f"d{i % 2}", i % 3, i)


def _history(spark, name: str) -> DataFrame:
    return spark.createDataFrame([r for batch in CASES[name].history for r in batch], SCHEMA)


def _seen(*columns: str) -> Callable[[DataFrame], DataFrame]:
    """A deduplication's state bootstrapped from history: the distinct values of its key."""
    return lambda history: history.select(F.struct(*columns).alias("key"),
                                          F.struct(F.lit(None).alias("__dummy__")).alias("value")).distinct()


def _with_ts(df: DataFrame) -> DataFrame:
    return df.withColumn("ts", F.timestamp_seconds(F.col("n") * 60)).withWatermark("ts", "1 hour")


CASES = {
    # history: each user on one device, the one the lookup names
    "dedup_key_added": Case(
        lambda df: df.dropDuplicates(["user"]), lambda df: df.dropDuplicates(["user", "device"]), "append",
        [[_user_device(i) for i in range(3)], [_user_device(i) for i in range(2, 5)]],
        [[_user_device(0), _user_device(0, "d9"), _user_device(9)], [_user_device(0, "d9"), _user_device(1, "d7")]],
        lambda carry, spark: carry.change_key(0, add={"device": DEVICE_OF_USER})),
    "dedup_key_dropped": Case(
        lambda df: df.dropDuplicates(["user", "device"]), lambda df: df.dropDuplicates(["user"]), "append",
        [[_user_device(0), _user_device(0, "d5"), _user_device(1)], [_user_device(1, "d6"), _user_device(2)]],
        [[_user_device(0, "d7"), _user_device(3)], [_user_device(3, "d1"), _user_device(9)]]),
    "group_key_added": Case(
        lambda df: df.groupBy("user").count(), lambda df: _with_region(df).groupBy("user", "region").count(), "update",
        [[_user_device(i) for i in range(4)], [_user_device(i) for i in range(1, 5)]],
        [[_user_device(0), _user_device(9)], [_user_device(1), _user_device(9)]],
        lambda carry, spark: carry.change_key(0, add={"region": REGION})),
    "group_key_dropped": Case(
        lambda df: df.groupBy("user", "day").count(), lambda df: df.groupBy("user").count(), "update",
        [[(f"u{i % 3}", "d0", i % 4, i) for i in range(8)], [(f"u{i % 3}", "d0", i % 5, i) for i in range(8, 14)]],
        [[("u0", "d0", 9, 20), ("u4", "d0", 1, 21)], [("u1", "d0", 0, 22)]],
        lambda carry, spark: carry.change_key(0, merge="sum")),
    "operator_added_before": Case(
        lambda df: df.groupBy("user").count(), lambda df: df.dropDuplicates(["user", "n"]).groupBy("user").count(),
        "update",
        [[_user_device(i) for i in range(4)], [(f"u{i % 4}", "d0", 0, i) for i in range(4, 9)]],
        # (u1, 1) and (u2, 6) were seen in the history: the bootstrapped deduplication drops them
        [[_user_device(1), ("u2", "d0", 0, 6), _user_device(9)], [_user_device(9), ("u3", "d0", 0, 30)]],
        lambda carry, spark: carry.set_state(1, _seen("user", "n")(_history(spark, "operator_added_before")))),
    # the deduplication by user moves from id 0 to 1; the new one by device (id 0) is bootstrapped
    "operator_added_after": Case(
        lambda df: df.dropDuplicates(["user"]), lambda df: df.dropDuplicates(["user"]).dropDuplicates(["device"]),
        "append", [[_user_device(i, f"d{i}") for i in range(3)], [_user_device(i, f"d{i}") for i in range(3, 5)]],
        [[_user_device(0, "d7"), _user_device(7, "d1"), _user_device(8, "d8")], [_user_device(9, "d9")]],
        lambda carry, spark: carry.set_state(0, _seen("device")(_history(spark, "operator_added_after")))),
    "operator_removed": Case(
        lambda df: df.dropDuplicates(["user", "n"]).groupBy("user").count(), lambda df: df.groupBy("user").count(),
        "update", [[_user_device(i) for i in range(4)], [(f"u{i % 4}", "d0", 0, i) for i in range(4, 9)]],
        [[_user_device(1), _user_device(9)], [_user_device(9)]], dropped=(1,)),
    # with a watermark: the event time is part of the key (and evicts it)
    "dedup_watermark_key_added": Case(
        lambda df: _with_ts(df).dropDuplicates(["user", "ts"]),
        lambda df: _with_ts(df).dropDuplicates(["user", "device", "ts"]), "append",
        [[_user_device(i) for i in range(3)], [_user_device(i) for i in range(2, 5)]],
        [[_user_device(4), _user_device(4, "d9"), _user_device(9)], [_user_device(9), _user_device(30)]],
        lambda carry, spark: carry.change_key(0, add={"device": DEVICE_OF_USER})),
    # dropDuplicatesWithinWatermark keeps each key's expiry: merged, the earliest (the first row seen)
    "within_watermark_key_dropped": Case(
        lambda df: _with_ts(df).dropDuplicatesWithinWatermark(["user", "device"]),
        lambda df: _with_ts(df).dropDuplicatesWithinWatermark(["user"]), "append",
        [[_user_device(0), ("u0", "d5", 0, 3), _user_device(1)], [("u1", "d6", 0, 4), _user_device(2)]],
        [[("u0", "d7", 0, 5), _user_device(3)], [("u3", "d1", 0, 40), _user_device(9)]]),
    # Spark accepts a reorder of two string columns and would read each user as a device: re-keyed by name
    "key_reordered": Case(
        lambda df: df.groupBy("user", "device").count(), lambda df: df.groupBy("device", "user").count(), "update",
        [[_user_device(i) for i in range(4)], [_user_device(i) for i in range(2, 6)]],
        [[_user_device(0), _user_device(9)], [_user_device(1)]]),
    "key_widened": Case(
        lambda df: df.groupBy("day").count(),
        lambda df: df.withColumn("day", F.col("day").cast("bigint")).groupBy("day").count(), "update",
        [[_user_device(i) for i in range(5)], [_user_device(i) for i in range(3, 8)]],
        [[_user_device(0), ("u1", "d0", 7, 1)], [_user_device(2)]]),
}


def _builder(in_dir, transform: Transform):
    return lambda session: transform(session.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
                                     .parquet(str(in_dir)))


def _state(spark, checkpoint: str, operator_id: int) -> list:
    from spark_state.state_data.readers.spark_operator_state import read_spark_operator_state

    rows = read_spark_operator_state(spark, checkpoint, operator_id=operator_id).select("key", "value").collect()
    return sorted((tuple(r.key), tuple(r.value)) for r in rows)


@pytest.mark.parametrize("name", list(CASES))
def test_a_changed_query_continues_as_if_it_had_always_run(spark, name, tmp_path):
    _carry_over_case(spark, name, tmp_path)


@pytest.mark.lines
def test_every_line_carries_a_key_change_or_says_it_cannot(spark, tmp_path):
    if int(spark.version.split(".")[0]) < 4:
        from streaming_harness import SPARKSTATE_PROVIDER, run_query, write_batches

        from spark_state import ops

        case = CASES["group_key_added"]
        write_batches(tmp_path / "in", case.history, SCHEMA)
        run_query(spark, case.old, provider_class=SPARKSTATE_PROVIDER, input_dir=tmp_path / "in", schema=SCHEMA,
                  checkpoint_dir=tmp_path / "old", output_mode="update")
        ops.savepoint(str(tmp_path / "old"), str(tmp_path / "sp"), progress=False)
        with pytest.raises(UpgradeCheckUnsupported, match="Spark 4.0 or newer"):
            CarryOver(spark, str(tmp_path / "sp"), _builder(tmp_path / "in", case.new), output_mode="update")
        return
    _carry_over_case(spark, "group_key_added", tmp_path)


def _carry_over_case(spark, name: str, tmp_path) -> None:
    from streaming_harness import HDFS_PROVIDER, SPARKSTATE_PROVIDER, run_query, write_batches

    from spark_state import ops

    case = CASES[name]
    in_dir = tmp_path / "in"
    write_batches(in_dir, case.history, SCHEMA)
    run_query(spark, case.old, provider_class=SPARKSTATE_PROVIDER, input_dir=in_dir, schema=SCHEMA,
              checkpoint_dir=tmp_path / "old", output_mode=case.output_mode)
    ops.savepoint(str(tmp_path / "old"), str(tmp_path / "sp"), progress=False)
    build = _builder(in_dir, case.new)
    carry = CarryOver(spark, str(tmp_path / "sp"), build, output_mode=case.output_mode, progress=False)
    before = carry.report  # the upgrade check of the savepoint, as check_upgrade gives it
    assert MIGRATION in {v.verdict for v in before.operators} and before.exit_status == 1, before.summary()
    case.configure(carry, spark)
    result = carry.write(str(tmp_path / "sp2"))
    after = check_upgrade(spark, str(tmp_path / "sp2"), build, output_mode=case.output_mode)
    assert {v.verdict for v in after.operators} == {COMPATIBLE} and after.exit_status == 0, (
        carry.summary() + "\n" + after.summary())
    assert result.dropped == list(case.dropped)

    ops.restore(str(tmp_path / "sp2"), str(tmp_path / "new"), progress=False)
    later = [*case.later, THIRD]
    write_batches(in_dir, later, SCHEMA, start=len(case.history))
    continued = run_query(spark, case.new, provider_class=SPARKSTATE_PROVIDER, input_dir=in_dir, schema=SCHEMA,
                          checkpoint_dir=tmp_path / "new", output_mode=case.output_mode)
    model = run_query(spark, case.new, provider_class=HDFS_PROVIDER, input_dir=in_dir, schema=SCHEMA,
                      checkpoint_dir=tmp_path / "model", output_mode=case.output_mode)
    later_ids = list(range(len(case.history), len(case.history) + len(later)))
    assert continued.batch_ids == later_ids
    assert continued.batches == {b: model.batches[b] for b in later_ids}
    for op_id in {v.operator_id for v in after.operators}:
        assert _state(spark, str(tmp_path / "new"), op_id) == _state(spark, str(tmp_path / "model"), op_id)


@pytest.fixture(scope="module")
def counted(spark, tmp_path_factory):
    """A savepoint of ``groupBy("user", "device").count()`` after two batches, and its input."""
    from streaming_harness import SPARKSTATE_PROVIDER, run_query, write_batches

    from spark_state import ops

    base = tmp_path_factory.mktemp("carry-over-errors")
    write_batches(base / "in", [[_user_device(i) for i in range(4)], [_user_device(i) for i in range(2, 6)]], SCHEMA)
    run_query(spark, lambda df: df.groupBy("user", "device").count(), provider_class=SPARKSTATE_PROVIDER,
              input_dir=base / "in", schema=SCHEMA, checkpoint_dir=base / "ckpt", output_mode="update")
    ops.savepoint(str(base / "ckpt"), str(base / "sp"), progress=False)
    return base


def test_a_change_spark_accepts_is_copied_as_it_is(spark, counted, tmp_path):
    build = _builder(counted / "in", lambda df: df.withColumnRenamed("user", "name").groupBy("name", "device").count())
    carry = CarryOver(spark, str(counted / "sp"), build, output_mode="update", progress=False)
    assert carry.report.exit_status == 0
    assert [(s.operator_id, s.source, dict(s.stores)) for s in carry.steps()] == [(0, 0, {"default": "copied"})]
    result = carry.write(str(tmp_path / "sp2"))
    assert result.entries == {0: 6}
    assert check_upgrade(spark, str(tmp_path / "sp2"), build, output_mode="update").exit_status == 0
    assert _state(spark, str(tmp_path / "sp2"), 0) == [((u, d), (c,)) for (u, d), (c,) in
                                                       _state(spark, str(counted / "sp"), 0)]


@pytest.mark.parametrize("new, configure, message", [
    (lambda df: _with_region(df).groupBy("user", "device", "region").count(), None,
     "the new key column(s) `region` are not in the old key"),
    (lambda df: df.groupBy("user").count(), None, "the new key drops `device`, so old rows merge into one key"),
    (lambda df: _with_region(df).groupBy("user", "region").count(),
     lambda carry: carry.change_key(0, add={"region": REGION}, rename={"nobody": "x"}), "rename names nobody"),
    (lambda df: df.groupBy("user").agg(F.max("n").alias("count")), lambda carry: carry.change_key(0, merge="max"),
     "the value changes too (bigint -> int)"),
])
def test_a_carry_over_that_cannot_be_done_says_why_and_writes_nothing(spark, counted, tmp_path, new, configure,
                                                                     message):
    carry = CarryOver(spark, str(counted / "sp"), _builder(counted / "in", new), output_mode="update", progress=False)
    if configure is not None:
        configure(carry)
    with pytest.raises(StateDataError, match=message.replace("(", r"\(").replace(")", r"\)")):
        carry.write(str(tmp_path / "sp2"))
    assert not (tmp_path / "sp2").exists() or not any((tmp_path / "sp2").iterdir())


def test_wrong_operators_and_a_checkpoint_are_refused(spark, counted):
    build = _builder(counted / "in", lambda df: df.dropDuplicates(["user"]).groupBy("user", "device").count())
    with pytest.raises(StateDataError, match="is not a savepoint: take one"):
        CarryOver(spark, str(counted / "ckpt"), build, output_mode="update")
    carry = CarryOver(spark, str(counted / "sp"), build, output_mode="update", progress=False)
    assert carry.sources == {0: 0, 1: None}
    with pytest.raises(StateDataError, match="is a stateStoreSave and the new query's operator 1 a dedupe"):
        carry.map_operator(1, 0)
    with pytest.raises(StateDataError, match="the savepoint has no operator 7"):
        carry.map_operator(0, 7)
    with pytest.raises(StateDataError, match="the new query has no stateful operator 5"):
        carry.change_key(5, merge="sum")
    with pytest.raises(StateDataError, match="need a 'key' column"):
        carry.set_state(1, spark.range(1))
    assert carry.map_operator(0, None).sources == {0: None, 1: None} and carry.dropped() == [0]


def test_the_command_line_carries_over_what_the_python_api_does(spark, counted, tmp_path, capsys):
    from spark_state.cli import main

    module = tmp_path / "new_query.py"
    source = f"spark.readStream.schema(SCHEMA).parquet({str(counted / 'in')!r})"
    module.write_text(
        "SCHEMA = 'user string, device string, day int, n int'\n"
        f"def by_user(spark):\n    return {source}.groupBy('user').count()\n")
    sp, target = str(counted / "sp"), str(tmp_path / "sp2")
    base = ["carry-over", sp, target, "--query", f"{module}:by_user", "--output-mode", "update", "--no-progress"]
    assert main([*base, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "operator 0 (stateStoreSave) from the savepoint's operator 0 (default: re-keyed)" in out
    assert "dry run: nothing written" in out and not (tmp_path / "sp2").exists()
    assert main(base) == 1  # the key loses `device`: a count's rows merge by a rule only the user knows
    assert "merge=" in capsys.readouterr().err
    assert main([*base, "--merge", "0=sum", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["operators"] == [{"operator_id": 0, "name": "stateStoreSave", "source": 0,
                                 "stores": {"default": "re-keyed"}}] and doc["dropped"] == []
    counts: dict = {}
    for (user, _), (count,) in _state(spark, sp, 0):
        counts[user] = counts.get(user, 0) + count
    assert _state(spark, target, 0) == sorted(((u,), (c,)) for u, c in counts.items())
    assert main(["carry-over", sp, str(tmp_path / "x"), "--query", f"{module}:by_user", "--add", "zero"]) == 1
    assert "--add takes OP:COLUMN=SQL" in capsys.readouterr().err


def test_a_keyed_functions_key_gains_a_column_with_its_states_and_timers(spark, tmp_path):
    """``keyed_process`` keyed by ``user``, then by ``(user, region)`` with the region a lookup of the
    user: its count, list and timers carried over equal those of the new query run over everything."""
    import carry_fns
    from streaming_harness import HDFS_PROVIDER, SPARKSTATE_PROVIDER, run_query, ship_module_by_value, write_batches

    from spark_state import ops
    from spark_state.process import keyed_process
    from spark_state.state_data import read_keyed_state, read_timers

    ship_module_by_value(carry_fns)

    def old(df):
        return keyed_process(df, "user", carry_fns.RunningCount(), "user string, n bigint", parallelism=3,
                             name="RunningCount")

    def new(df):
        return keyed_process(_with_region(df), ["user", "region"], carry_fns.RunningCount(),
                             "user string, region string, n bigint", parallelism=3, name="RunningCount")

    history = [[_user_device(i) for i in range(4)], [_user_device(i) for i in range(1, 5)]]
    later = [[_user_device(0), _user_device(9)], [_user_device(1), _user_device(9), _user_device(4)],
             [_user_device(2), _user_device(3)]]
    in_dir = tmp_path / "in"
    write_batches(in_dir, history, SCHEMA)
    run_query(spark, old, provider_class=SPARKSTATE_PROVIDER, input_dir=in_dir, schema=SCHEMA,
              checkpoint_dir=tmp_path / "old", output_mode="append")
    ops.savepoint(str(tmp_path / "old"), str(tmp_path / "sp"), progress=False)

    carry = CarryOver(spark, str(tmp_path / "sp"), _builder(in_dir, new), progress=False)
    assert [(f.name, f.verdict, f.migration.split(":")[0]) for f in carry.report.functions] == [
        ("RunningCount", MIGRATION, "key change")]
    assert not any("state `" in r for r in carry.report.functions[0].reasons)  # its states are unchanged

    carry.change_function_key("RunningCount", ["user", "region"], add={"region": REGION})
    assert "keyed function RunningCount: key (user) -> (user, region)" in carry.summary()
    # the same carry-over from the command line, which writes it
    from spark_state.cli import main

    module = tmp_path / "new_query.py"
    module.write_text(
        "import carry_fns\nfrom spark_state.process import keyed_process\n"
        f"SCHEMA = 'user string, device string, day int, n int'\nREGION = {REGION!r}\n"
        "def build(spark):\n"
        f"    df = spark.readStream.schema(SCHEMA).option('maxFilesPerTrigger', 1).parquet({str(in_dir)!r})\n"
        "    return keyed_process(df.selectExpr('*', f'{REGION} AS region'), ['user', 'region'], "
        "carry_fns.RunningCount(), 'user string, region string, n bigint', parallelism=3, name='RunningCount')\n")
    assert main(["carry-over", str(tmp_path / "sp"), str(tmp_path / "sp2"), "--query", f"{module}:build",
                 "--function-key", "RunningCount=user,region", "--add", f"RunningCount:region={REGION}",
                 "--no-progress"]) == 0
    after = check_upgrade(spark, str(tmp_path / "sp2"), _builder(in_dir, new))
    assert [(f.name, f.verdict) for f in after.functions] == [("RunningCount", COMPATIBLE)] and after.exit_status == 0
    ops.restore(str(tmp_path / "sp2"), str(tmp_path / "new"), progress=False)
    write_batches(in_dir, later, SCHEMA, start=len(history))
    continued = run_query(spark, new, provider_class=SPARKSTATE_PROVIDER, input_dir=in_dir, schema=SCHEMA,
                          checkpoint_dir=tmp_path / "new", output_mode="append")
    model = run_query(spark, new, provider_class=HDFS_PROVIDER, input_dir=in_dir, schema=SCHEMA,
                      checkpoint_dir=tmp_path / "model", output_mode="append")
    assert continued.batch_ids == [2, 3, 4]
    assert continued.batches == {b: model.batches[b] for b in (2, 3, 4)}

    def held(checkpoint):
        count = read_keyed_state(spark, str(checkpoint), "count").select("user", "region", "value").collect()
        seen = read_keyed_state(spark, str(checkpoint), "seen").select("user", "region", "value").collect()
        timers = read_timers(spark, str(checkpoint)).select("user", "region", "domain", "expiration_timestamp_ms")
        return (sorted(map(tuple, count)), sorted((r.user, r.region, sorted(r.value)) for r in seen),
                sorted(map(tuple, timers.collect())))

    counts, _, timers = held(tmp_path / "new")
    assert (counts, _, timers) == held(tmp_path / "model")
    assert len(timers) == sum(n for *_, n in counts) == 15  # a timer per row of the 15 rows

    # a state whose type cannot be read: the check says so, and the restored query fails as it says
    def as_text(df):
        return keyed_process(df, "user", carry_fns.RunningCountAsText(), "user string, n bigint", parallelism=3,
                             name="RunningCount")

    text = check_upgrade(spark, str(tmp_path / "sp"), _builder(in_dir, as_text))
    assert text.functions[0].verdict == INCOMPATIBLE and "StateSchemaIncompatibleError" in text.functions[0].error
    assert any("state `count`: value state of bigint -> value state of string" in r for r in text.functions[0].reasons)
    ops.restore(str(tmp_path / "sp"), str(tmp_path / "as-text"), progress=False)
    with pytest.raises(Exception, match="state 'count' cannot be restored: it was written as value state of bigint"):
        run_query(spark, as_text, provider_class=SPARKSTATE_PROVIDER, input_dir=in_dir, schema=SCHEMA,
                  checkpoint_dir=tmp_path / "as-text", output_mode="append")


def test_a_keyed_functions_key_loses_a_column_and_the_users_merge_joins_the_rows(spark, tmp_path):
    """``(user, device)`` -> ``user``: the count's rows summed, the lists joined, by the user's merge;
    without a merge the carry-over says so before writing anything."""
    import carry_fns
    from streaming_harness import HDFS_PROVIDER, SPARKSTATE_PROVIDER, run_query, ship_module_by_value, write_batches

    from spark_state import ops
    from spark_state.process import keyed_process
    from spark_state.state_data import read_keyed_state

    ship_module_by_value(carry_fns)

    def old(df):
        return keyed_process(df, ["user", "device"], carry_fns.RunningCount(), "user string, device string, n bigint",
                             parallelism=3, name="RunningCount")

    def new(df):
        return keyed_process(df, "user", carry_fns.RunningCount(), "user string, n bigint", parallelism=3,
                             name="RunningCount")

    def merge(state, rows):
        if state == "count":
            return rows.groupBy("user").agg(F.sum("value").alias("value"))
        return rows.groupBy("user").agg(F.flatten(F.collect_list("value")).alias("value"))

    in_dir = tmp_path / "in"
    write_batches(in_dir, [[_user_device(0), _user_device(0, "d5"), _user_device(1)], [_user_device(1, "d6")]],
                  SCHEMA)
    run_query(spark, old, provider_class=SPARKSTATE_PROVIDER, input_dir=in_dir, schema=SCHEMA,
              checkpoint_dir=tmp_path / "old", output_mode="append")
    ops.savepoint(str(tmp_path / "old"), str(tmp_path / "sp"), progress=False)
    carry = CarryOver(spark, str(tmp_path / "sp"), _builder(in_dir, new), progress=False)
    with pytest.raises(StateDataError, match="the new key drops `device`.*give merge="):
        carry.change_function_key("RunningCount", ["user"]).write(str(tmp_path / "refused"))
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())
    carry.change_function_key("RunningCount", ["user"], merge=merge).write(str(tmp_path / "sp2"))
    ops.restore(str(tmp_path / "sp2"), str(tmp_path / "new"), progress=False)
    write_batches(in_dir, [[_user_device(0, "d7"), _user_device(2)]], SCHEMA, start=2)
    continued = run_query(spark, new, provider_class=SPARKSTATE_PROVIDER, input_dir=in_dir, schema=SCHEMA,
                          checkpoint_dir=tmp_path / "new", output_mode="append")
    model = run_query(spark, new, provider_class=HDFS_PROVIDER, input_dir=in_dir, schema=SCHEMA,
                      checkpoint_dir=tmp_path / "model", output_mode="append")
    assert continued.batches == {2: model.batches[2]} == {2: [("u0", 3), ("u2", 1)]}

    def held(checkpoint):
        count = read_keyed_state(spark, str(checkpoint), "count").select("user", "value").collect()
        seen = read_keyed_state(spark, str(checkpoint), "seen").select("user", "value").collect()
        return sorted(map(tuple, count)), sorted((r.user, sorted(r.value)) for r in seen)

    assert held(tmp_path / "new") == held(tmp_path / "model")


def test_a_keyed_function_added_to_the_query_starts_empty_with_its_tick_source_in_sparks_logs(spark, tmp_path):
    """A second keyed function after the first: Spark refuses the new query on the old state (one
    source more); carried over, the first function keeps its state and the new one counts from the
    carry-over on."""
    import carry_fns
    from streaming_harness import SPARKSTATE_PROVIDER, run_query, ship_module_by_value, write_batches

    from spark_state import ops
    from spark_state.process import keyed_process

    ship_module_by_value(carry_fns)

    def first(df):
        return keyed_process(df, "user", carry_fns.RunningCount(), "user string, n bigint", parallelism=2,
                             name="RunningCount")

    def both(df):
        return keyed_process(first(df), "user", carry_fns.RunningCount(), "user string, n bigint", parallelism=2,
                             name="Second")

    in_dir = tmp_path / "in"
    history = [[_user_device(i) for i in range(3)], [_user_device(i) for i in range(1, 4)]]
    later = [[_user_device(0), _user_device(1)], [_user_device(1), _user_device(9)]]
    write_batches(in_dir, history, SCHEMA)
    run_query(spark, first, provider_class=SPARKSTATE_PROVIDER, input_dir=in_dir, schema=SCHEMA,
              checkpoint_dir=tmp_path / "old", output_mode="append")
    ops.savepoint(str(tmp_path / "old"), str(tmp_path / "sp"), progress=False)
    carry = CarryOver(spark, str(tmp_path / "sp"), _builder(in_dir, both), progress=False)
    assert {f.name: f.verdict for f in carry.report.functions} == {"RunningCount": COMPATIBLE, "Second": MIGRATION}
    refusal = carry.report.spark_error
    assert refusal is not None and "sources in the checkpoint offsets" in refusal.message
    assert "function Second is new: it starts empty" in carry.summary()
    carry.write(str(tmp_path / "sp2"))
    after = check_upgrade(spark, str(tmp_path / "sp2"), _builder(in_dir, both))
    assert after.exit_status == 0 and after.spark_starts, after.summary()

    ops.restore(str(tmp_path / "sp2"), str(tmp_path / "new"), progress=False)
    write_batches(in_dir, later, SCHEMA, start=len(history))
    continued = run_query(spark, both, provider_class=SPARKSTATE_PROVIDER, input_dir=in_dir, schema=SCHEMA,
                          checkpoint_dir=tmp_path / "new", output_mode="append")
    # Second sees the first function's rows from the carry-over on: one per input row
    assert continued.batches == {2: [("u0", 1), ("u1", 1)], 3: [("u1", 2), ("u9", 1)]}

"""``df.write.format("spark-state")``: a savepoint's keyed value state (read with
``format("spark-state")``) and a Spark aggregation's store, transformed and written as a new
savepoint, restored with spark-state restore, and continued by the query: the restored state is
what was written and the output follows from it. Every refusal comes before anything is
written: the target stays absent, and no staging directory is left beside it."""

from __future__ import annotations

import os
import random
from collections import defaultdict

import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

import surgery_fns
from spark_state.ops import restore, savepoint
from spark_state.process import keyed_process
from spark_state.spark.lines import running_line
from spark_state.state_data import read_keyed_state, read_spark_operator_state, register_data_sources
from spark_state.state_data.location.savepoints import SavepointSource
from spark_state.state_data.writers.keyed_state_surgery import keyed_state_records
from streaming_harness import HDFS_PROVIDER, SPARKSTATE_PROVIDER, run_query, ship_module_by_value, write_batches
from surgery_fns import OUTPUT, Counter

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(running_line().name == "3.5", reason="the Python Data Source API is Spark 4.0+")]

SCHEMA = StructType([StructField("k", StringType()), StructField("v", LongType())])
PARALLELISM = 3
#: batches 0 and 1 run before the savepoint, 2 and 3 after the restore
BEFORE, AFTER = 2, 4


def _batches() -> list[list[tuple[str, int]]]:
    rng = random.Random(11)
    return [[(f"k{rng.randrange(8)}", rng.randrange(1, 20)) for _ in range(24)] for _ in range(AFTER)]


def _counter(df):
    return keyed_process(df, "k", Counter(), OUTPUT, parallelism=PARALLELISM, name="Counter")


def _aggregation(df):
    return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))


def _counts(batches, upto: int, start: dict) -> dict[str, int]:
    """Each key's row count over batches BEFORE..upto, from the counts ``start``."""
    count: dict[str, int] = defaultdict(int, start)
    for rows in batches[BEFORE:upto + 1]:
        for k, _ in rows:
            count[k] += 1
    return dict(count)


def _taken(spark, tmp, build, provider: str, mode: str) -> dict:
    """``build``'s query over batches 0 and 1, its savepoint, and batches 2 and 3 waiting."""
    batches = _batches()
    write_batches(tmp / "in", batches[:BEFORE], SCHEMA)
    run_query(spark, build, provider_class=provider, input_dir=str(tmp / "in"), schema=SCHEMA,
              checkpoint_dir=str(tmp / "ckpt"), output_mode=mode)
    savepoint(str(tmp / "ckpt"), str(tmp / "sp"), progress=False)
    write_batches(tmp / "in", batches[BEFORE:], SCHEMA, start=BEFORE)
    register_data_sources(spark)
    return {"sp": str(tmp / "sp"), "in": str(tmp / "in"), "batches": batches}


@pytest.fixture(scope="module")
def counter(spark, tmp_path_factory):
    ship_module_by_value(surgery_fns)
    return _taken(spark, tmp_path_factory.mktemp("ds-writer"), _counter, HDFS_PROVIDER, "append")


def _write(frame, mode: str = "overwrite", **options):
    writer = frame.write.format("spark-state").mode(mode)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save()


def _left_nothing(target: str) -> None:
    """Nothing written: no target, no staging beside it."""
    parent, name = os.path.split(target)
    assert not os.path.exists(target) and not [n for n in os.listdir(parent) if n.startswith(name + ".")]


def test_a_keyed_value_state_is_read_transformed_written_and_restored(spark, counter, tmp_path):
    batches, sp, target = counter["batches"], counter["sp"], str(tmp_path / "sp2")
    counts = spark.read.format("spark-state").option("stateVarName", "count").load(sp)
    fixed = (counts.where("k != 'k0'")
             .withColumn("value", F.when(F.col("k") == "k1", F.col("value") + 1000).otherwise(F.col("value"))))
    written = {r["k"]: r["value"] for r in fixed.collect()}
    assert "k1" in written and len(written) >= 4
    _write(fixed, path=sp, stateVarName="count", targetPath=target)
    _left_nothing(str(tmp_path / "none"))  # no staging left beside the target
    assert not [n for n in os.listdir(tmp_path) if ".spark-state-staging-" in n]

    assert {r["k"]: r["value"] for r in read_keyed_state(spark, target, "count").collect()} == written
    # the other state is copied unchanged
    totals = {r["k"]: r["value"] for r in read_keyed_state(spark, sp, "total").collect()}
    assert {r["k"]: r["value"] for r in read_keyed_state(spark, target, "total").collect()} == totals

    restore(target, str(tmp_path / "ckpt2"), progress=False)
    assert {r["k"]: r["value"] for r in read_keyed_state(spark, str(tmp_path / "ckpt2"), "count").collect()} == written
    run = run_query(spark, _counter, provider_class=HDFS_PROVIDER, input_dir=counter["in"], schema=SCHEMA,
                    checkpoint_dir=str(tmp_path / "ckpt2"), output_mode="append")
    assert run.batch_ids == list(range(BEFORE, AFTER))
    running = dict(written)
    for b in range(BEFORE, AFTER):
        expected = []
        for k, _ in batches[b]:
            running[k] = running.get(k, 0) + 1
            expected.append((k, running[k]))
        assert run.batches[b] == sorted(expected), f"batch {b}"
    assert {r["k"]: r["value"] for r in read_keyed_state(spark, str(tmp_path / "ckpt2"), "count").collect()} == \
        _counts(batches, AFTER - 1, written)


def test_a_keyed_state_with_ttl_is_written_with_its_ttl(spark, counter, tmp_path):
    """``total`` has a TTL: its descriptor, rebuilt from the record, stamps the values."""
    sp, target = counter["sp"], str(tmp_path / "sp2")
    totals = spark.read.format("spark-state").option("stateVarName", "total").load(sp)
    doubled = totals.withColumn("value", F.col("value") * 2)
    _write(doubled, path=sp, stateVarName="total", functionName="Counter", targetPath=target)
    assert {r["k"]: r["value"] for r in read_keyed_state(spark, target, "total").collect()} == {
        r["k"]: r["value"] * 2 for r in totals.collect()}
    records = keyed_state_records(SavepointSource.open(target))
    assert records["total"].ttl_ms == surgery_fns.TTL.ttl_ms and records["count"].ttl_ms is None


def test_an_aggregations_store_is_written_and_restored(spark, tmp_path):
    taken = _taken(spark, tmp_path, _aggregation, SPARKSTATE_PROVIDER, "update")
    batches, sp, target = taken["batches"], taken["sp"], str(tmp_path / "sp2")
    state = read_spark_operator_state(spark, sp).select("key", "value")
    count_field = state.schema["value"].dataType.fields[0].name  # the count's buffer column
    fixed = state.withColumn("value", F.when(
        F.col("key.k") == "k1", F.col("value").withField(count_field, F.col("value")[count_field] + 1000))
        .otherwise(F.col("value")))
    _write(fixed, path=sp, operatorId="0", targetPath=target)
    assert sorted(map(tuple, read_spark_operator_state(spark, target).select("key", "value").collect())) == \
        sorted(map(tuple, fixed.collect()))

    restore(target, str(tmp_path / "ckpt2"), progress=False)
    run = run_query(spark, _aggregation, provider_class=SPARKSTATE_PROVIDER, input_dir=taken["in"], schema=SCHEMA,
                    checkpoint_dir=str(tmp_path / "ckpt2"), output_mode="update")
    assert run.batch_ids == list(range(BEFORE, AFTER))
    before = defaultdict(int)
    for rows in batches[:BEFORE]:
        for k, _ in rows:
            before[k] += 1
    before["k1"] += 1000
    for b in range(BEFORE, AFTER):
        now = _counts(batches, b, before)
        assert sorted((r[0], r[1]) for r in run.batches[b]) == sorted(
            (k, now[k]) for k in {k for k, _ in batches[b]}), f"batch {b}"


@pytest.mark.parametrize("change, options, message", [
    (lambda d: d.withColumn("k", F.lit(1)), {}, r"need the key columns k string"),
    (lambda d: d.withColumn("value", F.col("value").cast("string")), {}, r"cast the column"),
    (lambda d: d, {"stateVarName": "cont"}, r"holds no keyed state 'cont' \(its states: count, total\): "
                                            r"stateVarName names"),
    (lambda d: d, {"stateVarName": None, "operatorId": "0"}, r"holds no state of a Spark operator 0.*\(operatorId\)"),
    (lambda d: d, {"functionName": "Nope"}, r"Nope.*\(functionName\)"),
    (lambda d: d, {"targetPath": None}, r"give its directory \(new or empty\) with the targetPath option"),
    (lambda d: d, {"mode": "append"}, r"use mode\('overwrite'\); append is refused"),
    (lambda d: d, {"mode": "errorifexists"}, r"ErrorIfExists"),
    (lambda d: d, {"stateVarName": "count", "storeName": "left"}, r"storeName names a store of a Spark operator"),
    (lambda d: d, {"statevarnme": "count"}, r"unknown option 'statevarnme'.*did you mean 'stateVarName'"),
])
def test_each_refusal_comes_before_anything_is_written(spark, counter, tmp_path, change, options, message):
    counts = spark.read.format("spark-state").option("stateVarName", "count").load(counter["sp"])
    target = str(tmp_path / "sp2")
    given = {"path": counter["sp"], "stateVarName": "count", "targetPath": target, **options}
    mode = given.pop("mode", "overwrite")
    with pytest.raises(AnalysisException, match="(?s)" + message):
        _write(change(counts), mode, **{k: v for k, v in given.items() if v is not None})
    _left_nothing(target)


def test_a_target_that_is_not_empty_is_refused(spark, counter, tmp_path):
    counts = spark.read.format("spark-state").option("stateVarName", "count").load(counter["sp"])
    target = tmp_path / "sp2"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(AnalysisException, match=r"(?s)is not empty.*\(targetPath\)"):
        _write(counts, path=counter["sp"], stateVarName="count", targetPath=str(target))
    assert os.listdir(target) == ["notes.txt"]
    assert not [n for n in os.listdir(tmp_path) if ".spark-state-staging-" in n]


def test_a_failed_task_aborts_the_write_and_leaves_nothing(spark, counter, tmp_path):
    """A task that fails while its rows are staged: Spark aborts the write, which removes the staging."""
    counts = spark.read.format("spark-state").option("stateVarName", "count").load(counter["sp"])
    failing = counts.withColumn("value", F.when(F.col("k") == "k3", F.raise_error(F.lit("no k3 here")))
                                .otherwise(F.col("value")))
    target = str(tmp_path / "sp2")
    with pytest.raises(Exception, match="no k3 here"):
        _write(failing, path=counter["sp"], stateVarName="count", targetPath=target)
    _left_nothing(target)

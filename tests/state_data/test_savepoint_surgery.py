"""Savepoint surgery (SavepointTransform's remove_state, rename_state, remove_function and
replace_keyed_state of a new state): a savepoint of a real keyed_process query after two batches,
changed, restored with spark-state restore, then run over two more batches. The restored query's
output and its state after them equal a plain-Python model of what they must be; the changed
savepoint's files hold no entry of a removed or renamed state. Plus the errors, raised before
anything is written."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

import surgery_fns
from spark_state.keys import system as syskeys
from spark_state.ops import restore, savepoint
from spark_state.ops import savepoint_format as SF
from spark_state.ops.restore import read_manifest
from spark_state.ops.state_files import read_state_entries
from spark_state.process import keyed_process
from spark_state.state_data import SavepointTransform, StateDataError, UnknownStateError, read_keyed_state
from spark_state.keys.entries import is_entry_of_state
from spark_state.storage import open_storage
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches
from surgery_fns import OUTPUT, Counter, CounterRenamed, CounterWithBonus, CountOnly

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("k", StringType()), StructField("v", LongType())])
NAME = "Counter"
PARALLELISM = 3
#: batches 0 and 1 run before the savepoint, 2 and 3 after the restore
BEFORE, AFTER = 2, 4


def _batches() -> list[list[tuple[str, int]]]:
    rng = random.Random(37)
    return [[(f"k{rng.randrange(12)}", rng.randrange(1, 30)) for _ in range(40)] for _ in range(AFTER)]


def _query(function):
    return lambda df: keyed_process(df, "k", function(), OUTPUT, parallelism=PARALLELISM, name=NAME)


class Model:
    """What the counter's output and states must be: counts and sums per key, from the rows of
    the batches the state has seen."""

    def __init__(self, batches, counted_from: int = 0, summed_from: int = 0) -> None:
        self.batches = batches
        self.counted_from, self.summed_from = counted_from, summed_from

    def output(self, batch: int) -> list[tuple]:
        count: dict[str, int] = defaultdict(int)
        for rows in self.batches[self.counted_from:batch]:
            for k, _ in rows:
                count[k] += 1
        out = []
        for k, _ in self.batches[batch]:
            count[k] += 1
            out.append((k, count[k]))
        return sorted(out)

    def counts(self, upto: int) -> dict[str, int]:
        count: dict[str, int] = defaultdict(int)
        for rows in self.batches[self.counted_from:upto + 1]:
            for k, _ in rows:
                count[k] += 1
        return dict(count)

    def sums(self, upto: int) -> dict[str, int]:
        total: dict[str, int] = defaultdict(int)
        for rows in self.batches[self.summed_from:upto + 1]:
            for k, v in rows:
                total[k] += v
        return dict(total)


@pytest.fixture(scope="module")
def taken(spark, tmp_path_factory):
    """The query run over batches 0 and 1, its savepoint, and batches 2 and 3 waiting."""
    ship_module_by_value(surgery_fns)
    tmp = tmp_path_factory.mktemp("surgery")
    batches = _batches()
    write_batches(tmp / "in", batches[:BEFORE], SCHEMA)
    run = run_query(spark, _query(Counter), provider_class=HDFS_PROVIDER, input_dir=str(tmp / "in"), schema=SCHEMA,
                    checkpoint_dir=str(tmp / "ckpt"), output_mode="append")
    assert run.batch_ids == list(range(BEFORE))
    savepoint(str(tmp / "ckpt"), str(tmp / "sp"), progress=False)
    write_batches(tmp / "in", batches[BEFORE:], SCHEMA, start=BEFORE)
    return {"sp": str(tmp / "sp"), "in": str(tmp / "in"), "batches": batches}


def _restored_run(spark, taken, changed: str, checkpoint: str, function):
    """Restore ``changed`` into ``checkpoint`` and run ``function``'s query over batches 2 and 3."""
    restore(changed, checkpoint, progress=False)
    run = run_query(spark, _query(function), provider_class=HDFS_PROVIDER, input_dir=taken["in"], schema=SCHEMA,
                    checkpoint_dir=checkpoint, output_mode="append")
    assert run.batch_ids == list(range(BEFORE, AFTER))
    return run


def _state(spark, path: str, state: str) -> dict:
    return {r["k"]: r["value"] for r in read_keyed_state(spark, path, state).select("k", "value").collect()}


def _files(path: str, function: str = NAME) -> list[list[bytes]]:
    """The entry keys of each of ``function``'s state files in the savepoint at ``path``."""
    storage = open_storage(path)
    manifest = read_manifest(storage)
    entry = next(p for p in manifest.process if p.name == function)
    return [[k for k, _ in read_state_entries(storage, manifest, SF.process_file(function, i))]
            for i in range(entry.parallelism)]


def _entries(path: str, function: str = NAME) -> list[bytes]:
    """Every entry key of ``function``'s state files in the savepoint at ``path``."""
    return [k for keys in _files(path, function) for k in keys]


def _of(keys: list[bytes], state: str) -> list[bytes]:
    return [k for k in keys if is_entry_of_state(k, state.encode())]


def test_a_removed_state_is_gone_and_the_query_continues_with_or_without_it(spark, taken, tmp_path):
    batches = taken["batches"]
    before = _entries(taken["sp"])
    tagged = {k[:2] for k in _of(before, "total")}  # values, TTL index and marker, schema record
    assert {syskeys.SYSTEM_PREFIX + t for t in (syskeys.TTL_INDEX_TAG, syskeys.TTL_MARKER_TAG,
                                                syskeys.KEYED_SCHEMA_TAG)} <= tagged

    changed = str(tmp_path / "sp")
    result = SavepointTransform(spark, taken["sp"], progress=False).remove_state("total").write(changed)
    assert result.changes == ["remove Counter.total"]
    after = _entries(changed)
    assert _of(after, "total") == [] and sorted(after) == sorted(k for k in before if not is_entry_of_state(k, b"total"))
    with pytest.raises(UnknownStateError, match="total"):
        _state(spark, changed, "total")

    # the query that no longer declares it
    model = Model(batches)
    run = _restored_run(spark, taken, changed, str(tmp_path / "without"), CountOnly)
    for b in range(BEFORE, AFTER):
        assert run.batches[b] == model.output(b), f"batch {b}"
    assert _state(spark, str(tmp_path / "without"), "count") == model.counts(AFTER - 1)

    # the query that still declares it: the state starts empty
    run = _restored_run(spark, taken, changed, str(tmp_path / "with"), Counter)
    for b in range(BEFORE, AFTER):
        assert run.batches[b] == model.output(b), f"batch {b}"
    assert _state(spark, str(tmp_path / "with"), "total") == Model(batches, summed_from=BEFORE).sums(AFTER - 1)
    assert _state(spark, str(tmp_path / "with"), "count") == model.counts(AFTER - 1)


def test_a_renamed_state_keeps_its_values_ttl_and_record_under_the_new_name(spark, taken, tmp_path):
    batches = taken["batches"]
    before = _entries(taken["sp"])
    changed = str(tmp_path / "sp")
    SavepointTransform(spark, taken["sp"], progress=False).rename_state("total", "sum").write(changed)
    after = _entries(changed)
    assert _of(after, "total") == []
    assert len(_of(after, "sum")) == len(_of(before, "total")) and len(after) == len(before)
    assert syskeys.marker_key(b"sum") in after and syskeys.keyed_record_key(b"sum") in after
    assert any(k.startswith(syskeys.index_prefix(b"sum")) for k in after)
    assert all(keys == sorted(keys) for keys in _files(changed))  # each file is in key order again
    model = Model(batches)
    assert _state(spark, changed, "sum") == model.sums(BEFORE - 1)

    run = _restored_run(spark, taken, changed, str(tmp_path / "ckpt"), CounterRenamed)
    for b in range(BEFORE, AFTER):
        assert run.batches[b] == model.output(b), f"batch {b}"
    assert _state(spark, str(tmp_path / "ckpt"), "sum") == model.sums(AFTER - 1)


def test_a_state_the_savepoint_lacks_is_added_from_a_dataframe(spark, taken, tmp_path):
    from spark_state.state import ValueStateDescriptor

    batches = taken["batches"]
    model = Model(batches)
    t = SavepointTransform(spark, taken["sp"], progress=False)
    given = t.read_keyed_state("count").select("k", (F.col("value") * 1000).alias("value"))
    changed = str(tmp_path / "sp")
    t.replace_keyed_state(ValueStateDescriptor("bonus", LongType()), given).write(changed)
    assert _state(spark, changed, "bonus") == {k: n * 1000 for k, n in model.counts(BEFORE - 1).items()}
    assert _state(spark, changed, "total") == model.sums(BEFORE - 1)  # untouched

    run = _restored_run(spark, taken, changed, str(tmp_path / "ckpt"), CounterWithBonus)
    for b in range(BEFORE, AFTER):
        assert run.batches[b] == model.output(b), f"batch {b}"
    later = Model(batches, summed_from=BEFORE).sums(AFTER - 1)
    expected = {k: n * 1000 + later.get(k, 0) for k, n in model.counts(BEFORE - 1).items()}
    expected.update({k: v for k, v in later.items() if k not in expected})
    assert _state(spark, str(tmp_path / "ckpt"), "bonus") == expected


def test_a_removed_function_leaves_no_file_and_the_query_without_it_runs(spark, taken, tmp_path):
    batches = taken["batches"]
    changed = str(tmp_path / "sp")
    # the query's sources: the file source (0) and the function's tick source (1)
    SavepointTransform(spark, taken["sp"], progress=False).remove_function(NAME, tick_source=1).write(changed)
    storage = open_storage(changed)
    manifest = read_manifest(storage)
    assert manifest.process == [] and not [f for f in manifest.files if f.path.startswith(f"process/{NAME}/")]
    assert storage.list_dir(f"process/{NAME}") == []
    offsets = storage.read_bytes(f"spark/offsets/{BEFORE - 1}").decode().split("\n")
    assert len(offsets) == 3 and "logOffset" in offsets[2]  # version, metadata, the file source

    restore(changed, str(tmp_path / "ckpt"), progress=False)
    run = run_query(spark, lambda df: df.select("k", "v"), provider_class=HDFS_PROVIDER, input_dir=taken["in"],
                    schema=SCHEMA, checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    assert run.batch_ids == list(range(BEFORE, AFTER))
    for b in range(BEFORE, AFTER):
        assert run.batches[b] == sorted(batches[b]), f"batch {b}"


def test_a_query_that_keeps_a_removed_function_is_refused(spark, taken, tmp_path):
    changed = str(tmp_path / "sp")
    SavepointTransform(spark, taken["sp"], progress=False).remove_function(NAME).write(changed)
    with pytest.raises(StreamingQueryException, match="no state for batch 2"):
        _restored_run(spark, taken, changed, str(tmp_path / "ckpt"), Counter)


def test_surgery_errors_name_both_sides_before_anything_is_written(spark, taken, tmp_path):
    t = SavepointTransform(spark, taken["sp"], progress=False)
    with pytest.raises(UnknownStateError, match=r"no keyed state 'nope' \(its states: count, total\)"):
        t.remove_state("nope")
    with pytest.raises(StateDataError, match="holds a state 'count' already"):
        t.rename_state("total", "count")
    with pytest.raises(UnknownStateError, match=r"no function named 'Other' \(functions found: Counter\)"):
        t.remove_function("Other")
    with pytest.raises(StateDataError, match="has 2 sources"):
        t.remove_function(NAME, tick_source=2)
    with pytest.raises(StateDataError, match="logOffset.*not a tick source's"):
        t.remove_function(NAME, tick_source=0)
    t.rename_state("total", "sum")
    with pytest.raises(UnknownStateError, match=r"its states: count, sum"):
        t.remove_state("total")  # the rename is seen by the next change
    t.remove_function(NAME)
    with pytest.raises(UnknownStateError, match="removed by this transform"):
        t.remove_state("count")
    assert not (tmp_path / "sp").exists()


def test_a_functions_operator_state_is_read_and_replaced_in_a_savepoint(spark, tmp_path):
    """A checkpointed_process function's list and broadcast state replaced, its union list state
    kept: the restored query's first batch starts from exactly those."""
    import json

    import process_fns
    from process_fns import INPUT_SCHEMA, OPERATOR_OUTPUT, OperatorStates
    from spark_state.process import checkpointed_process
    from spark_state.state import ListStateDescriptor, MapStateDescriptor

    ship_module_by_value(process_fns)
    batches = [[(f"r{b}", b * 100 + i) for i in range(12)] for b in range(3)]
    write_batches(tmp_path / "in", batches[:2], INPUT_SCHEMA)

    def build(df):
        return checkpointed_process(df, OperatorStates(), OPERATOR_OUTPUT, parallelism=PARALLELISM, name="Ops")

    run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"), schema=INPUT_SCHEMA,
              checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")
    sp, changed = str(tmp_path / "sp"), str(tmp_path / "sp2")
    savepoint(str(tmp_path / "ckpt"), sp, progress=False)
    write_batches(tmp_path / "in", batches[2:], INPUT_SCHEMA, start=2)

    def read(t, state):
        by_partition = defaultdict(list)
        for r in t.read_function_operator_state(state, function="Ops").collect():
            by_partition[r["partition_id"]].append((r[0], r["value"]))
        return {p: [v for _, v in sorted(rows)] for p, rows in by_partition.items()}

    t = SavepointTransform(spark, sp, progress=False)
    union = read(t, "union")
    assert sorted(v for vs in union.values() for v in vs) == sorted(v for rows in batches[:2] for _, v in rows)
    split = spark.createDataFrame([(p, i, p * 1000 + i) for p in range(PARALLELISM) for i in range(2)],
                                  "partition_id int, index int, value bigint")
    bcast = spark.createDataFrame([(p, "writer", 40 + p) for p in range(PARALLELISM)],
                                  "partition_id int, map_key string, value bigint")
    split_d, bcast_d = ListStateDescriptor("split", LongType()), MapStateDescriptor("bcast", StringType(), LongType())
    with pytest.raises(StateDataError, match="not mode='broadcast'"):
        t.replace_function_operator_state(split_d, split, mode="broadcast", function="Ops")
    with pytest.raises(StateDataError, match=r"name partitions 0\.\.5, but 'Ops' has 3 partitions"):
        t.replace_function_operator_state(split_d, split.withColumn("partition_id", F.lit(5)).union(split),
                                          function="Ops")
    with pytest.raises(StateDataError, match="'value' column .* is string, .* stores bigint"):
        t.replace_function_operator_state(split_d, split.withColumn("value", F.col("value").cast("string")),
                                          function="Ops")
    t.replace_function_operator_state(split_d, split, function="Ops")
    t.replace_function_operator_state(bcast_d, bcast, function="Ops")
    t.write(changed)

    again = SavepointTransform(spark, changed, progress=False)
    assert read(again, "split") == {p: [p * 1000, p * 1000 + 1] for p in range(PARALLELISM)}
    assert read(again, "bcast") == {p: [40 + p] for p in range(PARALLELISM)}
    assert read(again, "union") == union

    restore(changed, str(tmp_path / "ckpt2"), progress=False)
    run = run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=str(tmp_path / "in"), schema=INPUT_SCHEMA,
                    checkpoint_dir=str(tmp_path / "ckpt2"), output_mode="append")
    firsts = {r[1]: r for r in run.batches[2] if r[3] == 0}
    assert sorted(firsts) == list(range(PARALLELISM))
    for p, (_, _, _, _, _, restored_split, restored_union, writer) in firsts.items():
        assert json.loads(restored_split) == [p * 1000, p * 1000 + 1]
        assert json.loads(restored_union) == union.get(p, [])
        assert writer == 40 + p


def test_an_aggregations_state_rows_are_corrected_with_the_schema_checked(spark, taken, tmp_path):
    """Spark's aggregation state in a savepoint: one key's count corrected, the rows written as
    the provider holds them; the restored query continues from the corrected count."""
    from streaming_harness import SPARKSTATE_PROVIDER

    from spark_state.state_data import read_spark_operator_state

    batches = taken["batches"]
    inputs = tmp_path / "in"
    write_batches(inputs, batches[:BEFORE], SCHEMA)

    def counts(df):
        return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))

    run_query(spark, counts, provider_class=SPARKSTATE_PROVIDER, input_dir=str(inputs), schema=SCHEMA,
              checkpoint_dir=str(tmp_path / "ckpt"), output_mode="update")
    sp, changed = str(tmp_path / "sp"), str(tmp_path / "sp2")
    savepoint(str(tmp_path / "ckpt"), sp, progress=False)
    write_batches(inputs, batches[BEFORE:], SCHEMA, start=BEFORE)

    state = read_spark_operator_state(spark, sp).select("key", "value")
    count_field = state.schema["value"].dataType.fields[0].name  # the count's buffer column
    fixed = state.withColumn("value", F.when(
        F.col("key.k") == "k1", F.col("value").withField(count_field, F.col("value")[count_field] + 1000))
        .otherwise(F.col("value")))
    t = SavepointTransform(spark, sp, progress=False)
    with pytest.raises(StateDataError, match=r"need a 'value' column struct<.*>.*; they have struct<"):
        t.replace_spark_operator_state(0, fixed.withColumn("value", F.struct(F.lit("x").alias(count_field))))
    with pytest.raises(UnknownStateError, match=r"holds no state of a Spark operator 7; Spark operators: 0 stateStoreSave "
                                              r"\(stores default\)"):
        t.replace_spark_operator_state(7, fixed)
    t.replace_spark_operator_state(0, fixed).write(changed)

    restore(changed, str(tmp_path / "ckpt2"), progress=False)
    run = run_query(spark, counts, provider_class=SPARKSTATE_PROVIDER, input_dir=str(inputs), schema=SCHEMA,
                    checkpoint_dir=str(tmp_path / "ckpt2"), output_mode="update")
    assert run.batch_ids == list(range(BEFORE, AFTER))
    model = Model(batches)
    for b in range(BEFORE, AFTER):
        seen = sorted({k for k, _ in batches[b]})
        expected = [(k, model.counts(b)[k] + (1000 if k == "k1" else 0), model.sums(b)[k]) for k in seen]
        assert run.batches[b] == expected, f"batch {b}"
    assert "k1" in {k for rows in batches[BEFORE:] for k, _ in rows}  # the correction shows

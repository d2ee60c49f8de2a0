"""Bootstrap (spark_state.state_data.SavepointWriter): a savepoint computed from history by batch
jobs, restored with spark-state restore, then fed the stream, equals a query that read the history
as its batch 0 and then the same stream -- batch ids included: a keyed function (value, list and map
state, event-time timers and the watermark), an aggregation and a deduplication (against Spark's
RocksDB provider). Plus the clear errors: a max-parallelism mismatch, a state declared with another
type, a wrong source count, bad arguments."""

from __future__ import annotations

import datetime as dt
import random

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

import bootstrap_fns
from bootstrap_fns import OUTPUT, Activity, CountAsText
from spark_state.ops import restore
from spark_state.process import keyed_process
from spark_state.process.clock import resolve
from spark_state.state_data import BootstrapError, SavepointWriter, count_sources, read_keyed_state, read_timers
from spark_state.storage import open_storage
from streaming_harness import ROCKSDB_PROVIDER, SPARKSTATE_PROVIDER, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("k", StringType()), StructField("v", LongType()), StructField("ts", TimestampType())])
NAME = "Activity"
PARALLELISM, MAX_PARALLELISM = 3, 16
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _rows(rng: random.Random, n: int, start_s: int, span_s: int) -> list[tuple]:
    return [(f"k{rng.randrange(25)}", rng.randrange(1, 50),
             EPOCH + dt.timedelta(seconds=start_s + rng.randrange(span_s))) for _ in range(n)]


def _input() -> tuple[list[tuple], list[list[tuple]]]:
    """History over 10 minutes, then three live batches in the 5 minutes after it."""
    rng = random.Random(5)
    return _rows(rng, 240, 0, 600), [_rows(rng, 40, 600 + 100 * i, 100) for i in range(3)]


def _keyed(df, max_parallelism: int = MAX_PARALLELISM):
    return keyed_process(df.withWatermark("ts", "10 seconds"), "k", Activity(), OUTPUT, parallelism=PARALLELISM,
                         max_parallelism=max_parallelism, name=NAME)


def _runs(spark, tmp_path, build, writer: SavepointWriter, history, live, *, reference_provider: str,
          output_mode: str):
    """(reference run over history + live, bootstrapped run over live, bootstrapped checkpoint)."""
    write_batches(tmp_path / "all", [history, *live], SCHEMA)
    write_batches(tmp_path / "live", live, SCHEMA)
    reference = run_query(spark, build, provider_class=reference_provider, input_dir=str(tmp_path / "all"),
                          schema=SCHEMA, checkpoint_dir=str(tmp_path / "ref"), output_mode=output_mode)
    live_df = build(spark.readStream.schema(SCHEMA).parquet(str(tmp_path / "live")))
    result = writer.write(str(tmp_path / "sp"), sources=live_df)
    restored = restore(str(tmp_path / "sp"), str(tmp_path / "boot"), progress=False)
    assert restored.batch_id == 0
    boot = run_query(spark, build, provider_class=SPARKSTATE_PROVIDER, input_dir=str(tmp_path / "live"),
                     schema=SCHEMA, checkpoint_dir=str(tmp_path / "boot"), output_mode=output_mode)
    return reference, boot, result


def test_a_bootstrapped_keyed_function_continues_as_if_it_had_read_the_history(spark, tmp_path):
    ship_module_by_value(bootstrap_fns)
    history, live = _input()
    frame = spark.createDataFrame(history, SCHEMA)
    writer = SavepointWriter(spark, progress=False).with_keyed_state(
        NAME, frame, "k", Activity(), parallelism=PARALLELISM, max_parallelism=MAX_PARALLELISM, event_time="ts")
    reference, boot, result = _runs(spark, tmp_path, _keyed, writer, history, live,
                                    reference_provider=SPARKSTATE_PROVIDER, output_mode="append")
    assert result.keyed[NAME]["rows"] == len(history) and result.keyed[NAME]["entries"] > len(history)
    assert result.sources == 2  # the file source and the function's tick source

    # (a batch for due timers may follow the input's, as the run ends)
    assert boot.batch_ids[:3] == [1, 2, 3] and reference.batch_ids[:4] == [0, 1, 2, 3]
    for b in (1, 2, 3):
        assert boot.batches[b] == reference.batches[b], f"batch {b}"
    # the history's timers fire in batch 1, at the watermark the history left (its max - 10 s)
    fired = [r for r in boot.batches[1] if r[1] == "timer"]
    watermark = int(max(ts for _, _, ts in history).timestamp() * 1000) - 10_000
    assert fired and all(r[5] <= watermark for r in fired)

    for state in ("count", "vals", "buckets"):
        def read(ckpt, state=state):
            return sorted((r[0], _plain(r[1])) for r in read_keyed_state(spark, ckpt, state, batch=3).collect())
        assert read(str(tmp_path / "boot")) == read(str(tmp_path / "ref")), state
    timers = [sorted(map(tuple, read_timers(spark, str(tmp_path / c), batch=3).collect())) for c in ("boot", "ref")]
    assert timers[0] == timers[1] and timers[0]

    # The same savepoint restored for a query with another max parallelism: refused, naming both.
    restore(str(tmp_path / "sp"), str(tmp_path / "other"), progress=False)
    with pytest.raises(StreamingQueryException, match=r"MaxParallelismMismatchError: state at \S+ was created with "
                       r"max_parallelism=16 but this run uses max_parallelism=32"):
        run_query(spark, lambda df: _keyed(df, max_parallelism=32), provider_class=SPARKSTATE_PROVIDER,
                  input_dir=str(tmp_path / "live"), schema=SCHEMA, checkpoint_dir=str(tmp_path / "other"),
                  output_mode="append")


def _plain(value):
    if isinstance(value, list):
        return sorted(value)
    if isinstance(value, dict):
        return sorted(value.items())
    return value


def _aggregation(df):
    return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))


def _dedup(df):
    return df.withWatermark("ts", "30 seconds").dropDuplicates(["k", "v", "ts"]).select("k", "v", "ts")


@pytest.mark.parametrize("case", ["aggregation", "dedup"])
def test_spark_operators_bootstrapped_continue_as_spark_does(spark, tmp_path, case):
    build, mode = {"aggregation": (_aggregation, "update"), "dedup": (_dedup, "append")}[case]
    history, live = _input()
    if case == "dedup":  # live rows that repeat history rows: dropped only if the state holds the history
        live = [batch + history[:10] for batch in live]
    frame = spark.createDataFrame(history, SCHEMA)
    writer = SavepointWriter(spark, progress=False).with_spark_operators(frame, build, output_mode=mode)
    reference, boot, result = _runs(spark, tmp_path, build, writer, history, live,
                                    reference_provider=ROCKSDB_PROVIDER, output_mode=mode)
    assert [o["name"] for o in result.operators] == (["stateStoreSave"] if case == "aggregation" else ["dedupe"])
    # batches 1..3 read the live files; a no-data batch (eviction) may follow, in both runs alike
    assert boot.batch_ids[:3] == [1, 2, 3] and boot.batch_ids == reference.batch_ids[1:]
    for b in boot.batch_ids:
        assert boot.batches[b] == reference.batches[b], f"batch {b}"
    assert boot.batches[1]


def test_a_keyed_function_inside_the_operators_query_keeps_its_clock(spark, tmp_path):
    """A keyed function in the query of with_spark_operators runs in the one-batch run (which may
    end with a batch for due timers); its batch clock is carried as batch 0's, so the restored
    query's batch 1 has the watermark the history left: its largest event time - 10 s."""
    ship_module_by_value(bootstrap_fns)
    history, _ = _input()
    writer = SavepointWriter(spark, progress=False).with_spark_operators(
        spark.createDataFrame(history, SCHEMA), _keyed, output_mode="append")
    writer.write(str(tmp_path / "sp"), sources=2)
    restore(str(tmp_path / "sp"), str(tmp_path / "boot"), progress=False)
    location = open_storage(str(tmp_path / "boot" / "spark-state" / NAME))
    first = resolve(location, 1, {"1": 10_000}, now_ms=0)  # side 1: keyed_process's input
    assert first.watermark_ms == int(max(ts for _, _, ts in history).timestamp() * 1000) - 10_000


def test_a_state_declared_with_another_type_fails_clearly(spark, tmp_path):
    ship_module_by_value(bootstrap_fns)
    history, live = _input()
    write_batches(tmp_path / "live", live[:1], SCHEMA)
    frame = spark.createDataFrame(history, SCHEMA)
    SavepointWriter(spark, progress=False).with_keyed_state(
        NAME, frame, "k", CountAsText(), parallelism=PARALLELISM, max_parallelism=MAX_PARALLELISM
    ).write(str(tmp_path / "sp"), sources=2)
    restore(str(tmp_path / "sp"), str(tmp_path / "ckpt"), progress=False)
    with pytest.raises(StreamingQueryException, match=r"StateSchemaIncompatibleError: state 'count' cannot be "
                       r"restored: it was written as value state of \S*string\S* and is now declared as value "
                       r"state of \S*bigint"):
        run_query(spark, _keyed, provider_class=SPARKSTATE_PROVIDER, input_dir=str(tmp_path / "live"), schema=SCHEMA,
                  checkpoint_dir=str(tmp_path / "ckpt"), output_mode="append")


def test_bad_arguments_fail_clearly(spark, tmp_path):
    frame = spark.createDataFrame([("a", 1, EPOCH)], SCHEMA)
    stream = spark.readStream.schema(SCHEMA).parquet(str(tmp_path))
    writer = SavepointWriter(spark, progress=False)
    with pytest.raises(BootstrapError, match="streaming DataFrame"):
        writer.with_keyed_state(NAME, stream, "k", Activity())
    with pytest.raises(BootstrapError, match="timestamp column"):
        writer.with_keyed_state(NAME, frame, "k", Activity(), event_time="v")
    with pytest.raises(BootstrapError, match="nothing to bootstrap"):
        writer.write(str(tmp_path / "sp"), sources=1)
    writer.with_keyed_state(NAME, frame, "k", Activity())
    with pytest.raises(BootstrapError, match="number of sources"):
        writer.write(str(tmp_path / "sp"), sources=0)
    assert count_sources(stream) == 1
    assert count_sources(stream.union(spark.readStream.schema(SCHEMA).parquet(str(tmp_path)))) == 2
    assert count_sources(_keyed(stream)) == 2


TWO_SCHEMA = StructType([StructField("k", StringType()), StructField("v", LongType())])
RULE_SCHEMA = StructType([StructField("k", StringType()), StructField("m", LongType())])


def _two_input_runs(spark, tmp_path, build, writer_of, histories, lives, schemas):
    """(reference run over each input's history + live, bootstrapped run over the live inputs):
    the writer is made by ``writer_of(history frames)`` and written with the live query's sources."""
    alls, live_dirs = [], []
    for i, (history, live, schema) in enumerate(zip(histories, lives, schemas)):
        write_batches(tmp_path / f"all{i}", [history, *live], schema)
        write_batches(tmp_path / f"live{i}", live, schema)
        alls.append(str(tmp_path / f"all{i}"))
        live_dirs.append(str(tmp_path / f"live{i}"))
    reference = run_query(spark, build, provider_class=SPARKSTATE_PROVIDER, input_dir=alls, schema=list(schemas),
                          checkpoint_dir=str(tmp_path / "ref"), output_mode="append")
    frames = [spark.createDataFrame(h, s) for h, s in zip(histories, schemas)]
    live_df = build(*(spark.readStream.schema(s).parquet(d) for s, d in zip(schemas, live_dirs)))
    writer_of(frames).write(str(tmp_path / "sp"), sources=live_df)
    restore(str(tmp_path / "sp"), str(tmp_path / "boot"), progress=False)
    boot = run_query(spark, build, provider_class=SPARKSTATE_PROVIDER, input_dir=live_dirs, schema=list(schemas),
                     checkpoint_dir=str(tmp_path / "boot"), output_mode="append")
    return reference, boot


def test_a_bootstrapped_co_process_function_continues_as_if_it_had_read_the_history(spark, tmp_path):
    import bootstrap_two_input_fns
    from bootstrap_two_input_fns import PAIRS_OUTPUT, Pairs
    from spark_state.process import keyed_co_process

    ship_module_by_value(bootstrap_two_input_fns)
    rng = random.Random(8)

    def rows(n):
        return [(f"k{rng.randrange(15)}", rng.randrange(1, 40)) for _ in range(n)]

    def build(left, right):
        return keyed_co_process(left, right, "k", "k", Pairs(), PAIRS_OUTPUT, parallelism=PARALLELISM,
                                max_parallelism=MAX_PARALLELISM, name="Pairs")

    reference, boot = _two_input_runs(
        spark, tmp_path, build,
        lambda frames: SavepointWriter(spark, progress=False).with_co_keyed_state(
            "Pairs", frames[0], frames[1], "k", "k", Pairs(), parallelism=PARALLELISM,
            max_parallelism=MAX_PARALLELISM),
        [rows(120), rows(80)], [[rows(30), rows(30)], [rows(20), rows(20)]], [TWO_SCHEMA, TWO_SCHEMA])
    assert boot.batch_ids == [1, 2]
    for b in (1, 2):
        assert boot.batches[b] == reference.batches[b] and boot.batches[b], f"batch {b}"
    for state in ("left_sum", "rights"):
        def read(ckpt, state=state):
            return sorted(map(tuple, read_keyed_state(spark, ckpt, state).select("k", "value").collect()))
        assert read(str(tmp_path / "boot")) == read(str(tmp_path / "ref")), state


def test_a_bootstrapped_broadcast_function_continues_as_if_it_had_read_the_history(spark, tmp_path):
    import bootstrap_two_input_fns
    from bootstrap_two_input_fns import MULTIPLIERS, SCALED_OUTPUT, Scaled
    from spark_state.process import keyed_broadcast_process

    ship_module_by_value(bootstrap_two_input_fns)
    rng = random.Random(9)

    def rows(n):
        return [(f"k{rng.randrange(15)}", rng.randrange(1, 40)) for _ in range(n)]

    def build(events, rules):
        return keyed_broadcast_process(events, "k", rules, Scaled(), SCALED_OUTPUT, broadcast_states=[MULTIPLIERS],
                                       broadcast_order="m", parallelism=PARALLELISM,
                                       max_parallelism=MAX_PARALLELISM, name="Scaled")

    rules = [(f"k{i}", 10 + i) for i in range(0, 15, 2)]
    reference, boot = _two_input_runs(
        spark, tmp_path, build,
        lambda frames: SavepointWriter(spark, progress=False).with_broadcast_keyed_state(
            "Scaled", frames[0], "k", frames[1], Scaled(), broadcast_states=[MULTIPLIERS], broadcast_order="m",
            parallelism=PARALLELISM, max_parallelism=MAX_PARALLELISM),
        [rows(100), rules], [[rows(30), rows(30)], [[("k1", 100)], []]], [TWO_SCHEMA, RULE_SCHEMA])
    assert boot.batch_ids == [1, 2]
    for b in (1, 2):
        assert boot.batches[b] == reference.batches[b] and boot.batches[b], f"batch {b}"
    # the history's multipliers reach the live rows (k0 is never set again)
    assert any(k == "k0" and scaled % 10 == 0 for k, _, scaled in boot.batches[1] + boot.batches[2])

    with pytest.raises(BootstrapError, match="must be a KeyedBroadcastProcessFunction, got Activity"):
        SavepointWriter(spark).with_broadcast_keyed_state("X", spark.range(1), "id", spark.range(1), Activity(),
                                                          broadcast_states=[MULTIPLIERS])

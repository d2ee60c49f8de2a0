"""A keyed function's state read outside the query (spark_state.state_data) against a plain-Python
model of it: every keyed state type and the timers, at the last and an earlier batch; as
DataFrames (nested and flattened) and by point lookups from Python and the command line; only the
key's partition store is read by a lookup; a lookup during a running query sees the last
committed batch, never the batch being written; the clear errors."""

from __future__ import annotations

import json
import os
import random
import shutil
from typing import Any

import pytest

import process_fns
import state_data_fns
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, all_states_add, all_states_descriptors
from spark_state.__main__ import main
from spark_state.process import keyed_process
from spark_state.ops import QueryRunningError, restore, savepoint
from spark_state.state_data import (KeyMismatchError, SavepointTransform, StateDataError, StateLookup,
                                   UnknownStateError, erase_keys, lookup, read_change_feed, read_keyed_state,
                                   read_timers)
from spark_state.state import ValueStateDescriptor
from state_data_fns import FAR_MS, AllStatesAndTimers
from streaming_harness import HDFS_PROVIDER, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark

NAME = "AllStates"
PARALLELISM = 3


def _batches() -> list[list[tuple[str, int]]]:
    rng = random.Random(11)
    return [[(f"k{rng.randrange(40)}", rng.randrange(0, 25)) for _ in range(60)] for _ in range(4)]


def model_states(batches, upto: int) -> dict[str, dict[str, Any]]:
    """Every key's state after batch ``upto``, as AllStates keeps it (process_fns' model)."""
    state: dict[str, dict[str, Any]] = {}
    for rows in batches[:upto + 1]:
        for k, v in rows:
            all_states_add(state, k, v)
    return state


def _build(df):
    return keyed_process(df, "k", AllStatesAndTimers(), ALL_STATES_OUTPUT, parallelism=PARALLELISM, name=NAME)


def _ship():
    ship_module_by_value(process_fns)
    ship_module_by_value(state_data_fns)


@pytest.fixture(scope="module")
def finished(spark, tmp_path_factory):
    """The query run over every batch; its state beside the checkpoint."""
    _ship()
    tmp = tmp_path_factory.mktemp("lookup")
    batches = _batches()
    write_batches(tmp / "in", batches, INPUT_SCHEMA)
    run = run_query(spark, _build, provider_class=HDFS_PROVIDER, input_dir=str(tmp / "in"), schema=INPUT_SCHEMA,
                    checkpoint_dir=str(tmp / "ckpt"), output_mode="append")
    assert run.batch_ids == list(range(len(batches)))
    return {"checkpoint": str(tmp / "ckpt"), "batches": batches, "tmp": tmp}


def _expect_all(states: StateLookup, model: dict, key: str, batch) -> None:
    s = model[key]
    assert states.get("count", key, batch=batch) == s["count"]
    assert states.get("recent", key, batch=batch) == s["recent"]
    assert states.get("buckets", key, batch=batch) == dict(s["buckets"])
    assert states.get("total", key, batch=batch) == s["total"]
    mean = states.get("mean", key, batch=batch)  # the accumulator: (sum, count)
    assert tuple(mean.values() if isinstance(mean, dict) else mean) == (sum(s["vals"]), len(s["vals"]))


def test_lookups_equal_the_model_for_every_state_type(finished):
    batches = finished["batches"]
    with StateLookup(finished["checkpoint"]) as states:
        for batch in (None, 1):
            model = model_states(batches, len(batches) - 1 if batch is None else batch)
            for key in sorted(model):
                _expect_all(states, model, key, batch)
            assert states.get("count", "no-such-key") is None and states.get("recent", "no-such-key", []) == []
        result = states.lookup("count", "k1")
        assert (result.function, result.kind, result.batch, result.key) == (NAME, "value", len(batches) - 1, ("k1",))
        assert 0 <= result.partition < PARALLELISM and 0 <= result.key_group < 128
        assert set(states.states()) == {"count", "recent", "buckets", "total", "mean"}
        assert states.states()["buckets"] == "map state of bigint -> bigint"


def test_reads_equal_the_model_for_every_state_type(spark, finished):
    batches, ckpt = finished["batches"], finished["checkpoint"]
    for batch in (None, 1):
        model = model_states(batches, len(batches) - 1 if batch is None else batch)

        def read(state, batch=batch):
            return {tuple(r)[0]: tuple(r)[1:-1] for r in read_keyed_state(spark, ckpt, state, batch=batch).collect()}

        assert read("count") == {k: (s["count"],) for k, s in model.items()}
        assert read("recent") == {k: (s["recent"],) for k, s in model.items()}
        assert read("buckets") == {k: (dict(s["buckets"]),) for k, s in model.items()}
        assert read("total") == {k: (s["total"],) for k, s in model.items()}
        assert {k: tuple(v[0]) for k, v in read("mean").items()} == {
            k: (sum(s["vals"]), len(s["vals"])) for k, s in model.items()}
        flat = read_keyed_state(spark, ckpt, "recent", batch=batch, flatten_collection_types=True)
        assert flat.columns == ["k", "index", "value", "partition_id"]
        assert sorted(tuple(r)[:-1] for r in flat.collect()) == sorted(
            (k, i, v) for k, s in model.items() for i, v in enumerate(s["recent"]))
        entries = read_keyed_state(spark, ckpt, "buckets", batch=batch, flatten_collection_types=True)
        assert entries.columns == ["k", "map_key", "value", "partition_id"]
        assert sorted(tuple(r)[:-1] for r in entries.collect()) == sorted(
            (k, b, n) for k, s in model.items() for b, n in s["buckets"].items())
    frame = read_keyed_state(spark, ckpt, "buckets")
    assert frame.schema.simpleString() == "struct<k:string,value:map<bigint,bigint>,partition_id:int>"
    assert frame.rdd.getNumPartitions() == PARALLELISM  # one task per partition store
    with StateLookup(ckpt) as states:  # partition_id: the partition store that holds the key
        assert all(states.lookup("buckets", r.k).partition == r.partition_id for r in frame.collect())


def test_timers_read_as_registered(spark, finished):
    """Every (key, v) registered a processing-time timer at FAR_MS + v; none has fired."""
    frame = read_timers(spark, finished["checkpoint"])
    assert frame.columns == ["k", "domain", "expiration_timestamp_ms", "partition_id"]
    expected = {(k, "processing_time", FAR_MS + v) for batch in finished["batches"] for k, v in batch}
    assert sorted(tuple(r)[:-1] for r in frame.collect()) == sorted(expected)
    before = {(k, "processing_time", FAR_MS + v) for batch in finished["batches"][:2] for k, v in batch}
    assert {tuple(r)[:-1] for r in read_timers(spark, finished["checkpoint"], batch=1).collect()} == before


def test_the_change_feed_gives_each_batchs_changes(spark, finished):
    """Batches 1..3 (and 0..3): one update row per key a batch touched, with the key's value after
    that batch, for value, list and map state."""
    batches, ckpt = finished["batches"], finished["checkpoint"]
    for start in (0, 1):
        for state, form in (("count", lambda s: s["count"]), ("recent", lambda s: s["recent"]),
                            ("buckets", lambda s: dict(s["buckets"]))):
            feed = read_change_feed(spark, ckpt, state, start_batch=start)
            assert feed.columns == ["batch_id", "change_type", "k", "value", "partition_id"]
            expected = sorted((b, "update", k, form(model_states(batches, b)[k]))
                              for b in range(start, len(batches)) for k in {k for k, _ in batches[b]})
            found = sorted((r[0], r[1], r[2], dict(r[3]) if isinstance(r[3], dict) else r[3]) for r in feed.collect())
            assert found == expected, (start, state)
    assert read_change_feed(spark, ckpt, "count", start_batch=2, end_batch=2).count() == len(
        {k for k, _ in batches[2]})
    with pytest.raises(StateDataError, match="start_batch"):
        read_change_feed(spark, ckpt, "count", start_batch=len(batches))


def test_the_command_line_reads_states_timers_and_changes(spark, finished, capsys):
    """`spark-state read` prints what the Python readers give (here in the test's session)."""
    batches, ckpt = finished["batches"], finished["checkpoint"]
    model = model_states(batches, len(batches) - 1)
    assert main(["read", ckpt, "count", "--json", "--limit", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["columns"] == ["k", "value", "partition_id"] and out["total"] == len(model)
    assert {r["k"]: r["value"] for r in out["rows"]} == {k: s["count"] for k, s in model.items()}
    assert main(["read", ckpt, "--timers", "--json", "--limit", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rows"]) == 3 and out["total"] == len({(k, v) for b in batches for k, v in b})
    assert main(["read", ckpt, "count", "--start-batch", "2", "--end-batch", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == len({k for k, _ in batches[2]})
    assert main(["read", ckpt, "recent", "--flatten-collection-types", "--json", "--limit", "0"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["columns"] == ["k", "index", "value", "partition_id"]
    assert out["total"] == sum(len(s["recent"]) for s in model.values())
    assert main(["read", ckpt, "count", "--end-batch", "2"]) == 1
    assert "a change feed needs --start-batch (the first batch of the feed)" in capsys.readouterr().err
    assert main(["read", ckpt, "count"]) == 0
    assert "k\tvalue" in capsys.readouterr().out
    assert main(["read", ckpt, "--timers", "--operator-id", "0"]) == 1
    assert ("give exactly one of STATE or --timers or --operator-state or --operator-id (given: --timers, "
            "--operator-id)") in capsys.readouterr().err


def test_a_read_of_an_unknown_state_lists_the_states(spark, finished):
    with pytest.raises(UnknownStateError,
                       match=r"no keyed state 'cont' \(states: buckets, count, mean, recent, total\)"):
        read_keyed_state(spark, finished["checkpoint"], "cont")


def test_a_lookup_reads_only_the_partition_store_of_its_key(finished):
    """With every other partition's store deleted, the lookups of the remaining one still work."""
    copy = finished["tmp"] / "only-one-partition"
    shutil.copytree(finished["checkpoint"], copy)
    model = model_states(finished["batches"], len(finished["batches"]) - 1)
    first = lookup(str(copy), "count", "k1")
    stores = copy / "spark-state" / NAME / "stores"
    [layout] = os.listdir(stores)
    for partition in os.listdir(stores / layout):
        if int(partition) != first.partition:
            shutil.rmtree(stores / layout / partition)
    with StateLookup(str(copy)) as states:
        keys = [k for k in model  # the key's partition: Flink's operator index of its key group
                if states.key_columns.key_group((k,), 128) * PARALLELISM // 128 == first.partition]
        assert keys and all(states.get("count", k) == model[k]["count"] for k in keys)


def test_the_command_line_prints_the_value(finished, capsys):
    model = model_states(finished["batches"], 1)
    assert main(["get", finished["checkpoint"], "recent", "k3", "--batch", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["found"] and out["value"] == model["k3"]["recent"] and out["batch"] == 1 and out["key"] == ["k3"]
    assert main(["get", finished["checkpoint"], "buckets", "k3"]) == 0
    printed = capsys.readouterr().out
    assert "AllStates.buckets (map state)" in printed and "batch 3" in printed
    assert main(["get", finished["checkpoint"], "count", "absent-key"]) == 0
    assert "(no value)" in capsys.readouterr().out


def test_clear_errors(finished, capsys):
    ckpt = finished["checkpoint"]
    with pytest.raises(UnknownStateError, match=r"no keyed state 'cont' \(states: buckets, count, mean"):
        lookup(ckpt, "cont", "k1")
    with pytest.raises(UnknownStateError, match=r"no keyed function named 'Other' \(keyed functions found: AllStates"):
        lookup(ckpt, "count", "k1", function="Other")
    with pytest.raises(KeyMismatchError, match=r"must have 1 values|does not fit the key columns \(k string\)"):
        lookup(ckpt, "count", 42)
    assert main(["get", ckpt, "count", "k1", "--batch", "99", "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"] == "NoCommittedBatchError" and "batch 99 is not committed" in captured.err


def test_read_transform_restore_round_trips_every_state_type(spark, finished, tmp_path):
    """A savepoint read as DataFrames, each state written back unchanged by a transform, then
    restored: every state and the timers equal the query's. Then a transform that changes the
    type of one state, rewrites another and drops a key from a third."""
    ckpt, model = finished["checkpoint"], model_states(finished["batches"], len(finished["batches"]) - 1)
    sp1, sp2, sp3 = (str(tmp_path / n) for n in ("sp1", "sp2", "sp3"))
    savepoint(ckpt, sp1, progress=False)
    names = [d.name for d in all_states_descriptors()]
    for state in names:  # a savepoint reads as its checkpoint does
        assert sorted(map(tuple, read_keyed_state(spark, sp1, state).collect())) == sorted(
            map(tuple, read_keyed_state(spark, ckpt, state).collect())), state

    same = SavepointTransform(spark, sp1, progress=False)
    for descriptor in all_states_descriptors():
        same.replace_keyed_state(descriptor, same.read_keyed_state(descriptor.name))
    result = same.write(sp2)
    assert result.replaced == {NAME: names}
    restore(sp2, str(tmp_path / "ckpt2"), progress=False)
    with StateLookup(str(tmp_path / "ckpt2")) as states:
        for key in sorted(model):
            _expect_all(states, model, key, None)
    assert sorted(map(tuple, read_timers(spark, str(tmp_path / "ckpt2")).collect())) == sorted(
        map(tuple, read_timers(spark, ckpt).collect()))

    changed = SavepointTransform(spark, sp1, progress=False)
    counts = changed.read_keyed_state("count")
    changed.replace_keyed_state(ValueStateDescriptor("count", StringType()),
                                counts.select("k", F.format_string("n=%d", "value").alias("value")))
    changed.replace_keyed_state(all_states_descriptors()[1],
                                changed.read_keyed_state("recent").select("k", F.reverse("value").alias("value")))
    changed.replace_keyed_state(all_states_descriptors()[2], changed.read_keyed_state("buckets").where("k != 'k1'"))
    changed.write(sp3)
    assert {r[0]: r[1] for r in read_keyed_state(spark, sp3, "count").collect()} == {
        k: f"n={s['count']}" for k, s in model.items()}
    assert {r[0]: r[1] for r in read_keyed_state(spark, sp3, "recent").collect()} == {
        k: s["recent"][::-1] for k, s in model.items()}
    restore(sp3, str(tmp_path / "ckpt3"), progress=False)
    with StateLookup(str(tmp_path / "ckpt3")) as states:
        assert states.states()["count"] == "value state of string"
        assert states.get("buckets", "k1") is None and states.get("buckets", "k2") == dict(model["k2"]["buckets"])
        assert states.get("total", "k1") == model["k1"]["total"]  # untouched

    wrong, count = SavepointTransform(spark, sp1, progress=False), all_states_descriptors()[0]
    with pytest.raises(KeyMismatchError, match="k string"):
        wrong.replace_keyed_state(count, counts.withColumn("k", F.lit(1)))
    with pytest.raises(StateDataError, match="cast the column"):
        wrong.replace_keyed_state(count, counts.withColumn("value", F.col("value").cast("string")))
    with pytest.raises(StateDataError, match="'value' column"):
        wrong.replace_keyed_state(count, counts.select("k"))


def test_a_lookup_during_the_run_sees_the_last_committed_batch(spark, tmp_path):
    """Inside batch b's sink, the function's tasks have committed their state of batch b, but
    Spark has not written commits/b: a lookup then answers with batch b - 1's state."""
    _ship()
    batches = _batches()
    write_batches(tmp_path / "in", batches, INPUT_SCHEMA)
    checkpoint = str(tmp_path / "ckpt")
    seen: dict[int, dict[str, Any]] = {}

    def sink(batch_df, batch_id):
        batch_df.collect()  # runs the function: its state of this batch is written now
        if batch_id == 0:
            return
        with StateLookup(checkpoint) as states:
            seen[batch_id] = {k: (states.lookup("count", k).batch, states.get("count", k))
                              for k in sorted({k for k, _ in batches[batch_id]})}

    df = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(tmp_path / "in"))
    query = (_build(df).writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination(180)
    assert query.exception() is None
    assert sorted(seen) == list(range(1, len(batches)))
    for batch_id, found in seen.items():
        before = model_states(batches, batch_id - 1)
        assert found == {k: (batch_id - 1, before[k]["count"] if k in before else None) for k in found}


def test_erasure_removes_the_keys_from_every_state_and_the_query_never_sees_them_again(spark, finished):
    """Erase k1 and k2 from a copy of the stopped query; then every state and the timers lack them,
    the other keys keep theirs, and the continued query starts the erased keys afresh."""
    _ship()
    batches, tmp = finished["batches"], finished["tmp"]
    ckpt = tmp / "erased"
    shutil.copytree(finished["checkpoint"], ckpt)
    model = model_states(batches, len(batches) - 1)
    assert {"k1", "k2"} <= set(model)
    result = erase_keys(str(ckpt), ["k1", "k2", "never-seen"], progress=False)
    erased = result.functions[NAME]
    rows_of = {k: sum(1 for b in batches for key, _ in b if key == k) for k in ("k1", "k2")}
    assert erased["keys_found"] == 2 and result.batch == len(batches) - 1 and result.erasure_batch == len(batches)
    # one timer per distinct v of the key; list entries: the counter and up to 3 elements; map: one per bucket
    timers = sum(len({v for b in batches for key, v in b if key == k}) for k in ("k1", "k2"))
    assert erased["entries"]["<timers>"] == timers and erased["entries"]["count"] == 2
    assert erased["entries"]["buckets"] == sum(len(model[k]["buckets"]) for k in ("k1", "k2"))
    assert rows_of["k1"] > 0
    with StateLookup(str(ckpt)) as states:
        for state in ("count", "recent", "buckets", "total", "mean"):
            assert states.get(state, "k1") is None and states.get(state, "k2") is None
        others = sorted(set(model) - {"k1", "k2"})
        assert [states.get("count", k) for k in others] == [model[k]["count"] for k in others]
    assert not [r for r in read_timers(spark, str(ckpt)).collect() if r[0] in ("k1", "k2")]
    # the query continues after the erasure's batch (which read no input): k1 starts afresh, k3 goes on
    write_batches(tmp / "in", [[("k1", 5), ("k3", 7)]], INPUT_SCHEMA, start=len(batches))
    run = run_query(spark, _build, provider_class=HDFS_PROVIDER, input_dir=str(tmp / "in"), schema=INPUT_SCHEMA,
                    checkpoint_dir=str(ckpt), output_mode="append")
    assert run.batch_ids == [len(batches) + 1]
    out = {r[0]: r for r in run.batches[len(batches) + 1]}
    assert out["k1"][1:3] == (1, "[5]")
    assert out["k3"][1] == model["k3"]["count"] + 1
    # the change feed: the erasure's batch recorded no changes, the batch after it did
    with pytest.raises(StateDataError, match=f"start at batch {len(batches) + 1} or later"):
        read_change_feed(spark, str(ckpt), "count", start_batch=0)
    feed = read_change_feed(spark, str(ckpt), "count", start_batch=len(batches) + 1).collect()
    assert sorted(tuple(r)[:-1] for r in feed) == [(len(batches) + 1, "update", "k1", 1),
                                                   (len(batches) + 1, "update", "k3", model["k3"]["count"] + 1)]


def test_erasure_from_the_command_line_and_its_refusals(finished, capsys):
    ckpt = finished["tmp"] / "erased-cli"
    shutil.copytree(finished["checkpoint"], ckpt)
    assert main(["erase", str(ckpt), "k4", "--json", "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["functions"][NAME]["keys_found"] == 1 and out["entries_removed"] > 0
    assert lookup(str(ckpt), "count", "k4").found is False
    # a second erasure of the same batch builds on the first
    assert main(["erase", str(ckpt), "k5", "--no-progress"]) == 0
    assert "AllStates: 1 of the keys found" in capsys.readouterr().out
    assert not lookup(str(ckpt), "count", "k4").found and not lookup(str(ckpt), "count", "k5").found
    assert lookup(str(ckpt), "count", "k6").found
    assert main(["erase", str(ckpt), "--no-progress"]) == 1
    assert "give at least one key" in capsys.readouterr().err
    # a batch with offsets and no commit: a running query
    last = max(int(n) for n in os.listdir(ckpt / "commits") if n.isdigit())
    shutil.copy(ckpt / "offsets" / str(last), ckpt / "offsets" / str(last + 1))
    with pytest.raises(QueryRunningError, match="Stop the query"):
        erase_keys(str(ckpt), ["k6"], progress=False)

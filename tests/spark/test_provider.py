"""spark-state's provider inside Spark: metrics, the state data source, key layout, clear errors,
and a Python worker that dies in the middle of a commit -- on both backends (``rocksdb``: layered
RocksDB views; ``hashmap``: state in the JVM heap), and a query that switches between them."""

from __future__ import annotations

import glob
import json
import os
import re
import struct

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout
from pyspark.sql.types import DoubleType, IntegerType, LongType, StringType, StructField, StructType

from spark_state import ops
from spark_state.checkpoint.metadata import Manifest
from spark_state.partitioning.spark_hash import spark_hash, spark_key_group, spark_partition_id
from spark_state.spark.lines import running_line
from streaming_harness import (HDFS_PROVIDER, ROCKSDB_PROVIDER, SPARKSTATE_BACKENDS, SPARKSTATE_HASHMAP,
                               SPARKSTATE_PROVIDER, backends_default_on_every_line, run_query, split_provider,
                               write_batches)

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("k", LongType()), StructField("v", LongType())])
PARTITIONS = 4


@pytest.fixture(scope="module")
def agg_input(tmp_path_factory):
    """Five batches of (k, v) rows over 40 keys: every batch updates keys seen before."""
    root = tmp_path_factory.mktemp("agg-input")
    batches = [[{"k": (b * 7 + i) % 40, "v": i} for i in range(60)] for b in range(5)]
    write_batches(root, batches, SCHEMA)
    return str(root)


def _aggregate(df):
    return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))


def _run(spark, provider, input_dir, checkpoint, **kwargs):
    return run_query(spark, _aggregate, provider_class=provider, input_dir=input_dir, schema=SCHEMA,
                     checkpoint_dir=checkpoint, output_mode="update", **kwargs)


@pytest.fixture(params=SPARKSTATE_BACKENDS, ids=["rocksdb", "hashmap"])
def ours_provider(request) -> str:
    """spark-state's provider id on each backend (see streaming_harness.split_provider)."""
    return request.param


def test_custom_metrics_show_in_query_progress(spark, agg_input, tmp_path, ours_provider):
    ours = _run(spark, ours_provider, agg_input, tmp_path / "ours")
    reference = _run(spark, HDFS_PROVIDER, agg_input, tmp_path / "hdfs")
    assert ours.batches == reference.batches
    for batch_id in ours.batch_ids:
        (op,) = ours.state_operators(batch_id)
        (ref,) = reference.state_operators(batch_id)
        assert op["numRowsTotal"] == ref["numRowsTotal"] > 0  # an exact key count, like HDFS's
        metrics = op["customMetrics"]
        assert metrics["sparkStateChangelogBytes"] > 0
        assert metrics["sparkStateCommitTimeMs"] >= 0 and metrics["sparkStateLoadTimeMs"] >= 0
        assert op["memoryUsedBytes"] > 0
        # The JVM follows every commit itself: no RocksDB export (flush) or heap ship per epoch.
        assert metrics["sparkStateViewExports"] == 0
    assert ours.state_operators(0)[0]["customMetrics"]["sparkStateRestoresFromCheckpoint"] == 0


def test_a_checkpoint_directory_with_uri_characters_keeps_each_store_apart(spark, agg_input, tmp_path,
                                                                          ours_provider):
    """A '#' (or '?', '%') in the checkpoint directory's name: each partition's store lives in its own
    directory under it, and the output equals the HDFS provider's. (The shim once handed the path
    over unescaped, so the worker cut it at the '#': every partition's store in one directory.)"""
    checkpoint = tmp_path / "q#1 50%?"
    ours = _run(spark, ours_provider, agg_input, checkpoint)
    assert ours.batches == _run(spark, HDFS_PROVIDER, agg_input, tmp_path / "hdfs").batches
    for partition in range(PARTITIONS):
        assert glob.glob(str(checkpoint / "state" / "0" / str(partition) / "manifests" / "*")), partition
    assert sorted(os.listdir(tmp_path)) == ["hdfs", "q#1 50%?"]


def test_reads_stay_exact_when_every_commit_snapshots(spark, agg_input, tmp_path, ours_provider):
    """A snapshot flushes the worker's database. Reads must still see every committed value:
    a RocksDB secondary tailing the live database did not (a flushed memtable shadowed newer
    values), which is why the JVM reads immutable exports with immutable layers over them.
    Snapshots are uploaded in the background and then become the base of the versions' manifests."""
    reference = _run(spark, HDFS_PROVIDER, agg_input, tmp_path / "hdfs")
    ours = _run(spark, ours_provider, agg_input, tmp_path / "ours",
                extra_confs={"spark.sql.streaming.stateStore.sparkState.snapshotInterval": "1"})
    assert ours.batches == reference.batches
    # Uploads finish in the background: each commit reports those completed since the one before.
    assert sum(op["customMetrics"]["sparkStateSnapshotFilesUploaded"]
               for b in ours.batch_ids for op in ours.state_operators(b)) > 0
    for part in range(PARTITIONS):
        manifests = [Manifest.from_json(p.read_bytes(), str(p))
                     for p in (tmp_path / "ours" / "state" / "0" / str(part) / "manifests").glob("*.json")]
        assert any(m.base_snapshot is not None and m.base_snapshot.version == m.version for m in manifests), \
            f"partition {part}: no version was re-pointed at its own background snapshot"


@pytest.mark.parametrize("ours_provider", backends_default_on_every_line())
def test_state_data_source_reads_our_state(spark, agg_input, tmp_path, ours_provider):
    _run(spark, ours_provider, agg_input, tmp_path / "ours")
    _run(spark, HDFS_PROVIDER, agg_input, tmp_path / "hdfs")
    if running_line().name == "3.5":  # Spark's reader is 4.0+: spark-state's inspect counts the rows instead
        assert [op["rows"] for op in ops.inspect(str(tmp_path / "ours"))["operators"]] == [40]
        return

    def state(path, batch_id=None):
        reader = spark.read.format("statestore")
        if batch_id is not None:
            reader = reader.option("batchId", batch_id)
        # The reader's provider uses the reading session's backend: read with the one that wrote.
        _, confs = split_provider(ours_provider)
        for key, value in confs.items():
            spark.conf.set(key, value)
        try:
            rows = reader.load(str(path)).collect()
        finally:
            for key in confs:
                spark.conf.unset(key)
        return sorted((r.key.k, tuple(r.value), r.partition_id) for r in rows)

    ours, reference = state(tmp_path / "ours"), state(tmp_path / "hdfs")
    assert len(ours) == 40 and ours == reference
    # An older batch is readable too (the reader asks for version batchId + 1).
    older = state(tmp_path / "ours", batch_id=1)
    assert older == state(tmp_path / "hdfs", batch_id=1) and older != ours


def test_operator_state_reads_as_sparks_reader_from_checkpoints_and_savepoints(spark, agg_input, tmp_path, capsys):
    """read_spark_operator_state of an aggregation on spark-state's provider, from its checkpoint (last and an
    earlier batch) and from a savepoint, equals Spark's own reader on the same query's HDFS checkpoint."""
    from spark_state.state_data import StateDataError, read_spark_operator_state

    _run(spark, SPARKSTATE_PROVIDER, agg_input, tmp_path / "ours")
    _run(spark, HDFS_PROVIDER, agg_input, tmp_path / "hdfs")
    ops.savepoint(str(tmp_path / "ours"), str(tmp_path / "sp"), progress=False)

    def rows(df):
        return sorted((tuple(r.key), tuple(r.value), r.partition_id) for r in df.collect())

    reference = rows(spark.read.format("statestore").load(str(tmp_path / "hdfs")))
    assert len(reference) == 40
    assert rows(read_spark_operator_state(spark, str(tmp_path / "ours"))) == reference
    assert rows(read_spark_operator_state(spark, str(tmp_path / "sp"))) == reference
    assert rows(read_spark_operator_state(spark, str(tmp_path / "ours"), batch=1)) == rows(
        spark.read.format("statestore").option("batchId", 1).load(str(tmp_path / "hdfs")))
    with pytest.raises(StateDataError, match="omit batch"):
        read_spark_operator_state(spark, str(tmp_path / "sp"), batch=1)
    # the command line: every row as it comes, or the first rows and Spark's count
    from spark_state.cli import main

    assert main(["read", str(tmp_path / "sp"), "--operator-id", "0", "--limit", "0", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["total"] == 40 and sorted(
        (tuple(r["key"].values()), tuple(r["value"].values()), r["partition_id"]) for r in printed["rows"]) == reference
    assert main(["read", str(tmp_path / "ours"), "--operator-id", "0", "--limit", "5", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert (printed["total"], len(printed["rows"])) == (40, 5)


def _dedup_within_watermark(df):
    """Deduplication whose state the watermark evicts: the change feed has deletes too."""
    return (df.withColumn("ts", F.timestamp_seconds("v")).withWatermark("ts", "10 seconds")
            .dropDuplicates(["k", "ts"]))


@pytest.mark.parametrize("query", ["aggregation", pytest.param("dedup", marks=pytest.mark.lines)])
def test_sparks_change_feed_of_our_state_equals_sparks_rocksdb_provider(spark, agg_input, tmp_path, query):
    """Spark's statestore reader with readChangeFeed, on spark-state's provider and on Spark's RocksDB
    provider (changelog checkpointing) after the same query: the same rows -- batch, change type, key,
    value, partition -- over every batch and over a range; deletes included (the dedup's evictions).

    spark-state's changelogs hold each batch's net change per key; RocksDB's log holds every write. A
    key the dedup stores and evicts in the same batch is an update and a delete there, a delete here:
    RocksDB's feed is compared by its last row per batch and key (the aggregation has no such key)."""
    if running_line().name == "3.5":
        pytest.skip("Spark 3.5's statestore reader has no change feed (readChangeFeed is Spark 4.0+)")
    build, mode = {"aggregation": (_aggregate, "update"), "dedup": (_dedup_within_watermark, "append")}[query]

    def run(provider, checkpoint, confs=None):
        run_query(spark, build, provider_class=provider, input_dir=agg_input, schema=SCHEMA,
                  checkpoint_dir=str(checkpoint), output_mode=mode, extra_confs=confs)

    run(SPARKSTATE_PROVIDER, tmp_path / "ours")
    run(ROCKSDB_PROVIDER, tmp_path / "rocksdb",
        {"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true"})

    def feed(checkpoint, start=0, end=None, net=False):
        reader = (spark.read.format("statestore").option("readChangeFeed", "true")
                  .option("changeStartBatchId", start))
        if end is not None:
            reader = reader.option("changeEndBatchId", end)
        rows = [(r.batch_id, r.change_type, tuple(r.key), None if r.value is None else tuple(r.value), r.partition_id)
                for r in reader.load(str(checkpoint)).collect()]  # each partition's rows in its log's order
        if net:
            rows = list({(r[0], r[2], r[4]): r for r in rows}.values())
        return sorted(rows)

    ours = feed(tmp_path / "ours")
    rocksdb = feed(tmp_path / "rocksdb", net=True)
    assert ours == rocksdb
    assert {r[0] for r in ours} == set(range(5)) and len(ours) >= 40
    if query == "aggregation":
        assert ours == feed(tmp_path / "rocksdb")  # every write is the batch's last of its key
    else:
        assert any(r[1] == "delete" for r in ours)
    assert feed(tmp_path / "ours", 2, 3) == feed(tmp_path / "rocksdb", 2, 3, net=True) == [
        r for r in ours if 2 <= r[0] <= 3]


def test_stored_keys_carry_sparks_partitioning_hash(spark, agg_input, tmp_path):
    """Every stored key is [key group u16][Spark hash i32][UnsafeRow]; the hash is Spark's own."""
    _run(spark, SPARKSTATE_PROVIDER, agg_input, tmp_path / "ours")
    seen = 0
    for changelog in glob.glob(str(tmp_path / "ours" / "state" / "0" / "*" / "changelogs" / "*.arrow")):
        partition = int(changelog.split(os.sep)[-3])
        with pa.memory_map(changelog) as source:
            keys = pa.ipc.open_file(source).read_all().column("key").to_pylist()
        for stored in keys:
            kg = int.from_bytes(stored[:2], "big")
            hash32 = int.from_bytes(stored[2:6], "big", signed=True)
            k = int.from_bytes(stored[14:22], "little", signed=True)  # UnsafeRow: 8-byte null bitset, then k
            assert hash32 == spark_hash([k], ["long"])
            assert spark_partition_id(hash32, PARTITIONS) == partition
            assert kg == spark_key_group(hash32, 32768)
            seen += 1
    assert seen >= 40


def test_stored_hash_is_sparks_for_int_string_and_other_key_columns(spark, tmp_path):
    """The shim hashes int, long and string key columns without Spark's generic hash function
    (no boxing per state access); every other type goes through Spark's. A key of an int, a
    string and a double column checks both paths and their chaining against Spark's `hash()`."""
    schema = StructType([StructField("i", IntegerType()), StructField("s", StringType()),
                         StructField("d", DoubleType())])
    words = ["", "a", "key", "ünïcödé", "a much longer string key than eight bytes", None]
    rows = [{"i": (n * 7919) % 1000 - 500 if n % 9 else None, "s": words[n % len(words)], "d": n / 4}
            for n in range(60)]
    write_batches(tmp_path / "in", [rows], schema)
    run_query(spark, lambda df: df.groupBy("i", "s", "d").count(), provider_class=SPARKSTATE_PROVIDER,
              input_dir=tmp_path / "in", schema=schema, checkpoint_dir=tmp_path / "ours", output_mode="update")
    expected = {}
    for r in rows:
        values = [r["i"], r["s"], r["d"]]
        expected[tuple(values)] = spark_hash(values, ["int", "string", "double"])
    seen = set()
    for changelog in glob.glob(str(tmp_path / "ours" / "state" / "0" / "*" / "changelogs" / "*.arrow")):
        with pa.memory_map(changelog) as source:
            keys = pa.ipc.open_file(source).read_all().column("key").to_pylist()
        for stored in keys:
            hash32 = int.from_bytes(stored[2:6], "big", signed=True)
            row = stored[6:]  # UnsafeRow of 3 fields: 8-byte null bitset, three 8-byte slots, then the string
            nulls = int.from_bytes(row[:8], "little")
            i = None if nulls & 1 else int.from_bytes(row[8:12], "little", signed=True)
            if nulls & 2:
                s = None
            else:
                slot = int.from_bytes(row[16:24], "little")
                offset, size = slot >> 32, slot & 0xFFFFFFFF
                s = row[offset:offset + size].decode()
            d = None if nulls & 4 else struct.unpack("<d", row[24:32])[0]
            assert hash32 == expected[(i, s, d)], (i, s, d)
            seen.add((i, s, d))
    assert seen == set(expected)


def _failure_message(excinfo) -> str:
    return str(excinfo.value)


def test_checkpoint_format_v2_is_rejected_clearly(spark, agg_input, tmp_path):
    with pytest.raises(StreamingQueryException) as excinfo:
        _run(spark, SPARKSTATE_PROVIDER, agg_input, tmp_path / "v2",
             extra_confs={"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"})
    message = _failure_message(excinfo)
    assert "UnsupportedOperationException: spark-state does not support checkpoint format v2" in message, message
    assert "checkpointFormatVersion=1" in message


def test_unknown_option_fails_the_query_naming_it(spark, agg_input, tmp_path):
    with pytest.raises(StreamingQueryException) as excinfo:
        _run(spark, SPARKSTATE_PROVIDER, agg_input, tmp_path / "bad",
             extra_confs={"spark.sql.streaming.stateStore.sparkState.snapshotIntervl": "3"})
    message = _failure_message(excinfo)
    assert "ConfigError: unknown spark-state option 'spark.sql.streaming.stateStore.sparkState.snapshotIntervl'" in message


# --- a Python worker that dies in the middle of a batch ------------------------------------
def _killing_count(marker_dir: str, kill_on_every_attempt: bool):
    """A per-key running count with applyInPandasWithState whose function kills the spark-state
    worker in batch 2. The state updates come back with the function's output, so the kill is
    certain to happen after the store was loaded and before it is committed."""

    def count(key, pdfs, state):
        # Self-contained (imports inside): Python workers cannot import this test module.
        import os
        import signal
        import subprocess

        import pandas as pd
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.getLocalProperty("streaming.sql.batchId") == "2" and ctx.partitionId() == 0:
            marker = os.path.join(marker_dir, f"attempt-{ctx.attemptNumber()}")
            if (kill_on_every_attempt or ctx.attemptNumber() == 0) and not os.path.exists(marker):
                open(marker, "w").close()
                # Only this application's workers: the JVM above this Python worker started them
                # (other Spark applications on the machine keep theirs).
                jvm = os.getppid()
                while jvm > 1 and "java" not in open(f"/proc/{jvm}/cmdline", "rb").read().decode(errors="replace"):
                    jvm = int(open(f"/proc/{jvm}/stat").read().rsplit(")", 1)[1].split()[1])
                out = subprocess.run(["pgrep", "-P", str(jvm), "-f", "spark_state.provider.worker"],
                                     capture_output=True, text=True)
                assert out.stdout.split(), f"no spark-state worker under the JVM (pid {jvm}) to kill"
                for pid in out.stdout.split():
                    os.kill(int(pid), signal.SIGKILL)
        total = (state.get[0] if state.exists else 0) + sum(len(p) for p in pdfs)
        state.update((total,))
        yield pd.DataFrame({"k": [key[0]], "n": [total]})

    def build(df):
        return df.groupBy("k").applyInPandasWithState(
            count, "k long, n long", "n long", "update", GroupStateTimeout.NoTimeout)

    return build


def _run_killing(spark, provider, agg_input, checkpoint, markers, every_attempt):
    return run_query(spark, _killing_count(str(markers), every_attempt), provider_class=provider,
                     input_dir=agg_input, schema=SCHEMA, checkpoint_dir=checkpoint, output_mode="update")


@pytest.mark.parametrize("ours_provider", backends_default_on_every_line())
def test_worker_killed_between_load_and_commit_is_replaced_transparently(spark, agg_input, tmp_path,
                                                                          ours_provider):
    """The commit finds the worker gone, starts a new one, which restores the loaded version from
    checkpoint storage and applies the epoch's writes: no task fails, nothing is lost."""
    (tmp_path / "m-ref").mkdir()
    (tmp_path / "m").mkdir()
    reference = _run_killing(spark, HDFS_PROVIDER, agg_input, tmp_path / "hdfs", tmp_path / "m-ref", False)
    ours = _run_killing(spark, ours_provider, agg_input, tmp_path / "ours", tmp_path / "m", False)
    assert os.listdir(tmp_path / "m") == ["attempt-0"]  # the worker really was killed, once
    assert ours.batches == reference.batches
    assert max(r[1] for r in ours.rows()) > 2  # counts span batches: state was carried over
    restored = sum(op["customMetrics"]["sparkStateRestoresFromCheckpoint"]
                   for b in ours.batch_ids if b >= 2 for op in ours.state_operators(b))
    assert restored >= 1  # the new worker restored from checkpoint storage


def _crash_conf(markers, mode: str) -> dict:
    return {"spark.sql.streaming.stateStore.sparkState.testing.crashOnCommit": f"3:{markers}:{mode}"}


def test_worker_crash_during_commit_fails_the_task_and_the_retry_recovers(spark, agg_input, tmp_path,
                                                                           ours_provider):
    markers = tmp_path / "m"
    markers.mkdir()
    reference = _run(spark, HDFS_PROVIDER, agg_input, tmp_path / "hdfs")
    ours = _run(spark, ours_provider, agg_input, tmp_path / "ours", extra_confs=_crash_conf(markers, "once"))
    assert len(os.listdir(markers)) == 1  # the worker crashed in the middle of committing version 3
    assert ours.batches == reference.batches


def test_a_worker_that_keeps_crashing_fails_the_query_with_a_clear_message(spark, agg_input, tmp_path):
    markers = tmp_path / "m"
    markers.mkdir()
    with pytest.raises(StreamingQueryException) as excinfo:
        _run(spark, SPARKSTATE_PROVIDER, agg_input, tmp_path / "ours", extra_confs=_crash_conf(markers, "always"))
    message = _failure_message(excinfo)
    assert "SparkStateException: spark-state Python worker (pid " in message, message
    # The failing task names the call it was making when the worker died: its own commit of
    # version 3, or -- a worker serves several partitions -- its load of version 2 while another
    # partition's commit crashed that worker.
    assert re.search(r"spark-state Python worker \(pid \d+, log [^)]+\) died during "
                     r"(committing version 3|loading version 2) of \S+ \(exit code 99\)", message), message
    assert "restores the state from the checkpoint" in message
    assert len(os.listdir(markers)) >= 4  # every attempt (local[2,4]) crashed its worker


# --- switching backend between two runs of one query ----------------------------------------
@pytest.mark.parametrize("first,second", [(SPARKSTATE_PROVIDER, SPARKSTATE_HASHMAP),
                                          (SPARKSTATE_HASHMAP, SPARKSTATE_PROVIDER)],
                         ids=["rocksdb-then-hashmap", "hashmap-then-rocksdb"])
def test_switching_backend_at_a_restart_keeps_the_state(spark, tmp_path, first, second):
    """Both backends write the same checkpoints (the worker's store is RocksDB-backed either way):
    a query stopped on one and restarted on the other continues with every count exact."""
    batches = [[{"k": (b * 7 + i) % 40, "v": i} for i in range(60)] for b in range(6)]
    write_batches(tmp_path / "in", batches[:3], SCHEMA)
    reference_in = tmp_path / "ref-in"
    write_batches(reference_in, batches, SCHEMA)
    reference = _run(spark, HDFS_PROVIDER, str(reference_in), tmp_path / "hdfs")
    one = _run(spark, first, str(tmp_path / "in"), tmp_path / "ours")
    write_batches(tmp_path / "in", batches[3:], SCHEMA, start=3)
    two = _run(spark, second, str(tmp_path / "in"), tmp_path / "ours")
    assert one.batch_ids == [0, 1, 2] and two.batch_ids == [3, 4, 5]
    assert {**one.batches, **two.batches} == reference.batches
    assert [op["numRowsTotal"] for b in two.batch_ids for op in two.state_operators(b)] == \
        [op["numRowsTotal"] for b in two.batch_ids for op in reference.state_operators(b)]


def test_heap_state_past_its_budget_fails_the_query_naming_the_conf(spark, agg_input, tmp_path):
    """The hashmap backend keeps state in the executor's heap: past heap.maxBytes a task fails with
    a message that names the conf and the ways out, instead of the JVM running out of memory."""
    with pytest.raises(StreamingQueryException) as excinfo:
        _run(spark, SPARKSTATE_HASHMAP, agg_input, tmp_path / "ours",
             extra_confs={"spark.sql.streaming.stateStore.sparkState.heap.maxBytes": "2k"})
    message = _failure_message(excinfo)
    assert "SparkStateException: spark-state: the heap state of this executor would grow to" in message
    assert "spark.sql.streaming.stateStore.sparkState.heap.maxBytes (0.0 MB)" in message
    assert "backend=rocksdb" in message

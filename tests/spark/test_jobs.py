"""Spark jobs that need a Spark of their own, run in a subprocess: two executor JVMs
(local-cluster), and an executor Python without spark-state."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.spark

JOBS = os.path.join(os.path.dirname(__file__), "jobs")


def _run_job(script: str, *args: str, timeout: int = 600) -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, os.path.join(JOBS, script), *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"{script} printed no result (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-6000:]}")


def test_two_executors_each_run_a_worker_and_moved_partitions_restore(tmp_path):
    result = _run_job("cluster_job.py", str(tmp_path))
    assert result["counts_match"], result
    assert result["keys"] == 97 and result["total"] == 2400
    assert result["workers_before_kill"] == 2  # one Python worker per executor JVM
    assert result["killed"] is not None and result["killed"] not in result["executors_after_kill"]
    after_kill = {int(b): n for b, n in result["restores"].items() if int(b) >= 3}
    # Partitions of the removed executor were restored from checkpoint storage on the other one,
    # and their loads say so: time, and a snapshot's files (linked from the local checkpoint or
    # fetched) or changelogs replayed.
    assert sum(after_kill.values()) >= 1, result
    for b, n in after_kill.items():
        loads = result["loads"][str(b)]
        if n:
            assert loads["sparkStateLoadTimeMs"] > 0, loads
            assert (loads["sparkStateLoadFilesLinked"] + loads["sparkStateLoadFilesFetched"] > 0
                    or loads["sparkStateChangelogBytesReplayed"] > 0), loads


def test_the_plugin_starts_the_workers_with_the_executor_and_the_query_uses_them(tmp_path):
    result = _run_job("prestart_job.py", str(tmp_path), "true")
    assert result["counts_ok"], result
    # Both workers run before any query asked for a store, and the query ran on those very
    # processes (a worker started or restarted for it would have another pid).
    assert len(result["before"]) == 2 and result["after"] == result["before"], result
    assert result["with_pandas"] == [], "provider workers loaded pandas (they start faster without)"
    # Compactions run at the lowest CPU priority (rocksdb.compactionNice, default 19), flushes do not.
    assert result["compaction_nices"] and set(result["compaction_nices"]) == {19}, result
    assert result["flush_nices"] and set(result["flush_nices"]) == {0}, result
    assert result["published_slots"] == 2, result  # the plugin told the executor's Python processes: local[2]


def test_without_prestart_the_workers_start_at_the_first_store_load(tmp_path):
    result = _run_job("prestart_job.py", str(tmp_path), "false", "7")
    assert result["counts_ok"], result
    assert result["before"] == [] and len(result["after"]) == 2, result
    assert result["compaction_nices"] and set(result["compaction_nices"]) == {7}, result  # the conf reached them


def test_executor_python_without_spark_state_gives_a_clear_error(tmp_path):
    # An interpreter that cannot see the project's packages: the same Python, isolated (-I) and
    # without site-packages (-S).
    bad = tmp_path / "python-without-spark-state"
    bad.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    bad.chmod(0o755)
    message = _run_job("failing_setup_job.py", str(tmp_path), "python", str(bad))["message"]
    assert "spark_state.provider.worker" in message and str(bad) in message
    assert "does not have spark-state installed" in message
    assert "spark.pyspark.python" in message


def test_workers_per_executor_that_is_not_a_number_gives_a_clear_error(tmp_path):
    message = _run_job("failing_setup_job.py", str(tmp_path), "workers", "abc")["message"]
    assert "spark.sql.streaming.stateStore.sparkState.workersPerExecutor must be a whole number" in message
    assert "got 'abc'" in message and "NumberFormatException" not in message


#: Distinct keys in one micro-batch on a 512 MB driver: without spilling, the provider's pending
#: writes of this batch ended in OutOfMemoryError (3M keys at 512 MB, as 10M at 1 GB).
BIG_BATCH_KEYS = 3_000_000


def _assert_big_batch_continued(result: dict) -> None:
    assert result["error"] is None, result["error"]
    assert result["batches"] == [0, 1]
    assert result["rows"] == {"0": BIG_BATCH_KEYS, "1": 2000}
    assert result["batch0_all_ones"], "batch 0 counts every key once"
    # batch 1: the 1,000 keys seen in batch 0 count twice, the 1,000 new ones once
    assert result["batch1"] == {"2": 1000, "1": 1000}, result["batch1"]
    assert result["state_rows"] == [BIG_BATCH_KEYS, BIG_BATCH_KEYS + 1000]


def test_a_batch_of_millions_of_keys_spills_on_a_small_heap_and_the_next_batch_continues(tmp_path):
    """The first big batch after an outage, on the provider's rocksdb backend: 3M distinct keys on a
    512 MB driver complete (the pending writes spill to local disk), and batch 1 continues the counts."""
    result = _run_job("big_batch_job.py", str(tmp_path), "rocksdb", str(BIG_BATCH_KEYS), timeout=900)
    _assert_big_batch_continued(result)
    assert result["spills"][0] > 0, "batch 0 was meant to spill"
    # What the operator reports stays within the executor's memory budget's parts besides the heap
    # maps (4/12 of the budget: a quarter of 512 MB), not the size of the batch (about 300 MB of keys
    # and counts).
    assert 0 < result["memory_used_bytes"][0] < 128 * 2**20, result["memory_used_bytes"]
    # Its heap part is the stores' pending-writes peaks: each store spills past its share of the
    # budget's heap part (32 MB in all, two task slots), so the 4 stores' peaks stay within 4 x 16 MB
    # and a little for the last write before a spill, whatever the batch.
    heap = result["heap_bytes"][0]
    assert 0 < heap <= result["memory_used_bytes"][0] and heap < 4 * 18 * 2**20, result["heap_bytes"]


def test_hashmap_state_past_its_heap_budget_fails_with_a_message_not_out_of_memory(tmp_path):
    """The hashmap backend keeps all state in the heap: 3M keys on a 512 MB driver pass its
    heap.maxBytes budget, and the task fails saying so, before the JVM runs out of heap."""
    result = _run_job("big_batch_job.py", str(tmp_path), "hashmap", str(BIG_BATCH_KEYS), timeout=900)
    error = result["error"] or ""
    assert "spark.sql.streaming.stateStore.sparkState.heap.maxBytes" in error, error[:2000]
    assert "backend=rocksdb" in error and "OutOfMemoryError" not in error, error[:2000]


def test_keyed_process_takes_millions_of_keys_in_one_batch_within_its_memory_share(tmp_path):
    """keyed_process over the same batches: its stores' pending writes spill past their share of the
    budget (32 MB a process here, the smallest threshold), and batch 1 continues the counts."""
    result = _run_job("big_batch_job.py", str(tmp_path), "keyed", str(BIG_BATCH_KEYS), timeout=900)
    _assert_big_batch_continued(result)
    # A PySpark worker holds its interpreter, pyarrow and RocksDB (about 160 MB before any row) and
    # one Arrow batch of rows; with the epoch held in a dict it peaked at 600 MB (measured).
    assert 0 < result["peak_rss"]["pyspark_workers"] < 400 * 2**20, result["peak_rss"]
    # Its figures count the state's memory, summed over the 4 tasks as Spark sums memoryUsedBytes:
    # each task's share of its process's RocksDB memory (a process's part is 16 MB here) and its
    # pending writes' peak (they spill past 32 MB), not the batch (about 500 MB of dict entries).
    assert 0 < result["memory_used_bytes"][0] < 4 * (16 + 32 + 4) * 2**20, result["memory_used_bytes"]


def _write_kill_input(workdir, batches: int = 12) -> dict[int, list[int]]:
    """One JSON file per micro-batch; returns the expected [count, sum] per key."""
    expected: dict[int, list[int]] = {}
    rng = random.Random(11)
    os.makedirs(os.path.join(workdir, "input"))
    for b in range(batches):
        path = os.path.join(workdir, "input", f"b{b:03d}.json")
        with open(path, "w") as f:
            for _ in range(300):
                k, v = rng.randrange(50), rng.randrange(100)
                entry = expected.setdefault(k, [0, 0])
                entry[0] += 1
                entry[1] += v
                f.write(json.dumps({"k": k, "v": v}) + "\n")
        os.utime(path, (1_700_000_000 + 10 * b,) * 2)
    return expected


def test_sigkill_mid_stream_then_restart_gives_the_state_of_a_run_without_failure(tmp_path):
    """Exactly-once under a real kill: the whole Spark process tree (driver and executor JVM,
    Python workers) is SIGKILLed while the stream runs, then the query restarts from its checkpoint."""
    workdir = str(tmp_path)
    expected = _write_kill_input(workdir)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    job = [sys.executable, os.path.join(JOBS, "kill_job.py"), workdir]
    first = subprocess.Popen(job + ["run"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env=env, start_new_session=True)
    seen = []
    deadline = time.monotonic() + 300
    for line in first.stdout:  # kill as soon as a few batches went through
        if line.startswith("BATCH "):
            seen.append(int(line.split()[1]))
        if len(seen) >= 4 or time.monotonic() > deadline:
            break
    time.sleep(random.Random(3).uniform(0.2, 1.0))  # land somewhere inside the next batch
    os.killpg(first.pid, signal.SIGKILL)
    first.wait(timeout=60)
    assert len(seen) >= 4, "the first run did not get far enough before the kill"
    assert len(os.listdir(os.path.join(workdir, "ckpt", "commits"))) < 12  # killed mid-stream

    second = subprocess.run(job + ["run"], capture_output=True, text=True, env=env, timeout=600)
    assert "DONE" in second.stdout, second.stderr[-4000:]
    state = _run_job("kill_job.py", workdir, "verify")["state"]
    assert {int(k): v for k, v in state.items()} == expected
    # The restarted process had no local state: each of the 3 stores was restored from the
    # checkpoint, and its load says from what (a snapshot's files, fetched or linked, and changelogs).
    loads = json.loads(next(line for line in second.stdout.splitlines() if line.startswith("LOADS "))[6:])
    assert loads["sparkStateRestoresFromCheckpoint"] == 3, loads
    assert loads["sparkStateLoadTimeMs"] > 0
    snapshot_files = loads["sparkStateLoadFilesLinked"] + loads["sparkStateLoadFilesFetched"]
    assert snapshot_files > 0 or loads["sparkStateChangelogBytesReplayed"] > 0, loads
    assert (loads["sparkStateLoadBytesFetched"] > 0) == (loads["sparkStateLoadFilesFetched"] > 0), loads

"""Real streaming queries (``keyed_process`` with its state on S3 behind the fault proxy):
transient faults do not fail a single task and the output equals a Python model; a
persistent fault fails the query with a message naming the store, the file and the cause,
and after the fault is lifted a restart from the same checkpoint continues exactly."""

from __future__ import annotations

import random
import re

import pytest
from pyspark.errors import StreamingQueryException

import process_fns
from process_fns import ALL_STATES_OUTPUT, INPUT_SCHEMA, AllStates, expected_all_states
from spark_state.process import keyed_process
from streaming_harness import HDFS_PROVIDER, merge_runs, run_query, ship_module_by_value, write_batches

pytestmark = [pytest.mark.spark, pytest.mark.s3]

BATCHES = 5
PARALLELISM = 2


@pytest.fixture(scope="module")
def keyed_input(tmp_path_factory):
    ship_module_by_value(process_fns)
    rng = random.Random(11)
    batches = [[(f"k{rng.randrange(40)}", rng.randrange(0, 25)) for _ in range(60)] for _ in range(BATCHES)]
    root = tmp_path_factory.mktemp("faults-keyed-input")
    write_batches(root, batches, INPUT_SCHEMA)
    return str(root), expected_all_states(batches)


def _run(spark, input_dir, checkpoint, s3, **kwargs):
    def build(df):
        return keyed_process(df, "k", AllStates(), ALL_STATES_OUTPUT, parallelism=PARALLELISM,
                             state_location=s3.url, storage_options=s3.options)

    return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=input_dir, schema=INPUT_SCHEMA,
                     checkpoint_dir=checkpoint, output_mode="append", **kwargs)


def _failed_tasks(spark, run_id: str) -> int:
    """Failed task attempts in the jobs of one query run (Spark tags them with the run id)."""
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job in tracker.getJobIdsForGroup(run_id):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info else ():
            stage_info = tracker.getStageInfo(stage)
            failed += stage_info.numFailedTasks if stage_info else 0
    return failed


def test_transient_s3_faults_do_not_fail_a_task_and_the_output_is_exact(spark, keyed_input, proxied_s3, tmp_path):
    input_dir, expected = keyed_input
    proxy = proxied_s3.proxy
    for op in ("PutObject", "GetObject", "HeadObject", "ListObjectsV2"):
        proxy.add("drop", ops={op}, limit=1)  # every kind of request the tasks make is hit at least once
    # ... then about one request in eight (each fault costs seconds of backoff; the engine test
    # runs a quarter of all requests failing)
    for kind, share in (("slowdown", 0.03), ("internal", 0.03), ("drop", 0.025), ("lose-reply", 0.025),
                        ("cut-body", 0.025)):
        proxy.add(kind, share=share)
    run = _run(spark, input_dir, str(tmp_path / "ckpt"), proxied_s3)
    assert run.batches == expected
    assert _failed_tasks(spark, run.run_id) == 0  # the storage layer absorbed every fault
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup(run.run_id)) >= BATCHES  # (it looked)
    assert proxy.injected() >= 8, len(proxy.records)
    # Every kind of request the run made was hit (listings happen only when a worker has no
    # cached store, so whether there were any depends on how Spark placed the tasks).
    hit_first = {"PutObject", "GetObject", "HeadObject", "ListObjectsV2"}
    assert proxy.faulted_ops() >= proxy.ops_seen() & hit_first >= {"PutObject", "GetObject", "HeadObject"}
    print(f"\n{len(proxy.records)} requests, {proxy.injected()} faults injected")


def test_a_persistent_fault_fails_the_query_clearly_and_a_restart_continues_exactly(spark, keyed_input, proxied_s3,
                                                                                    tmp_path):
    input_dir, expected = keyed_input
    ckpt = str(tmp_path / "ckpt")
    first = _run(spark, input_dir, ckpt, proxied_s3, stop_after_batches=2)
    assert first.batch_ids == [0, 1]

    proxied_s3.proxy.add("deny", ops={"PutObject"})  # the bucket policy changed under the query
    with pytest.raises(StreamingQueryException) as info:
        _run(spark, input_dir, ckpt, proxied_s3)
    message = str(info.value)
    assert "AccessDenied (HTTP 403)" in message and "was denied" in message
    # The class: StorageError, wrapped in StateLocationError when the task was opening the location.
    assert re.search(r"(StorageError: |StateLocationError: state location \S+ is not usable: )"
                     r"S3 checkpoint storage \S+: write \S+ was denied", message), message
    # The store (a partition's store, or the state location when the task was opening it) ...
    store = re.search(rf"S3 checkpoint storage ({re.escape(proxied_s3.url)}\S*):", message)
    assert store, message
    # ... and the file: the batch's changelog, or the location's metadata a new worker checks.
    assert re.search(rf"{re.escape(store.group(1))}/(changelogs/3-\S+\.arrow|_operator\.json) was denied",
                     message), message

    proxied_s3.proxy.clear()
    second = _run(spark, input_dir, ckpt, proxied_s3)
    assert second.batch_ids == [2, 3, 4]
    assert merge_runs(first, second) == expected

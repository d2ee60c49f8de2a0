"""Spark's built-in aggregation on spark-state's provider, with the Python worker's working
directory (``...sparkState.localDir``) on a tiny real file system that fills up between two
runs: the tasks fail with a message naming the store, the directory and "No space left on
device"; once space is freed, a restart continues with output equal to Spark's HDFS provider."""

from __future__ import annotations

import glob
import os
import re

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructField, StructType

from faults.tinyfs import needs_mount
from streaming_harness import HDFS_PROVIDER, SPARKSTATE_PROVIDER, merge_runs, run_query, write_batches

pytestmark = pytest.mark.spark

SCHEMA = StructType([StructField("k", LongType()), StructField("v", LongType())])
LOCAL_DIR_CONF = "spark.sql.streaming.stateStore.sparkState.localDir"


@pytest.fixture(scope="module")
def agg_input(tmp_path_factory):
    root = tmp_path_factory.mktemp("disk-full-input")
    write_batches(root, [[{"k": (b * 7 + i) % 40, "v": i} for i in range(60)] for b in range(5)], SCHEMA)
    return str(root)


def _run(spark, provider, input_dir, checkpoint, **kwargs):
    def aggregate(df):
        return df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))

    return run_query(spark, aggregate, provider_class=provider, input_dir=input_dir, schema=SCHEMA,
                     checkpoint_dir=checkpoint, output_mode="update", **kwargs)


@needs_mount
def test_a_full_local_disk_fails_the_tasks_clearly_and_a_restart_after_freeing_space_continues(
        spark, agg_input, tinyfs_factory, tmp_path):
    disk = tinyfs_factory("worker-local", 32 << 20)
    confs = {LOCAL_DIR_CONF: disk.path}
    ckpt = tmp_path / "ours"
    reference = _run(spark, HDFS_PROVIDER, agg_input, tmp_path / "hdfs")

    first = _run(spark, SPARKSTATE_PROVIDER, agg_input, ckpt, extra_confs=confs, stop_after_batches=2)
    assert first.batch_ids == [0, 1]
    # The worker works there, in its process directory (localdirs): <localDir>/spark-state-*/store-*.
    assert glob.glob(os.path.join(disk.path, "spark-state-*", "store-*"))

    disk.fill()
    with pytest.raises(StreamingQueryException) as info:
        _run(spark, SPARKSTATE_PROVIDER, agg_input, ckpt, extra_confs=confs)
    message = str(info.value)
    assert "No space left on device" in message, message
    assert "LocalDiskError: " in message, message
    assert re.search(rf"store file://{re.escape(str(ckpt))}/state/0/\d+: ", message), message  # the store
    assert f"on {disk.path}" in message and "local working directory" in message  # the directory
    assert LOCAL_DIR_CONF in message  # and what to do

    disk.free()
    second = _run(spark, SPARKSTATE_PROVIDER, agg_input, ckpt, extra_confs=confs)
    assert second.batch_ids == [2, 3, 4]
    assert merge_runs(first, second) == reference.batches

"""A version committed by an attempt whose batch never reached Spark's commit log is never read
by a later batch -- for the provider and for keyed_process, at the same or another parallelism,
whatever the function computes (the runs here are deliberately non-deterministic: each run adds
its own "salt", so reading an abandoned attempt's state would show in the output)."""

from __future__ import annotations

import glob
import os
import random
from collections import defaultdict

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

import reliability_fns
from reliability_fns import SaltedSum, failing_partition_udf, salt_udf
from spark_state.process import keyed_process
from streaming_harness import HDFS_PROVIDER, SPARKSTATE_PROVIDER, run_query, ship_module_by_value, write_batches

pytestmark = pytest.mark.spark

NUM_BATCHES = 5


@pytest.fixture(scope="module", autouse=True)
def _ship():
    ship_module_by_value(reliability_fns)


def _batches(key_type=int):
    rng = random.Random(17)
    return [[(key_type(rng.randrange(20)) if key_type is int else f"k{rng.randrange(20)}", rng.randrange(1, 50))
             for _ in range(40)] for _ in range(NUM_BATCHES)]


def _expected_running(batches, salts, emit_all_keys=False):
    """Per batch: sorted (key, running total of v + salt of the run that committed the batch)."""
    totals: dict = defaultdict(int)
    out = {}
    for b, rows in enumerate(batches):
        per_batch = []
        for k, v in rows:
            totals[k] += v + salts[b]
            per_batch.append((k, totals[k]))
        out[b] = sorted(per_batch)
    return out


def _set(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def test_provider_never_reads_state_of_a_batch_that_failed_part_way(spark, tmp_path):
    schema = StructType([StructField("k", LongType()), StructField("v", LongType())])
    batches = _batches()
    write_batches(tmp_path / "in", batches, schema)
    salt, fail = str(tmp_path / "salt"), str(tmp_path / "fail")
    ckpt = tmp_path / "ckpt"

    def build(df):
        out = df.withColumn("v", salt_udf(salt)("v")).groupBy("k").agg(F.sum("v").alias("total"))
        return out.withColumn("k", failing_partition_udf(fail, 0, "bigint")("k"))

    def run(**kw):
        return run_query(spark, build, provider_class=SPARKSTATE_PROVIDER, input_dir=tmp_path / "in", schema=schema,
                         checkpoint_dir=ckpt, output_mode="update", **kw)

    _set(salt, 1000)
    _set(fail, 2)  # batch 2 fails in partition 0, after the other partitions committed
    with pytest.raises(StreamingQueryException, match="RuntimeError: injected failure of partition 0 in batch 2"):
        run()
    abandoned = glob.glob(str(ckpt / "state" / "0" / "*" / "manifests" / "3.r*.json"))
    assert abandoned, "no partition committed batch 2 before the batch failed: the test proves nothing"
    first_batches = sorted(int(n) for n in os.listdir(ckpt / "commits") if n.isdigit())
    assert first_batches == [0, 1]

    _set(salt, 0)  # the re-run computes something else
    os.remove(fail)
    second = run()
    assert second.batch_ids == [2, 3, 4]
    want = _expected_running(batches, [1000, 1000, 0, 0, 0])
    got = {b: rows for b, rows in second.batches.items()}
    # update mode emits each updated key once per batch, with its running total
    assert got == {b: sorted({k: t for k, t in want[b]}.items()) for b in (2, 3, 4)}


def test_keyed_process_never_reads_an_abandoned_rescale(spark, tmp_path):
    """Batches 0-1 at parallelism 4; batch 2 at parallelism 3 fails after some partitions
    committed; batch 2 is re-run at parallelism 4 (another salt); batches 3-4 run at
    parallelism 3 again and must rescale from the re-run, not from the abandoned layout."""
    schema = StructType([StructField("k", StringType()), StructField("v", LongType())])
    batches = _batches(str)
    write_batches(tmp_path / "in", batches, schema)
    salt, fail = str(tmp_path / "salt"), str(tmp_path / "fail")
    ckpt, state = tmp_path / "ckpt", str(tmp_path / "state")

    def run(parallelism, **kw):
        def build(df):
            out = keyed_process(df, "k", SaltedSum(salt), "k string, total bigint", parallelism=parallelism,
                                state_location=state)
            return out.withColumn("k", failing_partition_udf(fail, 0)("k"))

        return run_query(spark, build, provider_class=HDFS_PROVIDER, input_dir=tmp_path / "in", schema=schema,
                         checkpoint_dir=ckpt, output_mode="append", **kw)

    _set(salt, 1000)
    first = run(4, stop_after_batches=2)
    _set(fail, 2)
    with pytest.raises(StreamingQueryException, match="RuntimeError: injected failure of partition 0 in batch 2"):
        run(3)
    abandoned = glob.glob(os.path.join(state, "stores", "p3-b2", "*", "manifests", "1.r*.json"))
    assert abandoned, "no partition of the rescaled batch committed: the test proves nothing"
    os.remove(fail)
    _set(salt, 0)
    third = run(4, stop_after_batches=1)
    fourth = run(3)
    assert (first.batch_ids, third.batch_ids, fourth.batch_ids) == ([0, 1], [2], [3, 4])
    got = {**first.batches, **third.batches, **fourth.batches}
    assert got == _expected_running(batches, [1000, 1000, 0, 0, 0])

"""State as data (spark_state.state_data) at scale: read throughput and point-lookup latency of a
keyed function's state, on local disk and S3.

The state is a real query's: ``keyed_process`` keeps a running count per key (value state
``count``) over ``--keys`` distinct keys, written by ``--files`` micro-batches at parallelism
``--parallelism``. Then, on the query's checkpoint (state beside it):

* **read**: ``read_keyed_state(spark, checkpoint, "count")`` summed over every row (keys/s, in
  the same ``local[2]`` session that ran the query; best of ``--reads``);
* **bootstrap**: ``SavepointWriter`` from the same input read as a batch DataFrame: the keyed count's
  state (keys/s; the streaming query above is the alternative, reading the history as a stream),
  and an aggregation's state (``groupBy("k").count()``, Spark's operator on spark-state's provider, the
  whole history in one micro-batch) against the same one-batch aggregation on Spark's RocksDB
  provider over the same files (``--no-bootstrap`` skips both);

* **cold**: ``spark_state.state_data.readers.lookup(checkpoint, "count", key)``, a new reader per lookup,
  as ``spark-state get`` does: it loads the one partition store that holds the key (its snapshot
  and the changelogs after it) into a fresh local directory;
* **warm**: one ``StateLookup`` asked for ``--warm`` random keys: each partition is loaded once,
  then every lookup reads the local copy (and Spark's commit log, for the last committed batch).

The same again with the checkpoint copied to an S3 server (``--s3-endpoint``, default: a moto
server started here on loopback). Prints p50/p99 per case and writes ``--json``.

    python bench/state_data_bench.py --keys 10000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from typing import Optional

from harness import inputs, moto, queries, results, sessions
from harness.contenders import PROVIDER_CONF, ROCKSDB_PROVIDER
from harness.stats import latency_ms


def write_input(root: str, keys: int, files: int) -> None:
    import numpy as np
    import pyarrow as pa

    per_file = -(-keys // files)

    def table(f: int):
        ks = np.arange(f * per_file, min(keys, (f + 1) * per_file), dtype=np.int64)
        return pa.table({"k": ks, "v": ks % 97})

    inputs.write_batches(root, files, table, name="part-{b:04d}.parquet")


def run_query(input_dir: str, checkpoint: str, parallelism: int, keys: int, reads: int,
              bootstrap_dir: Optional[str]) -> tuple[float, list[float], dict]:
    """The keyed count over every file (availableNow), then ``reads`` full reads of its state,
    then the bootstraps (into ``bootstrap_dir``, unless None); returns the query's wall time, each
    read's (s) and the bootstrap figures."""
    from pyspark.sql import functions as F

    import spark_state
    from harness.keyed_fns import RunningCount  # the keyed count: value state "count" per key
    from spark_state.state_data import read_keyed_state

    spark = sessions.start(sessions.builder("state-data-bench", spark_state=True, partitions=parallelism))
    started = time.perf_counter()
    df = queries.file_stream(spark, "k bigint, v bigint", input_dir)
    out = spark_state.keyed_process(df, "k", RunningCount(), "k bigint, n bigint", parallelism=parallelism,
                                    name="Counts")
    queries.start_to_noop(out, checkpoint, mode="append").awaitTermination()
    seconds = time.perf_counter() - started
    read_seconds = []
    for _ in range(reads):
        t = time.perf_counter()
        rows, total = read_keyed_state(spark, checkpoint, "count").agg(F.count("*"), F.sum("value")).first()
        read_seconds.append(time.perf_counter() - t)
        assert rows == keys and total == keys, (rows, total)
    figures = bootstrap(spark, input_dir, bootstrap_dir, parallelism, keys) if bootstrap_dir else {}
    spark.stop()
    return seconds, read_seconds, figures


def bootstrap(spark, input_dir: str, work: str, parallelism: int, keys: int) -> dict:
    """Bootstrap throughput (see the module docstring)."""
    from harness.keyed_fns import RunningCount
    from spark_state.state_data import SavepointWriter

    history = spark.read.parquet(input_dir)
    t = time.perf_counter()
    result = SavepointWriter(spark, progress=False).with_keyed_state(
        "Counts", history, "k", RunningCount(), parallelism=parallelism
    ).write(os.path.join(work, "keyed"), sources=2)
    keyed_s = time.perf_counter() - t
    assert result.keyed["Counts"]["rows"] == keys, result
    t = time.perf_counter()
    print(json.dumps({"keyed_bootstrap_seconds": round(keyed_s, 1)}), flush=True)
    result = SavepointWriter(spark, progress=False).with_spark_operators(
        history, lambda s: s.groupBy("k").count()).write(os.path.join(work, "aggregation"), sources=1)
    aggregation_s = time.perf_counter() - t
    assert result.operators[0]["keys"] == keys, result
    # Spark's RocksDB provider, the same one-batch aggregation over the history files
    spark.conf.set(PROVIDER_CONF, ROCKSDB_PROVIDER)
    try:
        t = time.perf_counter()
        counts = spark.readStream.schema(history.schema).parquet(input_dir).groupBy("k").count()
        queries.start_to_noop(counts, os.path.join(work, "spark-rocksdb")).awaitTermination()
        spark_s = time.perf_counter() - t
    finally:
        spark.conf.unset(PROVIDER_CONF)
    return {"keyed_seconds": round(keyed_s, 1), "keyed_keys_per_second": round(keys / keyed_s),
            "aggregation_seconds": round(aggregation_s, 1),
            "aggregation_keys_per_second": round(keys / aggregation_s),
            "spark_rocksdb_aggregation_seconds": round(spark_s, 1),
            "aggregation_ratio_to_spark_rocksdb": round(spark_s / aggregation_s, 2)}


def measure(checkpoint: str, keys: int, cold: int, warm: int, options: dict) -> dict:
    from spark_state.state_data import StateLookup, lookup

    rng = random.Random(3)
    cold_ms = []
    for _ in range(cold):
        k = rng.randrange(keys)
        t = time.perf_counter()
        result = lookup(checkpoint, "count", k, storage_options=options)
        cold_ms.append((time.perf_counter() - t) * 1000)
        assert result.found and result.value == 1, result
    warm_ms = []
    with StateLookup(checkpoint, storage_options=options) as states:
        t = time.perf_counter()
        parallelism = len({states.lookup("count", k).partition for k in range(64)})  # loads each partition once
        first_ms = (time.perf_counter() - t) * 1000
        for _ in range(warm):
            k = rng.randrange(keys)
            t = time.perf_counter()
            value = states.get("count", k)
            warm_ms.append((time.perf_counter() - t) * 1000)
            assert value == 1, (k, value)
    return {"cold": latency_ms(cold_ms), "warm": latency_ms(warm_ms),
            "warm_first_load_all_partitions_ms": round(first_ms, 1), "partitions": parallelism}


def upload(local: str, endpoint: str) -> str:
    bucket = moto.create_bucket(endpoint, "state-data")
    client = moto.client(endpoint)
    for root, _, files in os.walk(local):
        for name in files:
            path = os.path.join(root, name)
            client.upload_file(path, bucket, "ckpt/" + os.path.relpath(path, local))
    return f"s3://{bucket}/ckpt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=10_000_000)
    ap.add_argument("--files", type=int, default=10, help="micro-batches that write the keys")
    ap.add_argument("--parallelism", type=int, default=4)
    ap.add_argument("--reads", type=int, default=2, help="full reads of the state (best is reported)")
    ap.add_argument("--cold", type=int, default=10, help="cold lookups (a new reader each)")
    ap.add_argument("--warm", type=int, default=5000, help="warm lookups (one reader)")
    ap.add_argument("--s3-endpoint", help="an S3 endpoint (default: a moto server started here)")
    ap.add_argument("--no-s3", action="store_true")
    ap.add_argument("--no-bootstrap", action="store_true")
    ap.add_argument("--no-lookups", action="store_true", help="reads and bootstraps only")
    ap.add_argument("--json")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="state-data-bench-")
    try:
        write_input(os.path.join(work, "in"), args.keys, args.files)
        checkpoint = os.path.join(work, "ckpt")
        boot_dir = None if args.no_bootstrap else os.path.join(work, "bootstrap")
        query_s, read_s, boot = run_query(os.path.join(work, "in"), checkpoint, args.parallelism, args.keys,
                                          args.reads, boot_dir)
        state_dir = os.path.join(checkpoint, "spark-state")
        state_bytes = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(state_dir) for f in fs)
        result = {"keys": args.keys, "files": args.files, "parallelism": args.parallelism,
                  "query_seconds": round(query_s, 1), "state_bytes": state_bytes,
                  "read_seconds": [round(x, 2) for x in read_s],
                  "read_keys_per_second": round(args.keys / min(read_s)) if read_s else None,
                  "bootstrap": boot}
        print(json.dumps(result), flush=True)
        if not args.no_lookups:
            result["local"] = measure(checkpoint, args.keys, args.cold, args.warm, {})
            print(json.dumps(result["local"]), flush=True)
        if not args.no_s3 and not args.no_lookups:
            proc, endpoint = (None, args.s3_endpoint) if args.s3_endpoint else moto.start_server()
            try:
                url = upload(checkpoint, endpoint)
                result["s3"] = measure(url, args.keys, args.cold, args.warm, moto.storage_options(endpoint))
            finally:
                if proc is not None:
                    proc.terminate()
        print(json.dumps(result, indent=1))
        if args.json:
            results.write_json(args.json, result)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Operations benchmark: savepoint, restore and in-place rescale of a provider query's state,
next to the time to rebuild the same state by reprocessing its input.

For each ``--keys`` K (default 1M and 10M): a ``dropDuplicates(["id"])`` query on spark-state's
provider (``--partitions`` partitions, ``local[2]``) reads K distinct ids in files of
``--rows-per-batch`` rows (one micro-batch each, ``availableNow``) into the ``noop`` sink, so
its state ends with K keys. That run's wall time is the *rebuild* time: what recovering the
state without a savepoint costs (reprocessing the input). Then, timed separately:

* ``savepoint``  -- the checkpoint's state into a canonical savepoint (the query stopped);
* ``restore``    -- the savepoint into a new checkpoint at the same partition count;
* ``restore+``   -- the savepoint into a new checkpoint at ``--partitions + 2`` (re-split);
* ``rescale``    -- the restored checkpoint in place to ``--partitions - 1``.

Each reports seconds, keys/s and MB/s (savepoint bytes / seconds: the state's canonical size).
One run per size; numbers depend on the machine's load.

Usage: python bench/ops_bench.py [--keys 1000000,10000000] [--partitions 4] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def build_input(directory: str, keys: int, rows_per_batch: int) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(directory, exist_ok=True)
    files = 0
    for start in range(0, keys, rows_per_batch):
        ids = pa.array(range(start, min(keys, start + rows_per_batch)), pa.int64())
        path = os.path.join(directory, f"batch-{files:05d}.parquet")
        pq.write_table(pa.table({"id": ids, "v": ids}), path)
        os.utime(path, (1_700_000_000 + files * 10, 1_700_000_000 + files * 10))
        files += 1
    return files


def run_dedup(spark, input_dir: str, checkpoint: str) -> float:
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType([StructField("id", LongType()), StructField("v", LongType())])
    started = time.perf_counter()
    query = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(input_dir)
             .dropDuplicates(["id"]).writeStream.format("noop").option("checkpointLocation", checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return time.perf_counter() - started


def measure(keys: int, partitions: int, rows_per_batch: int, work: str, spark) -> dict:
    from spark_state import ops

    inp = os.path.join(work, "in")
    build_input(inp, keys, rows_per_batch)
    ck = os.path.join(work, "ck")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    rebuild = run_dedup(spark, inp, ck)
    result = {"keys": keys, "partitions": partitions, "rebuild_s": round(rebuild, 2),
              "rebuild_keys_per_s": round(keys / rebuild)}

    def timed(name, fn):
        started = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - started
        result[name] = {"s": round(seconds, 2), "keys_per_s": round(keys / seconds),
                        "MB_per_s": round(result.get("savepoint_bytes", 0) / seconds / 1e6, 1),
                        "vs_rebuild": round(rebuild / seconds, 2)}
        return out

    sp = timed("savepoint", lambda: ops.savepoint(ck, os.path.join(work, "sp"), progress=False))
    result["savepoint_bytes"] = sp.bytes
    result["savepoint"]["MB_per_s"] = round(sp.bytes / result["savepoint"]["s"] / 1e6, 1)
    assert sp.keys == keys, f"savepoint holds {sp.keys} keys, expected {keys}"
    timed("restore", lambda: ops.restore(sp.savepoint, os.path.join(work, "r1"), progress=False))
    timed("restore_resplit", lambda: ops.restore(sp.savepoint, os.path.join(work, "r2"),
                                                 partitions=partitions + 2, progress=False))
    timed("rescale", lambda: ops.rescale(os.path.join(work, "r1"), max(1, partitions - 1), progress=False))
    shutil.rmtree(work, ignore_errors=True)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", default="1000000,10000000")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rows-per-batch", type=int, default=1_000_000)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    import spark_state

    spark = (spark_state.configure(SparkSession.builder.master("local[2]"))
             .config("spark.ui.enabled", "false").config("spark.driver.memory", "4g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    results = []
    for keys in (int(k) for k in args.keys.split(",")):
        work = tempfile.mkdtemp(prefix=f"ops-bench-{keys}-")
        r = measure(keys, args.partitions, args.rows_per_batch, work, spark)
        results.append(r)
        print(json.dumps(r), flush=True)
    print(f"\n| keys | rebuild (reprocess) | savepoint | restore | restore at {args.partitions + 2} | "
          f"rescale to {max(1, args.partitions - 1)} |")
    print("|---|---|---|---|---|---|")
    for r in results:
        cells = [f"{r['rebuild_s']} s, {r['rebuild_keys_per_s'] / 1e3:.0f}k keys/s"]
        for name in ("savepoint", "restore", "restore_resplit", "rescale"):
            m = r[name]
            cells.append(f"{m['s']} s, {m['keys_per_s'] / 1e3:.0f}k keys/s, {m['MB_per_s']} MB/s")
        print(f"| {r['keys']:,} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

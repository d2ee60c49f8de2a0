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

from harness import inputs, queries, results, sessions


def build_input(directory: str, keys: int, rows_per_batch: int) -> int:
    """Files of ``rows_per_batch`` distinct ids (``id``, ``v = id``) until ``keys``; returns how many."""
    import pyarrow as pa

    files = -(-keys // rows_per_batch)

    def table(b: int):
        ids = pa.array(range(b * rows_per_batch, min(keys, (b + 1) * rows_per_batch)), pa.int64())
        return pa.table({"id": ids, "v": ids})

    inputs.write_batches(directory, files, table, name="batch-{b:05d}.parquet")
    return files


def run_dedup(spark, input_dir: str, checkpoint: str) -> float:
    started = time.perf_counter()
    df = queries.file_stream(spark, "id bigint, v bigint", input_dir)
    queries.start_to_noop(df.dropDuplicates(["id"]), checkpoint, mode="append").awaitTermination()
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

    spark = sessions.start(sessions.builder("ops-bench", spark_state=True, partitions=None, driver_memory="4g"))
    figures = []
    for keys in (int(k) for k in args.keys.split(",")):
        work = tempfile.mkdtemp(prefix=f"ops-bench-{keys}-")
        r = measure(keys, args.partitions, args.rows_per_batch, work, spark)
        figures.append(r)
        print(json.dumps(r), flush=True)
    print(f"\n| keys | rebuild (reprocess) | savepoint | restore | restore at {args.partitions + 2} | "
          f"rescale to {max(1, args.partitions - 1)} |")
    print("|---|---|---|---|---|---|")
    for r in figures:
        cells = [f"{r['rebuild_s']} s, {r['rebuild_keys_per_s'] / 1e3:.0f}k keys/s"]
        for name in ("savepoint", "restore", "restore_resplit", "rescale"):
            m = r[name]
            cells.append(f"{m['s']} s, {m['keys_per_s'] / 1e3:.0f}k keys/s, {m['MB_per_s']} MB/s")
        print(f"| {r['keys']:,} | " + " | ".join(cells) + " |")
    if args.json:
        results.write_json(args.json, figures)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

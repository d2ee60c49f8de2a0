"""Lost-executor benchmark: what losing an executor JVM in the middle of a stream costs, on
spark-state's provider and on Spark's RocksDB provider, with the state checked afterwards.

Workload: ``groupBy("k").count()`` (update mode) on ``local-cluster[2,1,1024]`` (two executor JVMs of
one core and 1 GB each), 4 shuffle partitions. Batch 0 builds the state (``--keys`` distinct keys),
then batches of ``--updates`` existing keys follow. Right after batch ``--kill-after`` commits, the
sink SIGKILLs one executor JVM (the standalone worker starts a new one), so the next batch must
bring that executor's stores up on another executor: from checkpoint storage, as after any loss.
Reported per provider: the median batch before the kill, the time from the kill to the next
committed batch, and whether the state afterwards holds every key with its exact count (read with
Spark's ``statestore`` data source).

Usage: python bench/lost_executor_bench.py [--providers sparkstate,rocksdb] [--keys 2000000]
           [--updates 200000] [--batches 6] [--kill-after 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

import large_state_bench as L  # its input writer
from harness import results, sessions, workers
from harness.contenders import contender


def run_worker(spec: dict) -> None:
    """One application: the stream, the kill, and the check; one JSON line to ``spec['result']``."""
    import psutil

    from pyspark.sql import functions as F

    spark = sessions.start(sessions.builder(f"lost-executor-{spec['provider']}", master="local-cluster[2,1,1024]",
                                            contender=contender(spec["provider"])))
    sc = spark.sparkContext
    deadline = time.time() + 120
    while len([e for e in sc._jsc.sc().getExecutorIds().mkString(",").split(",") if e]) < 2 and time.time() < deadline:
        time.sleep(0.5)
    committed: dict[int, float] = {}
    killed: dict = {}

    def sink(df, batch_id: int) -> None:
        df.count()
        committed[batch_id] = time.monotonic()
        if batch_id == spec["kill_after"]:
            executors = [p for p in psutil.Process().children(recursive=True)
                         if "CoarseGrainedExecutorBackend" in " ".join(p.cmdline())]
            killed["pid"] = executors[0].pid
            killed["at"] = time.monotonic()
            os.kill(executors[0].pid, signal.SIGKILL)

    q = (spark.readStream.schema("k bigint").option("maxFilesPerTrigger", 1).parquet(spec["input_dir"])
         .groupBy("k").count().writeStream.outputMode("update").foreachBatch(sink)
         .option("checkpointLocation", spec["checkpoint"]).trigger(availableNow=True).start())
    q.awaitTermination()
    ids = sorted(committed)
    before = [committed[b] - committed[b - 1] for b in ids if 1 < b <= spec["kill_after"]]
    after = next(b for b in ids if b > spec["kill_after"])
    state = spark.read.format("statestore").load(spec["checkpoint"]).agg(F.count("*"), F.sum("value.count")).first()
    out = {"batch_before_s": statistics.median(before), "kill_to_commit_s": committed[after] - killed["at"],
           "keys": state[0], "total": state[1]}
    spark.stop()
    workers.write_result(spec["result"], out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", default="sparkstate,rocksdb")
    parser.add_argument("--keys", type=int, default=2_000_000)
    parser.add_argument("--updates", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=6, help="batches in all, the state's first one included")
    parser.add_argument("--kill-after", type=int, default=2)
    parser.add_argument("--json")
    workers.add_worker_option(parser)
    args = parser.parse_args(argv)
    if workers.serve(args, run_worker):
        return 0
    import numpy as np

    work = tempfile.mkdtemp(prefix="lost-executor-")
    inputs = os.path.join(work, "in")
    os.makedirs(inputs)
    rng = np.random.default_rng(3)
    L.write_keys(os.path.join(inputs, "batch-0000.parquet"),
                 lambda c: rng.permutation(np.arange(c, args.keys, 1, dtype=np.int64)), 1, 0)
    for b in range(1, args.batches):
        L.write_keys(os.path.join(inputs, f"batch-{b:04d}.parquet"),
                     lambda _: rng.choice(args.keys, size=args.updates, replace=False).astype(np.int64), 1, b)
    expected_total = args.keys + (args.batches - 1) * args.updates
    figures = {}
    try:
        for name in args.providers.split(","):
            spec = {"provider": name, "input_dir": inputs, "checkpoint": os.path.join(work, f"ckpt-{name}"),
                    "result": os.path.join(work, f"{name}.json"), "kill_after": args.kill_after}
            started = time.monotonic()
            done = workers.run(__file__, spec, spec["result"] + ".log", cap_s=1800)
            res = workers.read_result(spec["result"])
            if res is None:
                tail = done.log_tail(drop_stack=True)
                figures[name] = {"error": tail}
                print(f"  {name}: failed:\n{tail}", flush=True)
                continue
            res["state_right"] = res["keys"] == args.keys and res["total"] == expected_total
            figures[name] = res
            print(f"  {name}: batch before the kill {res['batch_before_s']:.1f} s, kill to the next commit "
                  f"{res['kill_to_commit_s']:.1f} s, state right afterwards: {res['state_right']} "
                  f"({time.monotonic() - started:.0f} s in all)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    names = [n for n in figures if "error" not in figures[n]]
    if len(names) == 2:
        a, b = (figures[n]["kill_to_commit_s"] for n in names)
        print(f"{names[0]} / {names[1]}, kill to the next commit: {a / b:.2f}")
    if args.json:
        results.write_json(args.json, {"settings": results.settings(args), "results": figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())

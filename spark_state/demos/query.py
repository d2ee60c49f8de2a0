"""The main demo: a streaming word count on spark-state's provider, stopped, its Python worker
killed, and restarted from its checkpoint -- with exactly the counts a failure-free run gives.

Checkpoints go to a local directory (``./demo-checkpoint``), the embedded default; pass
``--checkpoint s3://...`` or ``hdfs://...`` for remote storage. ``--engine`` runs the smaller
demo that drives the engine directly, without Spark.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

from ..spark.lines import running_line

WORDS = ("state", "stream", "spark", "flink", "epoch", "barrier", "key", "group", "snapshot", "changelog")


def _write_input(input_dir: str, batches: int, rows: int, seed: int = 7) -> collections.Counter:
    """One JSON-lines file per micro-batch (increasing mtimes keep the file source's order)."""
    rng = random.Random(seed)
    expected: collections.Counter = collections.Counter()
    os.makedirs(input_dir, exist_ok=True)
    for b in range(batches):
        path = os.path.join(input_dir, f"batch-{b:04d}.json")
        with open(path, "w") as f:
            for _ in range(rows):
                word = f"{rng.choice(WORDS)}-{rng.randrange(500)}"
                expected[word] += 1
                f.write(json.dumps({"word": word}) + "\n")
        os.utime(path, (1_700_000_000 + b * 10, 1_700_000_000 + b * 10))
    return expected


def _kill_state_workers() -> int:
    out = subprocess.run(["pgrep", "-f", "spark_state.provider.worker"], capture_output=True, text=True).stdout
    pids = [int(p) for p in out.split()]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    return len(pids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_state demo", description=__doc__)
    parser.add_argument("--checkpoint", default="demo-checkpoint")
    parser.add_argument("--batches", type=int, default=6)
    parser.add_argument("--rows", type=int, default=20_000, help="rows per micro-batch")
    parser.add_argument("--engine", action="store_true", help="run the engine-only demo instead")
    args, rest = parser.parse_known_args(argv)
    if args.engine:
        from .engine import main as engine_main

        return engine_main(rest + ["--checkpoint", args.checkpoint])

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from ..spark.session import configure

    if "://" not in args.checkpoint:
        shutil.rmtree(args.checkpoint, ignore_errors=True)
    input_dir = os.path.abspath("demo-input")
    shutil.rmtree(input_dir, ignore_errors=True)
    expected = _write_input(input_dir, args.batches, args.rows)

    print("spark-state demo: streaming word count on the spark-state provider "
          f"(checkpoints in {args.checkpoint}); building/locating the shim jar and starting Spark…", flush=True)
    spark = configure(SparkSession.builder.master("local[2]").appName("spark-state-demo")
                      .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
                      .config("spark.ui.showConsoleProgress", "false")).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    counts: dict[str, int] = {}

    def sink(batch_df, batch_id: int) -> None:
        for row in batch_df.collect():
            counts[row["word"]] = row["count"]

    def run() -> None:
        query = (spark.readStream.schema("word string").option("maxFilesPerTrigger", 1).json(input_dir)
                 .groupBy("word").count()
                 .writeStream.outputMode("update").foreachBatch(sink)
                 .option("checkpointLocation", args.checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()
        for p in query.recentProgress:
            if not p["stateOperators"]:
                continue
            op = p["stateOperators"][0]
            m = op["customMetrics"]
            print(f"  batch {p['batchId']}: {p['numInputRows']} rows in, {op['numRowsTotal']} keys in state, "
                  f"{op['numRowsUpdated']} updated; commit {m.get('sparkStateCommitTimeMs')} ms, "
                  f"changelog {m.get('sparkStateChangelogBytes')} B, "
                  f"restored from checkpoint: {m.get('sparkStateRestoresFromCheckpoint')}", flush=True)

    first = args.batches // 2
    hidden = sorted(os.listdir(input_dir))[first:]
    for name in hidden:  # the second half "arrives" after the failure
        os.rename(os.path.join(input_dir, name), os.path.join(input_dir, "." + name))
    started = time.time()
    print(f"run 1: batches 0..{first - 1}")
    run()
    killed = _kill_state_workers()
    print(f"-- simulated failure: query stopped, {killed} spark-state Python worker(s) killed (local state lost)")
    for name in hidden:
        os.rename(os.path.join(input_dir, "." + name), os.path.join(input_dir, name))
    print(f"run 2: restart from the checkpoint, batches {first}..{args.batches - 1}")
    run()
    if running_line().name == "3.5":  # Spark's state data source is 4.0+; spark-state's inspect reads it too
        from ..ops import inspect

        state_rows, source = sum(op["rows"] for op in inspect(args.checkpoint)["operators"]), "spark-state inspect"
    else:
        state_rows, source = spark.read.format("statestore").load(args.checkpoint).count(), "state data source"
    spark.stop()
    ok = counts == dict(expected)
    print(f"{source}: {state_rows} keys; {len(counts)} word counts, "
          f"{sum(counts.values())} words, {time.time() - started:.1f} s")
    if not ok:
        print("FAILED: counts differ from the input", file=sys.stderr)
        return 1
    print("OK: every count equals the input's (exactly-once across the restart and the lost worker)")
    return 0

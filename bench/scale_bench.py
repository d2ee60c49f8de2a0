"""Large-state benchmark: ``dropDuplicates`` growing to 10M keys on a 1 GB driver heap.

Workload: ``dropDuplicates(["id"])`` (append mode, no watermark) over a file stream where every
micro-batch carries ``--keys-per-batch`` (default 1M) ids never seen before, until the state
holds ``--batches x --keys-per-batch`` keys (default 10 x 1M = 10M). ``local[2]``,
``spark.sql.shuffle.partitions=4``, ``spark.driver.memory=1g`` (in local mode the executor is
the driver, so that is the heap the state lives in for the in-memory providers).

Providers: ``sparkstate`` (this project's provider, ``backend=rocksdb``), ``sparkstate-hashmap``
(``backend=hashmap``: the state in the JVM heap, so at this size it is expected to stop with
its ``heap.maxBytes`` error, not an OutOfMemoryError), ``rocksdb`` and ``hdfs`` (Spark's). Each
runs in its own process (fresh JVM, same input), one after the other; ``--rounds`` repeats
them in rotated order.

Reported per provider: batches completed, median batch time (``triggerExecution``), the
slowest batch as a multiple of the median (``max/median``; also without the first batch, which
in a cold JVM also pays for class loading, the JIT and Spark's code generation: ``max/med>1``),
and the JVM heap: the largest used heap sampled every 0.5 s, and the largest old-generation size after a collection (the live set, which is what "flat" is about);
per batch, the JVM's garbage-collection time (all collectors) and the state operator's commit
time (``commitTimeMs``, summed over its tasks). ``--conf KEY=VALUE`` (repeatable) sets a Spark
conf for every run, e.g. a spark-state option to compare settings. ``--jvm-warmup`` first runs,
in the same JVM, the same query over 3 small batches (a tenth of ``--keys-per-batch`` each, its
own input and checkpoint, not reported), so that the measured query's first batch is that of a
query started on a warm executor (a long-running cluster, a restarted query) rather than one
that also pays for the JVM's start: class loading, the JIT, Spark's code generation.
A provider that fails (the HDFS provider runs out of memory near 4M keys) is reported up to
its last completed batch; ``--cap-s`` bounds every run, so a JVM that thrashes in GC instead
of failing does not stall the benchmark.

Usage:
    python bench/scale_bench.py [--providers sparkstate,rocksdb,hdfs] [--batches 10]
        [--keys-per-batch 1000000] [--cap-s 900] [--conf KEY=VALUE ...] [--jvm-warmup] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "sparkstate": "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider",
    "sparkstate-hashmap": "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider",
}
BACKEND_CONF = "spark.sql.streaming.stateStore.sparkState.backend"


def generate_inputs(out: str, batches: int, keys: int) -> None:
    """``batches`` parquet files of ``keys`` fresh ids each (ids ``b*keys .. (b+1)*keys-1``, shuffled)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(11)
    for b in range(batches):
        ids = np.arange(b * keys, (b + 1) * keys, dtype=np.int64)
        rng.shuffle(ids)
        table = pa.table({"id": ids, "v": rng.integers(0, 1000, size=keys, dtype=np.int64)})
        tmp = os.path.join(out, f".tmp-{b}")
        pq.write_table(table, tmp)
        mtime = 1_700_000_000 + 10 * b  # the file source orders files by modification time
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, os.path.join(out, f"batch-{b:04d}.parquet"))


def run_worker(spec: dict) -> None:
    """One provider's run; appends one JSON line per completed batch to ``spec['result']``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession, types as T

    builder = (SparkSession.builder.master("local[2]").appName(f"scale-bench-{spec['provider']}")
               .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", spec["driver_memory"]))
    if spec["provider"].startswith("sparkstate"):
        from spark_state import configure

        builder = configure(builder) or builder
        builder = builder.config(BACKEND_CONF, "hashmap" if spec["provider"] == "sparkstate-hashmap" else "rocksdb")
    builder = builder.config("spark.sql.streaming.stateStore.providerClass", PROVIDERS[spec["provider"]])
    for key, value in spec.get("confs", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    jvm = spark._jvm
    runtime = jvm.java.lang.Runtime.getRuntime()
    management = jvm.java.lang.management.ManagementFactory
    old_gen = [p for p in management.getMemoryPoolMXBeans()
               if "Old Gen" in p.getName() or "Tenured" in p.getName()]
    collectors = list(management.getGarbageCollectorMXBeans())
    peaks = {"heap": 0, "old_after_gc": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                peaks["heap"] = max(peaks["heap"], runtime.totalMemory() - runtime.freeMemory())
                for pool in old_gen:
                    usage = pool.getCollectionUsage()
                    if usage is not None:
                        peaks["old_after_gc"] = max(peaks["old_after_gc"], usage.getUsed())
            except Exception:  # the JVM is going away
                return
            stop.wait(0.5)

    schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("v", T.LongType())])

    def start(input_dir: str, checkpoint: str):
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(input_dir)
        return (df.dropDuplicates(["id"]).writeStream.format("noop").outputMode("append")
                .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())

    if spec.get("warmup_dir"):
        start(spec["warmup_dir"], spec["checkpoint"] + "-warmup").awaitTermination()
        # Unload the warm-up's stores, so that the measured query starts with none in the heap.
        jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()
    gc_base = sum(c.getCollectionTime() for c in collectors)  # this query's GC only
    query = start(spec["input_dir"], spec["checkpoint"])
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    seen = -1
    try:
        while True:
            done = query.awaitTermination(1)
            for p in query.recentProgress:
                if p.batchId <= seen or "triggerExecution" not in (p.durationMs or {}):
                    continue
                seen = p.batchId
                ops = p.stateOperators or []
                custom = [dict(op.customMetrics or {}) for op in ops]
                line = {"batch": p.batchId, "input_rows": p.numInputRows, "trigger_ms": p.durationMs["triggerExecution"],
                        "duration_ms": dict(p.durationMs),
                        "state_rows": sum(op.numRowsTotal for op in ops),
                        "commit_ms": sum(op.commitTimeMs for op in ops),
                        "memory_used_bytes": sum(op.memoryUsedBytes for op in ops),
                        "sparkstate_commit_ms": sum(c.get("sparkStateCommitTimeMs", 0) for c in custom),
                        "gc_ms_total": sum(c.getCollectionTime() for c in collectors) - gc_base,
                        "heap_peak_bytes": peaks["heap"], "old_after_gc_peak_bytes": peaks["old_after_gc"]}
                peaks["heap"] = 0  # per batch from here on
                with open(spec["result"], "a") as out:
                    out.write(json.dumps(line) + "\n")
            if done:
                break
    except Exception as exc:
        with open(spec["result"], "a") as out:
            out.write(json.dumps({"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}) + "\n")
    finally:
        stop.set()
        try:
            spark.stop()
        except Exception:
            pass


def summarize(lines: list[dict]) -> dict:
    batches = [b for b in lines if "batch" in b and b["input_rows"] > 0]
    errors = [b["error"] for b in lines if "error" in b]
    if not batches:
        return {"batches": 0, "error": errors[0] if errors else None}
    times = [b["trigger_ms"] for b in batches]
    median = statistics.median(times)
    return {
        "batches": len(batches), "final_state_rows": batches[-1]["state_rows"],
        "median_ms": median, "max_ms": max(times), "max_over_median": max(times) / median,
        # the first batch also pays for the JVM's class loading, JIT and Spark's code generation
        "max_over_median_after_first": max(times[1:]) / median if len(times) > 1 else None,
        "heap_peak_mb": max(b["heap_peak_bytes"] for b in batches) / 2**20,
        "heap_peak_per_batch_mb": [round(b["heap_peak_bytes"] / 2**20) for b in batches],
        "old_gen_after_gc_peak_mb": max(b["old_after_gc_peak_bytes"] for b in batches) / 2**20,
        "times_ms": times, "error": errors[0] if errors else None,
        # GC time during each batch (the JVM's total since the query started, differenced), and
        # each batch's state commit time summed over its tasks
        "gc_ms_per_batch": [b["gc_ms_total"] - (batches[i - 1]["gc_ms_total"] if i else 0)
                            for i, b in enumerate(batches)],
        "commit_ms_per_batch": [b["commit_ms"] for b in batches],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", default="sparkstate,rocksdb,hdfs")
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--keys-per-batch", type=int, default=1_000_000)
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cap-s", type=float, default=900, help="longest a provider's run may take")
    parser.add_argument("--workdir")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark conf for every run")
    parser.add_argument("--jvm-warmup", action="store_true",
                        help="run a small query of the same provider in the same JVM first (not reported)")
    parser.add_argument("--json")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._worker:
        run_worker(json.loads(args._worker))
        return 0

    confs = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"--conf takes KEY=VALUE, got {item!r}")
        confs[key.strip()] = value.strip()
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    for p in providers:
        if p not in PROVIDERS:
            parser.error(f"unknown provider {p!r}; one of {', '.join(PROVIDERS)}")
    workdir = args.workdir or tempfile.mkdtemp(prefix="scale-bench-")
    results: dict[str, list[dict]] = {}
    try:
        started = time.monotonic()
        generate_inputs(os.path.join(workdir, "in"), args.batches, args.keys_per_batch)
        if args.jvm_warmup:  # a query and checkpoint of its own: its ids may repeat the measured ones
            generate_inputs(os.path.join(workdir, "warmup"), 3, max(1, args.keys_per_batch // 10))
        print(f"input: {args.batches} x {args.keys_per_batch:,} new ids, generated in "
              f"{time.monotonic() - started:.0f} s; driver heap {args.driver_memory}, local[2], 4 partitions"
              + ("; each JVM warmed first by 3 x {:,} ids".format(max(1, args.keys_per_batch // 10))
                 if args.jvm_warmup else "; cold JVMs"))
        for rnd in range(args.rounds):
            for name in providers[rnd % len(providers):] + providers[:rnd % len(providers)]:
                tag = f"{name}-r{rnd}"
                spec = {"provider": name, "input_dir": os.path.join(workdir, "in"), "driver_memory": args.driver_memory,
                        "checkpoint": os.path.join(workdir, "ckpt", tag),
                        "result": os.path.join(workdir, f"{tag}.jsonl"), "confs": confs,
                        "warmup_dir": os.path.join(workdir, "warmup") if args.jvm_warmup else None}
                t = time.monotonic()
                with open(os.path.join(workdir, f"{tag}.log"), "w") as log:
                    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_worker", json.dumps(spec)],
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                    try:
                        proc.wait(timeout=args.cap_s)
                    except subprocess.TimeoutExpired:
                        os.killpg(proc.pid, 9)  # its own session: the JVM and Python workers go too
                        proc.wait()
                        with open(spec["result"], "a") as out:
                            out.write(json.dumps({"error": f"stopped after the {args.cap_s:.0f} s cap"}) + "\n")
                lines = []
                if os.path.exists(spec["result"]):
                    with open(spec["result"]) as f:
                        lines = [json.loads(line) for line in f if line.strip()]
                s = summarize(lines)
                results.setdefault(name, []).append(s)
                print(f"  {tag}: {s['batches']} batches in {time.monotonic() - t:.0f} s"
                      + (f"; stopped: {s['error'][:300]}" if s.get("error") else ""), flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{'provider':<20}{'batches':>8}{'keys':>12}{'median s':>10}{'max/med':>9}{'max/med>1':>11}{'heap MB':>9}{'old gen MB':>11}")
    base = results.get("rocksdb", [{}])[0]
    for name, runs in results.items():
        for s in runs:
            if not s["batches"]:
                print(f"{name:<20} no batch completed: {s.get('error')}")
                continue
            print(f"{name:<20}{s['batches']:>8}{s['final_state_rows']:>12,}{s['median_ms'] / 1000:>10.2f}"
                  f"{s['max_over_median']:>9.2f}{s['max_over_median_after_first'] or 0:>11.2f}{s['heap_peak_mb']:>9.0f}{s['old_gen_after_gc_peak_mb']:>11.0f}")
            print(f"{'':<20}batch s: {[round(t / 1000, 1) for t in s['times_ms']]}; heap MB per batch: "
                  f"{s['heap_peak_per_batch_mb']}")
            print(f"{'':<20}GC s per batch: {[round(t / 1000, 1) for t in s['gc_ms_per_batch']]}; "
                  f"commit s per batch: {[round(t / 1000, 1) for t in s['commit_ms_per_batch']]}")
    ours = results.get("sparkstate", [{}])[0]
    if ours.get("batches") and base.get("batches"):
        print(f"\nsparkstate median / Spark rocksdb median = {ours['median_ms'] / base['median_ms']:.2f} (target <= 1.0); "
              f"sparkstate max/median = {ours['max_over_median']:.2f}, after the first batch "
              f"{ours['max_over_median_after_first'] or 0:.2f} (target <= 1.5)")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"settings": {k: v for k, v in vars(args).items() if not k.startswith("_")},
                       "results": results}, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

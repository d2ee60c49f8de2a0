"""State store provider benchmark: the same streaming queries on several providers in one run.

Workloads (both ``outputMode("update")``, ``spark.sql.shuffle.partitions=4``, ``local[2]``):

* ``agg``   -- ``groupBy(k).agg(count, sum(v))``; every micro-batch has ``--rows-per-batch``
  rows (default 500k) with keys drawn uniformly from ``--key-space`` keys (default 200k), so
  ≈184k distinct keys are read and updated per batch and the state holds ≈200k keys.
* ``dedup`` -- ``dropDuplicates(["id"])`` without watermark; half of every batch's rows carry
  new ids, half repeat ids of earlier batches (or of the same batch), so the state grows by
  ``rows-per-batch / 2`` keys per batch.

Providers: ``hdfs``, ``rocksdb`` (Spark's built-ins) and ``sparkstate`` (this project's
provider with its default ``backend=rocksdb``, set up with ``spark_state.configure(builder)``;
skipped with a message if that does not import), ``sparkstate-hashmap`` (ours with
``backend=hashmap``: the state in the executor's heap). Any other value is taken as a provider
class name. Ratios are printed against Spark's RocksDB provider and against its HDFS
(in-memory) provider, the two baselines of issue 14's targets. TTL variants of ours:

* ``sparkstate-ttl`` -- TTL on for every operator (``--ttl``, default 1h: long enough that
  nothing expires mid-run, so it measures what stamping values and keeping the expiry index
  cost); its rows/s are also reported as a ratio to ``sparkstate`` ("TTL cost", goal <= 15%).
* ``sparkstate-ttl-expiring`` -- TTL ``--ttl-expiring`` (default 3s, wall clock): keys not
  updated for about two batches expire, so the sweep removes rows every batch.

Method. Input is generated up front as parquet, one file per micro-batch, and read with
``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)`` into the ``noop`` sink, so every
provider reads the same files and nothing is collected to the driver. Batch times come from
``StreamingQueryProgress.durationMs`` (``triggerExecution``: the whole micro-batch;
``addBatch``: executing it, where the state store work happens). The first
``--warmup`` batches (default 1: JIT, class loading, an empty state) are not measured;
``--batches`` is the number of measured batches.

Isolation. Every (workload, provider) run happens in a fresh Python process with its own
SparkSession and JVM. A SparkSession stopped and rebuilt in one process keeps the JVM: the
JIT warm-up of the previous provider, loaded state-store providers and their maintenance
threads, RocksDB native memory and garbage from the previous run all carry over, and a
``spark.jars`` added by ``spark_state.configure`` only takes effect in a new SparkContext.
A fresh JVM per run costs ~10 s of start-up (not measured) and makes runs independent of
their order. With ``--rounds N`` the providers run N times, in rotated order, and the
figures are over all measured batches of all rounds.

Usage:
    python bench/provider_bench.py --providers hdfs,rocksdb[,sparkstate[,sparkstate-hashmap[,sparkstate-ttl]]] [--batches 6]
        [--rounds 2: every provider twice, in rotated order (interleaved)]
        [--rows-per-batch 500000] [--workloads agg,dedup] [--json out.json]
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
import time

PROVIDERS = {
    "hdfs": "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider",
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "sparkstate": "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider",
}
PROVIDER_CONF = "spark.sql.streaming.stateStore.providerClass"
BASELINE = "rocksdb"
TTL_CONF = "spark.sql.streaming.stateStore.sparkState.ttl"
#: variant name -> (provider it runs, Spark confs it adds; a value None is filled from the CLI)
VARIANTS = {"sparkstate-ttl": ("sparkstate", "ttl"), "sparkstate-ttl-expiring": ("sparkstate", "ttl_expiring")}
#: backend variants of ours: name -> Spark confs it adds
BACKEND_VARIANTS = {"sparkstate-hashmap": {"spark.sql.streaming.stateStore.sparkState.backend": "hashmap"}}
#: the second baseline of the ratios: Spark's in-memory provider
MEMORY_BASELINE = "hdfs"
WORKLOADS = ("agg", "dedup")


# ------------------------------------------------------------------------------------------
# Input


def generate_inputs(root: str, workload: str, files: int, rows: int, key_space: int, seed: int) -> str:
    """One parquet file per micro-batch under ``root/<workload>``; returns the directory."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = os.path.join(root, workload)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    next_id = 0
    for b in range(files):
        if workload == "agg":
            k = rng.integers(0, key_space, size=rows, dtype=np.int64)
            table = pa.table({"k": k, "v": rng.integers(0, 1000, size=rows, dtype=np.int64)})
        else:
            fresh = rows // 2
            new_ids = np.arange(next_id, next_id + fresh, dtype=np.int64)
            next_id += fresh
            repeats = rng.integers(0, next_id, size=rows - fresh, dtype=np.int64)
            ids = np.concatenate([new_ids, repeats])
            rng.shuffle(ids)
            table = pa.table({"id": ids, "v": rng.integers(0, 1000, size=rows, dtype=np.int64)})
        path = os.path.join(out, f"batch-{b:06d}.parquet")
        tmp = os.path.join(out, f".tmp-{b}")
        pq.write_table(table, tmp)
        mtime = 1_700_000_000 + 10 * b  # the file source orders files by modification time
        os.utime(tmp, (mtime, mtime))
        os.replace(tmp, path)
    return out


# ------------------------------------------------------------------------------------------
# One run (in its own process)


def run_worker(spec: dict) -> dict:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession, functions as F, types as T

    builder = (
        SparkSession.builder.master(spec["master"])
        .appName(f"provider-bench-{spec['workload']}-{spec['provider']}")
        .config("spark.sql.shuffle.partitions", str(spec["partitions"]))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", spec["driver_memory"])
    )
    if spec["base"] == "sparkstate":
        from spark_state import configure

        builder = configure(builder) or builder
    for key, value in spec["confs"].items():
        builder = builder.config(key, value)
    builder = builder.config(PROVIDER_CONF, spec["provider_class"])
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    try:
        if spec["workload"] == "agg":
            schema = T.StructType([T.StructField("k", T.LongType()), T.StructField("v", T.LongType())])
        else:
            schema = T.StructType([T.StructField("id", T.LongType()), T.StructField("v", T.LongType())])
        df = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(spec["input_dir"])
        if spec["workload"] == "agg":
            out = df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
        else:
            out = df.dropDuplicates(["id"])
        started = time.monotonic()
        query = (
            out.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", spec["checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        wall = time.monotonic() - started
        progress = [json.loads(p.json()) for p in query._jsq.recentProgress()]
    finally:
        spark.stop()
    batches = []
    for p in progress:
        if "batchId" not in p or "triggerExecution" not in (p.get("durationMs") or {}):
            continue
        ops = p.get("stateOperators") or []
        batches.append(
            {
                "batch": p["batchId"],
                "input_rows": p.get("numInputRows", 0),
                "trigger_ms": p["durationMs"]["triggerExecution"],
                "add_batch_ms": p["durationMs"].get("addBatch", 0),
                "state_rows": sum(op.get("numRowsTotal", 0) for op in ops),
                "rows_updated": sum(op.get("numRowsUpdated", 0) for op in ops),
                "commit_ms": sum(op.get("commitTimeMs", 0) for op in ops),
                "ttl_expired": sum((op.get("customMetrics") or {}).get("sparkStateTtlExpiredRows", 0) for op in ops),
            }
        )
    return {"batches": batches, "wall_s": wall}


# ------------------------------------------------------------------------------------------
# Driver


def summarize(batches: list[dict], warmup: int) -> dict:
    measured = [b for b in batches if b["batch"] >= warmup and b["input_rows"] > 0]
    if not measured:
        return {"measured_batches": 0}
    rows = sum(b["input_rows"] for b in measured)
    trigger_s = sum(b["trigger_ms"] for b in measured) / 1000
    return {
        "measured_batches": len(measured),
        "rows": rows,
        "rows_per_s": rows / trigger_s if trigger_s else float("inf"),
        "median_trigger_ms": statistics.median(b["trigger_ms"] for b in measured),
        "median_add_batch_ms": statistics.median(b["add_batch_ms"] for b in measured),
        "median_commit_ms": statistics.median(b["commit_ms"] for b in measured),
        "median_rows_updated": statistics.median(b["rows_updated"] for b in measured),
        "final_state_rows": measured[-1]["state_rows"],
        "ttl_expired_rows": sum(b.get("ttl_expired", 0) for b in measured),
    }


def _base(name: str) -> str:
    """The provider a run name stands for (variants of ours run ``sparkstate``)."""
    if name in VARIANTS:
        return VARIANTS[name][0]
    return "sparkstate" if name in BACKEND_VARIANTS else name


def sparkstate_available() -> tuple[bool, str]:
    try:
        from spark_state import configure  # noqa: F401
    except Exception as exc:  # ImportError, or anything the package raises on import
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", default="hdfs,rocksdb", help="comma list: hdfs, rocksdb, sparkstate, or class names")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list of: agg, dedup")
    parser.add_argument("--batches", type=int, default=6, help="measured micro-batches per run (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=1, help="leading micro-batches not measured")
    parser.add_argument("--rows-per-batch", type=int, default=500_000)
    parser.add_argument("--key-space", type=int, default=200_000, help="agg: keys drawn uniformly from this many")
    parser.add_argument("--partitions", type=int, default=4, help="spark.sql.shuffle.partitions")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--rounds", type=int, default=1, help="run every provider this many times (rotated order)")
    parser.add_argument("--ttl", default="1h", help="TTL of the sparkstate-ttl variant")
    parser.add_argument("--ttl-expiring", default="3s", help="TTL of the sparkstate-ttl-expiring variant")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark conf for every run")
    parser.add_argument("--workdir", help="input and checkpoints go here (default: a temporary directory, removed)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args._worker:
        spec = json.loads(args._worker)
        result = run_worker(spec)
        with open(spec["result"], "w") as out:
            json.dump(result, out)
        return 0

    names = [p.strip() for p in args.providers.split(",") if p.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in workloads:
        if w not in WORKLOADS:
            parser.error(f"unknown workload {w!r}")
    confs = dict(c.split("=", 1) for c in args.conf)
    providers = []
    for name in names:
        if name == "sparkstate" or VARIANTS.get(name, ("",))[0] == "sparkstate" or name in BACKEND_VARIANTS:
            ok, why = sparkstate_available()
            if not ok:
                print(f"skipping sparkstate: `from spark_state import configure` failed ({why})")
                continue
        providers.append(name)
    if not providers:
        print("no provider to run")
        return 1

    workdir = args.workdir or tempfile.mkdtemp(prefix="provider-bench-")
    cleanup = args.workdir is None
    files = args.batches + args.warmup
    results: dict = {}
    errors: dict = {}
    try:
        print(
            f"input: {files} batches x {args.rows_per_batch} rows "
            f"(first {args.warmup} not measured), {args.partitions} partitions, {args.master}; workdir {workdir}"
        )
        inputs = {}
        for w in workloads:
            t = time.monotonic()
            inputs[w] = generate_inputs(workdir, w, files, args.rows_per_batch, args.key_space, args.seed)
            print(f"  generated {w} input in {time.monotonic() - t:.1f} s")
        for rnd in range(args.rounds):
            order = providers[rnd % len(providers):] + providers[: rnd % len(providers)]
            for w in workloads:
                for name in order:
                    tag = f"{w}-{name}-r{rnd}"
                    base = _base(name)
                    run_confs = dict(confs)
                    if name in VARIANTS:
                        run_confs[TTL_CONF] = getattr(args, VARIANTS[name][1])
                    run_confs.update(BACKEND_VARIANTS.get(name, {}))
                    spec = {
                        "workload": w,
                        "provider": name,
                        "base": base,
                        "provider_class": PROVIDERS.get(base, base),
                        "input_dir": inputs[w],
                        "checkpoint": os.path.join(workdir, "ckpt", tag),
                        "result": os.path.join(workdir, f"{tag}.json"),
                        "master": args.master,
                        "partitions": args.partitions,
                        "driver_memory": args.driver_memory,
                        "confs": run_confs,
                    }
                    log_path = os.path.join(workdir, f"{tag}.log")
                    t = time.monotonic()
                    with open(log_path, "w") as log:
                        proc = subprocess.run(
                            [sys.executable, os.path.abspath(__file__), "--_worker", json.dumps(spec)],
                            stdout=log,
                            stderr=subprocess.STDOUT,
                        )
                    if proc.returncode != 0 or not os.path.exists(spec["result"]):
                        with open(log_path) as log:
                            tail = log.read()[-3000:]
                        errors.setdefault(w, {})[name] = tail
                        print(f"  {tag}: FAILED (exit {proc.returncode}); log tail:\n{tail}")
                        continue
                    with open(spec["result"]) as f:
                        run = json.load(f)
                    results.setdefault(w, {}).setdefault(name, []).append(run)
                    print(f"  {tag}: {len(run['batches'])} batches in {run['wall_s']:.1f} s "
                          f"(process {time.monotonic() - t:.1f} s)")
    finally:
        if cleanup:
            shutil.rmtree(workdir, ignore_errors=True)

    report = {
        "settings": {k: v for k, v in vars(args).items() if not k.startswith("_")},
        "workloads": {},
        "errors": errors,
    }
    for w in workloads:
        summary = {}
        for name, runs in results.get(w, {}).items():
            batches = [b for run in runs for b in run["batches"]]
            summary[name] = summarize(batches, args.warmup)
            base = _base(name)
            summary[name]["provider_class"] = PROVIDERS.get(base, base)
            if name in VARIANTS:
                summary[name]["ttl"] = getattr(args, VARIANTS[name][1])
            summary[name]["per_batch"] = [run["batches"] for run in runs]
        base = summary.get(BASELINE, {})
        memory = summary.get(MEMORY_BASELINE, {})
        for name, s in summary.items():
            if base.get("measured_batches") and s.get("measured_batches"):
                s["throughput_vs_rocksdb"] = s["rows_per_s"] / base["rows_per_s"]
                s["latency_vs_rocksdb"] = s["median_trigger_ms"] / base["median_trigger_ms"]
            if memory.get("measured_batches") and s.get("measured_batches"):
                s["throughput_vs_hdfs"] = s["rows_per_s"] / memory["rows_per_s"]
        report["workloads"][w] = summary

        print(f"\n{w}: rows/s and per-batch medians over measured batches (thru x / lat x: vs {BASELINE}; "
              f"vs hdfs: throughput vs {MEMORY_BASELINE})")
        header = (f"  {'provider':<24}{'batches':>8}{'rows/s':>12}{'trigger ms':>12}{'addBatch ms':>13}"
                  f"{'commit ms':>11}{'state rows':>12}{'thru x':>8}{'lat x':>8}{'vs hdfs':>9}")
        print(header)
        for name, s in summary.items():
            if not s.get("measured_batches"):
                print(f"  {name:<24} no measured batches")
                continue
            thr = f"{s['throughput_vs_rocksdb']:.2f}" if "throughput_vs_rocksdb" in s else "-"
            lat = f"{s['latency_vs_rocksdb']:.2f}" if "latency_vs_rocksdb" in s else "-"
            mem = f"{s['throughput_vs_hdfs']:.2f}" if "throughput_vs_hdfs" in s else "-"
            print(f"  {name:<24}{s['measured_batches']:>8}{s['rows_per_s']:>12,.0f}{s['median_trigger_ms']:>12,.0f}"
                  f"{s['median_add_batch_ms']:>13,.0f}{s['median_commit_ms']:>11,.0f}{s['final_state_rows']:>12,}"
                  f"{thr:>8}{lat:>8}{mem:>9}")
        plain = summary.get("sparkstate", {})
        for name in VARIANTS:
            s = summary.get(name, {})
            if plain.get("measured_batches") and s.get("measured_batches"):
                s["rows_per_s_vs_sparkstate"] = s["rows_per_s"] / plain["rows_per_s"]
                print(f"  TTL cost, {name} (ttl {s['ttl']}): {s['rows_per_s']:,.0f} vs {plain['rows_per_s']:,.0f} rows/s "
                      f"= {s['rows_per_s_vs_sparkstate']:.3f}x ({(1 - s['rows_per_s_vs_sparkstate']) * 100:+.1f}% cost; "
                      f"goal <= 15%); rows expired in measured batches: {s['ttl_expired_rows']:,}")
        if w == "agg":
            for name, s in summary.items():
                if s.get("measured_batches"):
                    print(f"  ({name}: median keys updated per batch {s['median_rows_updated']:,.0f})")
                    break
    if args.json:
        with open(args.json, "w") as out:
            json.dump(report, out, indent=2)
        print(f"\nwrote {args.json}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

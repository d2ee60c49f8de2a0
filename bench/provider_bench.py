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
(in-memory) provider, the two baselines of the speed goals. TTL variants of ours:

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

Heaps. Everything runs at each driver heap of ``--heaps`` (default ``1g,4g``: Spark's default
driver memory, where the in-heap providers meet their limit, and a heap where memory does not
bind), and the tables and ratios are per heap (``--driver-memory X`` is ``--heaps X``).
``--record`` keeps the run's ratios for ``bench/compare.py``.

Usage:
    python bench/provider_bench.py --providers hdfs,rocksdb[,sparkstate[,sparkstate-hashmap[,sparkstate-ttl]]]
        [--batches 6]
        [--rounds 2: every provider twice, in rotated order (interleaved)]
        [--rows-per-batch 500000] [--workloads agg,dedup] [--heaps 1g,4g] [--json out.json] [--record]
        [--profile: every run's batches, with GC, the JVM's and the workers' CPU, loads, exports, spills]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from harness import inputs, queries, results, sessions, stats, workers
from harness.contenders import TTL_CONF, contender, spark_state_importable
from harness.stats import fmt_ratio, ratio

BASELINE = "rocksdb"
#: variant name -> (provider it runs, the option that gives its TTL)
VARIANTS = {"sparkstate-ttl": ("sparkstate", "ttl"), "sparkstate-ttl-expiring": ("sparkstate", "ttl_expiring")}
#: the second baseline of the ratios: Spark's in-memory provider
MEMORY_BASELINE = "hdfs"
WORKLOADS = ("agg", "dedup")
#: the ratios a run records (``--record``) for ``bench/compare.py``
RECORDED_RATIOS = ("throughput_vs_rocksdb", "latency_vs_rocksdb", "throughput_vs_hdfs", "rows_per_s_vs_sparkstate")


# ------------------------------------------------------------------------------------------
# Input


def generate_inputs(root: str, workload: str, files: int, rows: int, key_space: int, seed: int) -> str:
    """One parquet file per micro-batch under ``root/<workload>``; returns the directory."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    next_id = 0

    def table(_b: int):
        nonlocal next_id
        if workload == "agg":
            k = rng.integers(0, key_space, size=rows, dtype=np.int64)
            return pa.table({"k": k, "v": rng.integers(0, 1000, size=rows, dtype=np.int64)})
        fresh = rows // 2
        new_ids = np.arange(next_id, next_id + fresh, dtype=np.int64)
        next_id += fresh
        repeats = rng.integers(0, next_id, size=rows - fresh, dtype=np.int64)
        ids = np.concatenate([new_ids, repeats])
        rng.shuffle(ids)
        return pa.table({"id": ids, "v": rng.integers(0, 1000, size=rows, dtype=np.int64)})

    return inputs.write_batches(os.path.join(root, workload), files, table)


# ------------------------------------------------------------------------------------------
# One run (in its own process)


def run_worker(spec: dict) -> dict:
    from pyspark.sql import functions as F

    who = contender(spec["base"]).with_confs(spec["provider"], spec["confs"])
    spark = sessions.start(sessions.builder(
        f"provider-bench-{spec['workload']}-{spec['provider']}", contender=who, master=spec["master"],
        partitions=spec["partitions"], driver_memory=spec["driver_memory"]), log_level="WARN")
    try:
        key = "k" if spec["workload"] == "agg" else "id"
        df = queries.file_stream(spark, f"{key} bigint, v bigint", spec["input_dir"])
        if spec["workload"] == "agg":
            out = df.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("total"))
        else:
            out = df.dropDuplicates(["id"])
        started = time.monotonic()
        query = queries.start_to_noop(out, spec["checkpoint"])
        profiles = _profile(spark, query) if spec.get("profile") else {}
        query.awaitTermination()
        wall = time.monotonic() - started
        progress = queries.completed(queries.progress(query))
    finally:
        spark.stop()
    batches = [
        {
            "batch": p["batchId"],
            "input_rows": p.get("numInputRows", 0),
            "trigger_ms": p["durationMs"]["triggerExecution"],
            "add_batch_ms": p["durationMs"].get("addBatch", 0),
            "state_rows": queries.state_sum(p, "numRowsTotal"),
            "rows_updated": queries.state_sum(p, "numRowsUpdated"),
            "commit_ms": queries.state_sum(p, "commitTimeMs"),
            "ttl_expired": queries.custom_sums(p).get("sparkStateTtlExpiredRows", 0),
            **({"custom": queries.custom_sums(p), **profiles.get(p["batchId"], {})} if spec.get("profile") else {}),
        }
        for p in progress
    ]
    return {"batches": batches, "wall_s": wall}


def _profile(spark, query) -> dict[int, dict]:
    """``--profile``: per batch, as each lands (polled every 0.1 s, so a batch's figures can take
    a little of the next one's), the JVM's garbage collection time and the CPU seconds of the JVM
    and of the provider's Python workers."""
    from harness.heap import gc_time_ms
    from harness.processes import cpu_seconds

    root = os.getpid()
    out: dict[int, dict] = {}
    gc0, cpu0 = gc_time_ms(spark), cpu_seconds(root)
    for p in queries.follow(query, poll_s=0.1):
        gc1, cpu1 = gc_time_ms(spark), cpu_seconds(root)
        out[p["batchId"]] = {"gc_ms": gc1 - gc0, "jvm_cpu_s": round(cpu1["jvm"] - cpu0["jvm"], 2),
                             "worker_cpu_s": round(cpu1["provider_workers"] - cpu0["provider_workers"], 2)}
        gc0, cpu0 = gc1, cpu1
    return out


PROFILE_COLUMNS = (("trigger_ms", "trigger"), ("add_batch_ms", "addBatch"), ("commit_ms", "commit"),
                   ("gc_ms", "GC"), ("jvm_cpu_s", "JVM cpu s"), ("worker_cpu_s", "workers cpu s"),
                   ("sparkStateLoadTimeMs", "load"), ("sparkStateViewExports", "exports"),
                   ("sparkStateSpills", "spills"), ("sparkStateHeapBytes", "heap MB"))


def print_profile(tag: str, batches: list[dict]) -> None:
    """``--profile``: one run's batches, one line each (times in ms summed over tasks where Spark
    sums them: commit, load)."""
    print(f"  {tag}: " + "  ".join(f"{label:>10}" for _, label in PROFILE_COLUMNS))
    for b in batches:
        cells = []
        for key, _ in PROFILE_COLUMNS:
            value = b.get(key, b.get("custom", {}).get(key, ""))
            if key == "sparkStateHeapBytes" and value != "":
                value = round(value / 2**20)
            cells.append(f"{value:>10}")
        print(f"  {'batch ' + str(b['batch']):>{len(tag)}}: " + "  ".join(cells))


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
    """The provider a run name stands for (TTL variants of ours run ``sparkstate``)."""
    return VARIANTS[name][0] if name in VARIANTS else name


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", default="hdfs,rocksdb",
                        help="comma list: hdfs, rocksdb, sparkstate, or class names")
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list of: agg, dedup")
    parser.add_argument("--batches", type=int, default=6, help="measured micro-batches per run (after the warm-up)")
    parser.add_argument("--warmup", type=int, default=1, help="leading micro-batches not measured")
    parser.add_argument("--rows-per-batch", type=int, default=500_000)
    parser.add_argument("--key-space", type=int, default=200_000, help="agg: keys drawn uniformly from this many")
    parser.add_argument("--partitions", type=int, default=4, help="spark.sql.shuffle.partitions")
    parser.add_argument("--master", default="local[2]")
    sessions.add_heaps_option(parser)
    parser.add_argument("--driver-memory", help="one driver heap (the same as --heaps with one value)")
    parser.add_argument("--rounds", type=stats.rounds, default=1,
                        help="run every provider this many times (rotated order)")
    parser.add_argument("--profile", action="store_true",
                        help="print each run's batches: times, GC, CPU of the JVM and of the workers, loads, "
                             "view exports, spills, heap")
    parser.add_argument("--ttl", default="1h", help="TTL of the sparkstate-ttl variant")
    parser.add_argument("--ttl-expiring", default="3s", help="TTL of the sparkstate-ttl-expiring variant")
    sessions.add_conf_option(parser)
    parser.add_argument("--workdir", help="input and checkpoints go here (default: a temporary directory, removed)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--json", help="also write the results to this JSON file")
    results.add_record_option(parser)
    workers.add_worker_option(parser)
    args = parser.parse_args(argv)

    if workers.serve(args, run_worker):
        return 0

    names = [p.strip() for p in args.providers.split(",") if p.strip()]
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in workloads:
        if w not in WORKLOADS:
            parser.error(f"unknown workload {w!r}")
    try:
        heaps = sessions.parse_heaps(args.driver_memory or args.heaps)
    except ValueError as exc:
        parser.error(str(exc))
    confs = dict(args.conf)
    providers = []
    for name in names:
        if contender(_base(name)).ours:
            ok, why = spark_state_importable()
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
    runs: dict = {}  # heap -> workload -> name -> [run]
    errors: dict = {}  # heap -> workload -> name -> log tail
    try:
        print(
            f"input: {files} batches x {args.rows_per_batch} rows "
            f"(first {args.warmup} not measured), {args.partitions} partitions, {args.master}, "
            f"driver heap {' and '.join(heaps)}; workdir {workdir}"
        )
        input_dirs = {}
        for w in workloads:
            t = time.monotonic()
            input_dirs[w] = generate_inputs(workdir, w, files, args.rows_per_batch, args.key_space, args.seed)
            print(f"  generated {w} input in {time.monotonic() - t:.1f} s")
        for heap in heaps:
            for rnd in range(args.rounds):
                order = providers[rnd % len(providers):] + providers[: rnd % len(providers)]
                for w in workloads:
                    for name in order:
                        run_one(args, heap, rnd, w, name, confs, input_dirs[w], workdir, runs, errors)
    finally:
        if cleanup:
            shutil.rmtree(workdir, ignore_errors=True)

    report = {"settings": results.settings(args), "heaps": {}, "errors": errors}
    for heap in heaps:
        report["heaps"][heap] = {"workloads": {w: summarize_workload(args, runs.get(heap, {}).get(w, {}), heap, w)
                                               for w in workloads}}
    report["ratios"] = {results.ratio_key(heap, w, name, r): s[r]
                        for heap, h in report["heaps"].items() for w, summary in h["workloads"].items()
                        for name, s in summary.items() for r in RECORDED_RATIOS if s.get(r) is not None}
    if args.json:
        results.write_json(args.json, report, indent=2)
        print(f"\nwrote {args.json}")
    if args.record:
        results.record("provider_bench", report["ratios"], results.run_argv(sys.argv[1:] if argv is None else argv))
        print(f"recorded {len(report['ratios'])} ratios in {results.RECORDED}")
    return 1 if errors else 0


def run_one(args, heap: str, rnd: int, w: str, name: str, confs: dict, input_dir: str, workdir: str,
            runs: dict, errors: dict) -> None:
    """One (heap, round, workload, provider) run in its own process; its batches go to ``runs``."""
    tag = f"{w}-{name}-{heap}-r{rnd}"
    run_confs = dict(confs)
    if name in VARIANTS:
        run_confs[TTL_CONF] = getattr(args, VARIANTS[name][1])
    base = _base(name)
    spec = {
        "workload": w,
        "provider": name,
        "base": base,
        "input_dir": input_dir,
        "checkpoint": os.path.join(workdir, "ckpt", tag),
        "result": os.path.join(workdir, f"{tag}.json"),
        "master": args.master,
        "partitions": args.partitions,
        "driver_memory": heap,
        "confs": run_confs,
        "profile": args.profile,
    }
    t = time.monotonic()
    done = workers.run(__file__, spec, os.path.join(workdir, f"{tag}.log"))
    run = workers.read_result(spec["result"])
    if done.returncode != 0 or run is None:
        tail = done.log_tail()
        errors.setdefault(heap, {}).setdefault(w, {})[name] = tail
        print(f"  {tag}: FAILED (exit {done.returncode}); log tail:\n{tail}")
        return
    runs.setdefault(heap, {}).setdefault(w, {}).setdefault(name, []).append(run)
    print(f"  {tag}: {len(run['batches'])} batches in {run['wall_s']:.1f} s "
          f"(process {time.monotonic() - t:.1f} s)")
    if args.profile:
        print_profile(tag, run["batches"])


def summarize_workload(args, by_name: dict, heap: str, w: str) -> dict:
    """One workload's summary per provider at one heap, with the ratios; prints its table."""
    summary = {}
    for name, name_runs in by_name.items():
        batches = [b for run in name_runs for b in run["batches"]]
        summary[name] = summarize(batches, args.warmup)
        summary[name]["provider_class"] = contender(_base(name)).provider_class
        if name in VARIANTS:
            summary[name]["ttl"] = getattr(args, VARIANTS[name][1])
        summary[name]["per_batch"] = [run["batches"] for run in name_runs]
    base = summary.get(BASELINE, {})
    memory = summary.get(MEMORY_BASELINE, {})
    for s in summary.values():
        if base.get("measured_batches") and s.get("measured_batches"):
            s["throughput_vs_rocksdb"] = ratio(s["rows_per_s"], base["rows_per_s"])
            s["latency_vs_rocksdb"] = ratio(s["median_trigger_ms"], base["median_trigger_ms"])
        if memory.get("measured_batches") and s.get("measured_batches"):
            s["throughput_vs_hdfs"] = ratio(s["rows_per_s"], memory["rows_per_s"])

    print(f"\n{w}, driver heap {heap}: rows/s and per-batch medians over measured batches (thru x / lat x: vs "
          f"{BASELINE}; vs hdfs: throughput vs {MEMORY_BASELINE})")
    header = (f"  {'provider':<24}{'batches':>8}{'rows/s':>12}{'trigger ms':>12}{'addBatch ms':>13}"
              f"{'commit ms':>11}{'state rows':>12}{'thru x':>8}{'lat x':>8}{'vs hdfs':>9}")
    print(header)
    for name, s in summary.items():
        if not s.get("measured_batches"):
            print(f"  {name:<24} no measured batches")
            continue
        thr, lat, mem = (fmt_ratio(s.get(k)) for k in ("throughput_vs_rocksdb", "latency_vs_rocksdb",
                                                       "throughput_vs_hdfs"))
        print(f"  {name:<24}{s['measured_batches']:>8}{s['rows_per_s']:>12,.0f}{s['median_trigger_ms']:>12,.0f}"
              f"{s['median_add_batch_ms']:>13,.0f}{s['median_commit_ms']:>11,.0f}{s['final_state_rows']:>12,}"
              f"{thr:>8}{lat:>8}{mem:>9}")
    plain = summary.get("sparkstate", {})
    for name in VARIANTS:
        s = summary.get(name, {})
        if plain.get("measured_batches") and s.get("measured_batches"):
            s["rows_per_s_vs_sparkstate"] = ratio(s["rows_per_s"], plain["rows_per_s"])
            print(f"  TTL cost, {name} (ttl {s['ttl']}): {s['rows_per_s']:,.0f} vs {plain['rows_per_s']:,.0f} rows/s "
                  f"= {s['rows_per_s_vs_sparkstate']:.3f}x ({(1 - s['rows_per_s_vs_sparkstate']) * 100:+.1f}% cost; "
                  f"goal <= 15%); rows expired in measured batches: {s['ttl_expired_rows']:,}")
    if w == "agg":
        for name, s in summary.items():
            if s.get("measured_batches"):
                print(f"  ({name}: median keys updated per batch {s['median_rows_updated']:,.0f})")
                break
    return summary


if __name__ == "__main__":
    sys.exit(main())

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
and the JVM heap: the largest used heap sampled every 0.5 s, and the largest old-generation size
after a collection (the live set, which is what "flat" is about);
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
import os
import shutil
import sys
import tempfile
import time

from harness import inputs, queries, results, sessions, stats, workers
from harness.contenders import CONTENDERS, contender
from harness.heap import MB, HeapSampler, gc_time_ms
from harness.stats import spread


def generate_inputs(out: str, batches: int, keys: int) -> None:
    """``batches`` parquet files of ``keys`` fresh ids each (ids ``b*keys .. (b+1)*keys-1``, shuffled)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(11)

    def table(b: int):
        ids = np.arange(b * keys, (b + 1) * keys, dtype=np.int64)
        rng.shuffle(ids)
        return pa.table({"id": ids, "v": rng.integers(0, 1000, size=keys, dtype=np.int64)})

    inputs.write_batches(out, batches, table, name="batch-{b:04d}.parquet")


def run_worker(spec: dict) -> None:
    """One provider's run; appends one JSON line per completed batch to ``spec['result']``."""
    spark = sessions.start(sessions.builder(f"scale-bench-{spec['provider']}", contender=contender(spec["provider"]),
                                            driver_memory=spec["driver_memory"], confs=spec.get("confs")))
    sampler = HeapSampler(spark, 0.5)

    def start(input_dir: str, checkpoint: str):
        df = queries.file_stream(spark, "id bigint, v bigint", input_dir)
        return queries.start_to_noop(df.dropDuplicates(["id"]), checkpoint, mode="append")

    if spec.get("warmup_dir"):
        start(spec["warmup_dir"], spec["checkpoint"] + "-warmup").awaitTermination()
        # Unload the warm-up's stores, so that the measured query starts with none in the heap.
        spark._jvm.org.apache.spark.sql.execution.streaming.state.StateStore.stop()
    gc_base = gc_time_ms(spark)  # this query's GC only
    query = start(spec["input_dir"], spec["checkpoint"])
    sampler.start()

    def line_of(p: dict) -> dict:
        return {"batch": p["batchId"], "input_rows": p["numInputRows"],
                "trigger_ms": p["durationMs"]["triggerExecution"], "duration_ms": dict(p["durationMs"]),
                "state_rows": queries.state_sum(p, "numRowsTotal"),
                "commit_ms": queries.state_sum(p, "commitTimeMs"),
                "memory_used_bytes": queries.state_sum(p, "memoryUsedBytes"),
                "sparkstate_commit_ms": queries.custom_sums(p).get("sparkStateCommitTimeMs", 0),
                "gc_ms_total": gc_time_ms(spark) - gc_base, **sampler.take_batch()}  # heap: per batch

    try:
        workers.record_batches(query, spec["result"], line_of)
    finally:
        sampler.stop()
        sessions.stop_quietly(spark)


def summarize(lines: list[dict]) -> dict:
    batches = [b for b in lines if "batch" in b and b["input_rows"] > 0]
    errors = [b["error"] for b in lines if "error" in b]
    if not batches:
        return {"batches": 0, "error": errors[0] if errors else None}
    times = [b["trigger_ms"] for b in batches]
    s = spread(times)
    return {
        "batches": len(batches), "final_state_rows": batches[-1]["state_rows"],
        "median_ms": s["median"], "max_ms": s["max"], "max_over_median": s["max_over_median"],
        # the first batch also pays for the JVM's class loading, JIT and Spark's code generation
        "max_over_median_after_first": s["max_over_median_after_first"],
        "heap_peak_mb": max(b["heap_peak_bytes"] for b in batches) / MB,
        "heap_peak_per_batch_mb": [round(b["heap_peak_bytes"] / MB) for b in batches],
        "old_gen_after_gc_peak_mb": max(b["old_after_gc_peak_bytes"] for b in batches) / MB,
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
    parser.add_argument("--rounds", type=stats.rounds, default=1)
    parser.add_argument("--cap-s", type=float, default=900, help="longest a provider's run may take")
    parser.add_argument("--workdir")
    sessions.add_conf_option(parser)
    parser.add_argument("--jvm-warmup", action="store_true",
                        help="run a small query of the same provider in the same JVM first (not reported)")
    parser.add_argument("--json")
    workers.add_worker_option(parser)
    args = parser.parse_args(argv)
    if workers.serve(args, run_worker):
        return 0

    confs = dict(args.conf)
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    for p in providers:
        if p not in CONTENDERS:
            parser.error(f"unknown provider {p!r}; one of {', '.join(CONTENDERS)}")
    workdir = args.workdir or tempfile.mkdtemp(prefix="scale-bench-")
    figures: dict[str, list[dict]] = {}
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
                lines = workers.run_batches(__file__, spec, args.cap_s)
                s = summarize(lines)
                figures.setdefault(name, []).append(s)
                print(f"  {tag}: {s['batches']} batches in {time.monotonic() - t:.0f} s"
                      + (f"; stopped: {s['error'][:300]}" if s.get("error") else ""), flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{'provider':<20}{'batches':>8}{'keys':>12}{'median s':>10}{'max/med':>9}{'max/med>1':>11}"
          f"{'heap MB':>9}{'old gen MB':>11}")
    base = figures.get("rocksdb", [{}])[0]
    for name, runs in figures.items():
        for s in runs:
            if not s["batches"]:
                print(f"{name:<20} no batch completed: {s.get('error')}")
                continue
            print(f"{name:<20}{s['batches']:>8}{s['final_state_rows']:>12,}{s['median_ms'] / 1000:>10.2f}"
                  f"{s['max_over_median']:>9.2f}{s['max_over_median_after_first'] or 0:>11.2f}"
                  f"{s['heap_peak_mb']:>9.0f}{s['old_gen_after_gc_peak_mb']:>11.0f}")
            print(f"{'':<20}batch s: {[round(t / 1000, 1) for t in s['times_ms']]}; heap MB per batch: "
                  f"{s['heap_peak_per_batch_mb']}")
            print(f"{'':<20}GC s per batch: {[round(t / 1000, 1) for t in s['gc_ms_per_batch']]}; "
                  f"commit s per batch: {[round(t / 1000, 1) for t in s['commit_ms_per_batch']]}")
    ours = figures.get("sparkstate", [{}])[0]
    if ours.get("batches") and base.get("batches"):
        print(f"\nsparkstate median / Spark rocksdb median = {ours['median_ms'] / base['median_ms']:.2f} "
              "(target <= 1.0); "
              f"sparkstate max/median = {ours['max_over_median']:.2f}, after the first batch "
              f"{ours['max_over_median_after_first'] or 0:.2f} (target <= 1.5)")
    if args.json:
        results.write_json(args.json, {"settings": results.settings(args), "results": figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())

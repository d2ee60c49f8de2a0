"""Large-state benchmark: the first big batch after an outage, a backfill or a bootstrap, on a 1 GB heap.

Workload: ``groupBy("k").count()`` in update mode into the ``noop`` sink, ``local[2]``,
``spark.sql.shuffle.partitions=4``, ``spark.driver.memory=1g`` (in local mode the executor is the
driver: that heap holds the executor's state memory). For each provider, one fresh process per run:

1. **one batch of N distinct keys** for every N of ``--first-batches`` (default 1M, 10M, 30M), each
   on a fresh checkpoint: the batch's time, the JVM's peak used heap (sampled every 0.25 s) and its
   live set (the largest old generation after a collection; with ``--held-every S``, also the heap
   held: the most used right after a full collection forced every S seconds), the peak RSS of the JVM and of the
   provider's Python workers (sampled every 0.25 s from outside), and ``memoryUsedBytes`` (summed
   over the state operator's stores, as Spark reports it);
2. after the largest first batch, **``--updates`` batches of 1M updates** (existing keys, distinct
   per batch) in the same query: median and slowest batch;
3. **a restart with the local state deleted**, as on a new executor: the process ends, its local
   directories (``spark.local.dir``: the stores' working copies, Spark's RocksDB instances and our
   workers' directories) are deleted, and a new process runs one more batch of 1M updates on the
   checkpoint: the time from the query's start to its first committed batch.

``--query dedup`` runs ``dropDuplicates(["k"])`` (append mode) instead of the count: no aggregation
buffers of Spark's in the heap beside the state, so the heap shows the state store's own use.

Providers: ``sparkstate`` (this project's provider, ``backend=rocksdb``), ``sparkstate-hashmap``
(``backend=hashmap``: all state in the JVM heap, so at these sizes it stops with its
``heap.maxBytes`` error, which is what it is meant to do), ``rocksdb`` (Spark's
``RocksDBStateStoreProvider``; its memory as configured by default). Each runs in its own
process, one after the other, on the same input files. Ratios are sparkstate / Spark's RocksDB.

``--suite keyed`` runs ``keyed_process`` instead: a running count over the same first batches
(``rocksdb`` backend), and a batch in which a million event-time timers are due (the first batch
registers one per key, the next one's watermark passes them all): time, peak RSS of the Python
workers, and how many timers fired.

Usage:
    python bench/large_state_bench.py [--providers sparkstate,rocksdb] [--first-batches 1000000,10000000,30000000]
        [--updates 5] [--driver-memory 1g] [--held-every S] [--cap-s 1800] [--conf KEY=VALUE ...] [--json out.json]
    python bench/large_state_bench.py --suite keyed [--first-batches 10000000,30000000] [--timers 1000000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

from harness import inputs, queries, results, sessions, workers
from harness.contenders import contender
from harness.heap import MB, HeapSampler
from harness.processes import watch_peak_rss

#: The providers this benchmark runs (``--providers``).
PROVIDERS = ("rocksdb", "sparkstate", "sparkstate-hashmap")
#: When this module was imported: in a worker process, its start (for the session's start time).
IMPORTED = time.monotonic()
ROWS_PER_GROUP = 1_000_000


# ------------------------------------------------------------------------------------------ inputs
def write_keys(path: str, keys_of_chunk, chunks: int, b: int) -> None:
    """Micro-batch ``b``'s file of keys (one ``k`` column), written a million keys at a time
    (bounded memory): chunk c's keys are ``keys_of_chunk(c)``."""
    import pyarrow as pa

    schema = pa.schema([("k", pa.int64())])
    inputs.write_batch_chunks(path, (pa.table({"k": keys_of_chunk(c)}, schema=schema) for c in range(chunks)),
                              schema, b, ROWS_PER_GROUP)


def generate(workdir: str, first: int, updates: int) -> dict:
    """The input directory of a run: the first batch (``first`` distinct keys, shuffled) and the
    files of the update batches (1M existing keys each, distinct within a batch), each in its own
    directory so that a run can be given exactly the batches it needs."""
    import numpy as np

    rng = np.random.default_rng(7)
    out = {"first": os.path.join(workdir, f"first-{first}"), "updates": []}
    if not os.path.exists(out["first"]):
        os.makedirs(out["first"] + ".tmp")
        chunks = max(1, first // ROWS_PER_GROUP)
        # Keys c, c + chunks, c + 2*chunks, ... in chunk c: every key once, each chunk shuffled.
        write_keys(os.path.join(out["first"] + ".tmp", "batch-0000.parquet"),
                   lambda c: rng.permutation(np.arange(c, first, chunks, dtype=np.int64)), chunks, 0)
        os.replace(out["first"] + ".tmp", out["first"])
    for u in range(updates + 1):  # the last one is the restart's batch
        path = os.path.join(workdir, f"update-{first}-{u}.parquet")
        if not os.path.exists(path):
            n = min(ROWS_PER_GROUP, first)
            write_keys(path, lambda _, n=n: rng.choice(first, size=n, replace=False).astype(np.int64), 1, u + 1)
        out["updates"].append(path)
    return out


# ------------------------------------------------------------------------------------------ a run
def run_worker(spec: dict) -> None:
    """One process: start the session, run the query over what is in ``spec['input_dir']``, write one
    JSON line per committed batch to ``spec['result']``."""
    keyed = spec["suite"] == "keyed"
    spark = sessions.start(sessions.builder(
        f"large-state-{spec['provider']}", contender=None if keyed else contender(spec["provider"]),
        spark_state=keyed, driver_memory=spec["driver_memory"], local_dir=spec["local_dir"],
        confs=spec.get("confs")))
    session_start_ms = round((time.monotonic() - IMPORTED) * 1000)
    sampler = HeapSampler(spark, 0.25, spec.get("held_every") or 0)
    df = queries.file_stream(spark, "k bigint", spec["input_dir"])
    if keyed:
        query = keyed_query(df, spec)
    elif spec.get("query") == "dedup":
        query = df.dropDuplicates(["k"])
    else:
        query = df.groupBy("k").count()
    started = time.monotonic()
    q = queries.start_to_noop(query, spec["checkpoint"], mode="append" if spec.get("query") == "dedup" else "update")
    sampler.start()

    def line_of(p: dict) -> dict:
        line = {"batch": p["batchId"], "input_rows": p["numInputRows"],
                "trigger_ms": p["durationMs"]["triggerExecution"],
                "since_start_ms": round((time.monotonic() - started) * 1000),
                "session_start_ms": session_start_ms,
                "state_rows": queries.state_sum(p, "numRowsTotal"),
                "memory_used_bytes": queries.state_sum(p, "memoryUsedBytes"),
                "duration_ms": dict(p["durationMs"]),
                "commit_ms": queries.state_sum(p, "commitTimeMs"),
                "custom": queries.custom_sums(p),
                **sampler.take_batch()}  # per batch from here on
        return {**line, **keyed_figures(p)} if keyed else line

    try:
        workers.record_batches(q, spec["result"], line_of)
    finally:
        sampler.stop()
        sessions.stop_quietly(spark)


def keyed_query(df, spec: dict):
    """The keyed suite's query: a running count per key, or (``timers``) one event-time timer per key
    that the next batch's watermark makes due."""
    from pyspark.sql import functions as F

    import spark_state
    from harness import keyed_fns

    if spec.get("timers"):
        events = df.withColumn("ts", F.timestamp_seconds(F.col("k") % 1000)).withWatermark("ts", "1 second")
        return spark_state.keyed_process(events, "k", keyed_fns.TimerPerKey(), "k bigint, fired bigint",
                                         parallelism=4, name="timers")
    return spark_state.keyed_process(df, "k", keyed_fns.RunningCount(), "k bigint, n bigint", parallelism=4,
                                     name="count")


def keyed_figures(p: dict) -> dict:
    """The keyed function's figures of a batch (its observation in the progress: ``figures``)."""
    figures = queries.observed(p, "spark_state.").get("figures")
    if figures is None:
        return {}
    return {"keyed": {k: v for k, v in figures.items() if isinstance(v, (int, float))}}


def launch(spec: dict, cap_s: float) -> tuple[list[dict], dict]:
    """Run ``spec`` in its own process and session; returns its lines and the peak RSS (bytes) of its
    JVM and of one Python worker (its anonymous RSS too)."""
    peaks: dict = {}
    lines = workers.run_batches(__file__, spec, cap_s, watch=lambda pid, stop: watch_peak_rss(pid, stop, peaks))
    return lines, peaks


def run_provider(name: str, args, workdir: str, files_by_size: dict[int, dict], confs: dict) -> dict:
    """Every phase of one provider; returns its figures."""
    suite = args.suite
    out: dict = {"first": {}}
    largest = max(files_by_size)
    for n, files in sorted(files_by_size.items()):
        tag = f"{name}-{n}"
        run_dir = os.path.join(workdir, "runs", tag)
        shutil.rmtree(run_dir, ignore_errors=True)
        input_dir = os.path.join(run_dir, "in")
        first_files = [os.path.join(files["first"], f) for f in sorted(os.listdir(files["first"]))]
        updates = files["updates"][:args.updates] if n == largest and suite == "provider" else []
        inputs.stage(input_dir, first_files + updates)
        spec = {"provider": name, "suite": suite, "input_dir": input_dir, "driver_memory": args.driver_memory,
                "checkpoint": os.path.join(run_dir, "ckpt"), "local_dir": os.path.join(run_dir, "local"),
                "result": os.path.join(run_dir, "result.jsonl"), "confs": confs, "query": args.query,
                "held_every": args.held_every}
        t = time.monotonic()
        lines, rss = launch(spec, args.cap_s)
        batches = [b for b in lines if "batch" in b]
        errors = [b["error"] for b in lines if "error" in b]
        first = batches[0] if batches else None
        keyed = first.get("keyed", {}) if first else {}
        entry = {"seconds": first["trigger_ms"] / 1000 if first else None,
                 "state_rows": ((keyed.get("rows_total") if suite == "keyed" else first["state_rows"])
                                if first else None),
                 # keyed functions report their stores' figures in their observation, not in stateOperators
                 "memory_used_mb": ((keyed.get("state_bytes", 0) if suite == "keyed" else first["memory_used_bytes"])
                                    / MB) if first else None,
                 "heap_peak_mb": first["heap_peak_bytes"] / MB if first else None,
                 "live_set_mb": max((b["old_after_gc_peak_bytes"] for b in batches), default=0) / MB,
                 "held_mb": first.get("held_peak_bytes", 0) / MB if first else None,
                 "jvm_rss_mb": rss.get("jvm", 0) / MB, "worker_rss_mb": rss.get("workers", 0) / MB,
                 "worker_anon_mb": rss.get("workers_anon", 0) / MB,
                 "spills": first["custom"].get("sparkStateSpills") if first else None,
                 "error": errors[0][:400] if errors else None}
        out["first"][n] = entry
        print(f"  {tag}: first batch {entry['seconds'] or float('nan'):.1f} s, heap peak "
              f"{entry['heap_peak_mb'] or 0:.0f} MB, live set {entry['live_set_mb']:.0f} MB"
              + (f", held after a full GC {entry['held_mb']:.0f} MB" if args.held_every else "") + ", JVM RSS "
              f"{entry['jvm_rss_mb']:.0f} MB, a worker's RSS {entry['worker_rss_mb']:.0f} MB (anonymous "
              f"{entry['worker_anon_mb']:.0f} MB), memoryUsedBytes "
              f"{entry['memory_used_mb'] or 0:.0f} MB ({time.monotonic() - t:.0f} s in all)"
              + (f"; stopped: {entry['error']}" if entry["error"] else ""), flush=True)
        if updates and len(batches) > 1:
            times = [b["trigger_ms"] / 1000 for b in batches[1:]]
            out["updates"] = {"batches": len(times), "median_s": statistics.median(times), "max_s": max(times),
                              "times_s": times, "state_rows": batches[-1]["state_rows"]}
            print(f"    {len(times)} batches of 1M updates: median {statistics.median(times):.1f} s, slowest "
                  f"{max(times):.1f} s", flush=True)
            # A new executor: the local state is gone; one more batch on the checkpoint.
            shutil.rmtree(spec["local_dir"], ignore_errors=True)
            inputs.stage(input_dir, [files["updates"][args.updates]])
            restart = dict(spec, result=os.path.join(run_dir, "restart.jsonl"))
            lines, _ = launch(restart, args.cap_s)
            done = [b for b in lines if "batch" in b]
            if done:
                out["restart"] = {"first_batch_s": done[0]["since_start_ms"] / 1000,
                                  "batch_s": done[0]["trigger_ms"] / 1000, "state_rows": done[0]["state_rows"]}
                print(f"    restart with the local state deleted: first batch committed "
                      f"{out['restart']['first_batch_s']:.1f} s after the query started "
                      f"(the batch itself {out['restart']['batch_s']:.1f} s)", flush=True)
            else:
                out["restart"] = {"error": next((b["error"] for b in lines if "error" in b), "no batch")}
    return out


def run_timers(args, workdir: str, n: int) -> dict:
    """keyed_process: ``n`` keys register one event-time timer each; the next batch fires them all."""
    run_dir = os.path.join(workdir, "runs", f"timers-{n}")
    shutil.rmtree(run_dir, ignore_errors=True)
    files = generate(workdir, n, 1)
    input_dir = os.path.join(run_dir, "in")
    inputs.stage(input_dir, [os.path.join(files["first"], f) for f in sorted(os.listdir(files["first"]))]
                 + [files["updates"][0]])
    spec = {"provider": "keyed", "suite": "keyed", "timers": True, "input_dir": input_dir,
            "driver_memory": args.driver_memory, "checkpoint": os.path.join(run_dir, "ckpt"),
            "local_dir": os.path.join(run_dir, "local"), "result": os.path.join(run_dir, "result.jsonl"), "confs": {}}
    lines, rss = launch(spec, args.cap_s)
    batches = [b for b in lines if "batch" in b]
    fired = [b.get("keyed", {}).get("timers_fired", 0) for b in batches]
    out = {"batches": len(batches), "seconds": [b["trigger_ms"] / 1000 for b in batches], "timers_fired": fired,
           "worker_rss_mb": rss.get("workers", 0) / MB, "worker_anon_mb": rss.get("workers_anon", 0) / MB,
           "jvm_rss_mb": rss.get("jvm", 0) / MB,
           "error": next((b["error"] for b in lines if "error" in b), None)}
    print(f"  timers: {n:,} registered, batches {out['seconds']} s, fired per batch {fired}, a worker's RSS "
          f"{out['worker_rss_mb']:.0f} MB (anonymous {out['worker_anon_mb']:.0f} MB)"
          + (f"; stopped: {out['error'][:300]}" if out["error"] else ""), flush=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=("provider", "keyed"), default="provider")
    parser.add_argument("--providers", default="sparkstate,rocksdb")
    parser.add_argument("--first-batches", default="1000000,10000000,30000000")
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--query", choices=("count", "dedup"), default="count",
                        help="provider suite: groupBy(k).count() in update mode, or dropDuplicates([k]) in append mode")
    parser.add_argument("--timers", type=int, default=1_000_000, help="keyed suite: timers due in one batch (0: none)")
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--held-every", type=float, default=0, metavar="S",
                        help="every S seconds, a full GC and the heap used after it (the heap the batch holds, "
                             "garbage excluded; slows the run, so keep timing runs without it)")
    parser.add_argument("--cap-s", type=float, default=1800, help="longest one process may take")
    parser.add_argument("--workdir")
    sessions.add_conf_option(parser)
    parser.add_argument("--json")
    workers.add_worker_option(parser)
    args = parser.parse_args(argv)
    if workers.serve(args, run_worker):
        return 0
    confs = dict(args.conf)
    sizes = [int(s) for s in args.first_batches.split(",") if s.strip()]
    workdir = args.workdir or tempfile.mkdtemp(prefix="large-state-bench-")
    figures: dict = {"settings": results.settings(args), "runs": {}}
    try:
        t = time.monotonic()
        files = {n: generate(workdir, n, args.updates) for n in sizes}
        print(f"inputs generated in {time.monotonic() - t:.0f} s; local[2], 4 partitions, driver heap "
              f"{args.driver_memory}", flush=True)
        names = ["keyed"] if args.suite == "keyed" else [p.strip() for p in args.providers.split(",") if p.strip()]
        for name in names:
            if args.suite == "provider" and name not in PROVIDERS:
                parser.error(f"unknown provider {name!r}; one of {', '.join(PROVIDERS)}")
            figures["runs"][name] = run_provider(name, args, workdir, files, confs)
        if args.suite == "keyed" and args.timers:
            figures["runs"]["timers"] = run_timers(args, workdir, args.timers)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report(figures, sizes)
    if args.json:
        results.write_json(args.json, figures)
    return 0


def report(figures: dict, sizes: list[int]) -> None:
    runs = figures["runs"]
    print(f"\n{'run':<20}{'keys':>12}{'batch s':>9}{'heap MB':>9}{'live MB':>9}{'held MB':>9}{'JVM RSS':>9}"
          f"{'worker':>9}{'anon':>9}{'memUsed':>9}")
    for name, r in runs.items():
        for n, e in sorted(r.get("first", {}).items()):
            if e["seconds"] is None:
                print(f"{name:<20}{n:>12,}  stopped: {e['error']}")
                continue
            print(f"{name:<20}{n:>12,}{e['seconds']:>9.1f}{e['heap_peak_mb']:>9.0f}{e['live_set_mb']:>9.0f}"
                  f"{e.get('held_mb') or 0:>9.0f}{e['jvm_rss_mb']:>9.0f}{e['worker_rss_mb']:>9.0f}"
                  f"{e['worker_anon_mb']:>9.0f}{e['memory_used_mb']:>9.0f}")
    ours, base = runs.get("sparkstate", {}), runs.get("rocksdb", {})
    for n in sizes:
        a, b = ours.get("first", {}).get(n, {}), base.get("first", {}).get(n, {})
        if a.get("seconds") and b.get("seconds"):
            print(f"sparkstate / Spark RocksDB, one batch of {n:,} keys: {a['seconds'] / b['seconds']:.2f}")
    if ours.get("updates") and base.get("updates"):
        print(f"sparkstate / Spark RocksDB, batches of 1M updates: median "
              f"{ours['updates']['median_s'] / base['updates']['median_s']:.2f}, slowest "
              f"{ours['updates']['max_s'] / base['updates']['max_s']:.2f}")
    if ours.get("restart", {}).get("first_batch_s") and base.get("restart", {}).get("first_batch_s"):
        print(f"sparkstate / Spark RocksDB, restart with the local state deleted: "
              f"{ours['restart']['first_batch_s'] / base['restart']['first_batch_s']:.2f}")
    for figure, label in (("heap_peak_mb", "peak used heap"), ("held_mb", "heap held after a full GC")):
        heaps = [round(e[figure]) for _, e in sorted(ours.get("first", {}).items()) if e.get(figure)]
        if len(heaps) > 1:
            print(f"sparkstate {label} from the smallest to the largest first batch: {heaps} MB "
                  f"(largest / smallest {max(heaps) / min(heaps):.2f})")


if __name__ == "__main__":
    sys.exit(main())

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
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psutil

PROVIDERS = {
    "rocksdb": "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "sparkstate": "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider",
    "sparkstate-hashmap": "org.apache.spark.sql.execution.streaming.state.sparkstate.SparkStateProvider",
}
BACKEND_CONF = "spark.sql.streaming.stateStore.sparkState.backend"
#: When this module was imported: in a worker process, its start (for the session's start time).
IMPORTED = time.monotonic()
ROWS_PER_GROUP = 1_000_000
MB = 2 ** 20


# ------------------------------------------------------------------------------------------ inputs
def write_keys(path: str, keys_of_chunk, chunks: int, mtime: int) -> None:
    """One parquet file written a million keys at a time (bounded memory), with modification time
    ``mtime`` (the file source orders files by it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = path + ".tmp"
    with pq.ParquetWriter(tmp, pa.schema([("k", pa.int64())])) as writer:
        for c in range(chunks):
            writer.write_table(pa.table({"k": keys_of_chunk(c)}), row_group_size=ROWS_PER_GROUP)
    os.utime(tmp, (mtime, mtime))
    os.replace(tmp, path)


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
                   lambda c: rng.permutation(np.arange(c, first, chunks, dtype=np.int64)), chunks, 1_700_000_000)
        os.replace(out["first"] + ".tmp", out["first"])
    for u in range(updates + 1):  # the last one is the restart's batch
        path = os.path.join(workdir, f"update-{first}-{u}.parquet")
        if not os.path.exists(path):
            n = min(ROWS_PER_GROUP, first)
            write_keys(path, lambda _, n=n: rng.choice(first, size=n, replace=False).astype(np.int64), 1,
                       1_700_000_000 + 10 * (u + 1))
        out["updates"].append(path)
    return out


# ------------------------------------------------------------------------------------------ a run
def run_worker(spec: dict) -> None:
    """One process: start the session, run the query over what is in ``spec['input_dir']``, write one
    JSON line per committed batch to ``spec['result']``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[2]").appName(f"large-state-{spec['provider']}")
               .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", spec["driver_memory"])
               .config("spark.local.dir", spec["local_dir"]))
    if spec["provider"].startswith("sparkstate") or spec["suite"] == "keyed":
        from spark_state import configure

        builder = configure(builder) or builder
    if spec["suite"] == "provider":
        builder = builder.config("spark.sql.streaming.stateStore.providerClass", PROVIDERS[spec["provider"]])
        if spec["provider"].startswith("sparkstate"):
            builder = builder.config(BACKEND_CONF, "hashmap" if spec["provider"].endswith("hashmap") else "rocksdb")
    for key, value in spec.get("confs", {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    session_start_ms = round((time.monotonic() - IMPORTED) * 1000)
    management = spark._jvm.java.lang.management.ManagementFactory
    memory_bean = management.getMemoryMXBean()
    old_gen = [p for p in management.getMemoryPoolMXBeans() if "Old Gen" in p.getName() or "Tenured" in p.getName()]
    peaks = {"heap": 0, "old_after_gc": 0, "held": 0}
    stop = threading.Event()
    held_every = spec.get("held_every") or 0
    last_full_gc = time.monotonic()

    def sample() -> None:
        nonlocal last_full_gc
        while not stop.is_set():
            try:
                peaks["heap"] = max(peaks["heap"], memory_bean.getHeapMemoryUsage().getUsed())
                if held_every and time.monotonic() - last_full_gc >= held_every:
                    # What the heap holds: used right after a full collection (G1's System.gc() is one).
                    spark._jvm.java.lang.System.gc()
                    peaks["held"] = max(peaks["held"], memory_bean.getHeapMemoryUsage().getUsed())
                    last_full_gc = time.monotonic()
                for pool in old_gen:
                    usage = pool.getCollectionUsage()
                    if usage is not None:
                        peaks["old_after_gc"] = max(peaks["old_after_gc"], usage.getUsed())
            except Exception:  # the JVM is going away
                return
            stop.wait(0.25)

    df = spark.readStream.schema("k bigint").option("maxFilesPerTrigger", 1).parquet(spec["input_dir"])
    if spec["suite"] == "keyed":
        query = keyed_query(df, spec)
    elif spec.get("query") == "dedup":
        query = df.dropDuplicates(["k"])
    else:
        query = df.groupBy("k").count()
    started = time.monotonic()
    mode = "append" if spec.get("query") == "dedup" else "update"
    writer = (query.writeStream.format("noop").outputMode(mode)
              .option("checkpointLocation", spec["checkpoint"]).trigger(availableNow=True))
    q = writer.start()
    threading.Thread(target=sample, daemon=True).start()
    seen = -1
    try:
        while True:
            done = q.awaitTermination(1)
            for p in q.recentProgress:
                if p.batchId <= seen or "triggerExecution" not in (p.durationMs or {}):
                    continue
                seen = p.batchId
                ops = p.stateOperators or []
                line = {"batch": p.batchId, "input_rows": p.numInputRows,
                        "trigger_ms": p.durationMs["triggerExecution"],
                        "since_start_ms": round((time.monotonic() - started) * 1000),
                        "session_start_ms": session_start_ms,
                        "state_rows": sum(op.numRowsTotal for op in ops),
                        "memory_used_bytes": sum(op.memoryUsedBytes for op in ops),
                        "duration_ms": dict(p.durationMs or {}),
                        "commit_ms": sum(op.commitTimeMs for op in ops),
                        "custom": {k: sum(dict(op.customMetrics or {}).get(k, 0) for op in ops)
                                   for k in {k for op in ops for k in dict(op.customMetrics or {})}},
                        "heap_peak_bytes": peaks["heap"], "old_after_gc_peak_bytes": peaks["old_after_gc"],
                        "held_peak_bytes": peaks["held"]}
                if spec["suite"] == "keyed":
                    line.update(keyed_figures(p))
                peaks["heap"] = peaks["held"] = 0  # per batch from here on
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


def keyed_query(df, spec: dict):
    """The keyed suite's query: a running count per key, or (``timers``) one event-time timer per key
    that the next batch's watermark makes due."""
    import spark_state
    from pyspark.sql import functions as F

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import large_state_fns as fns

    # PySpark's workers unpickle the functions by module name: ship the module to them.
    df.sparkSession.sparkContext.addPyFile(os.path.join(here, "large_state_fns.py"))

    if spec.get("timers"):
        events = df.withColumn("ts", F.timestamp_seconds(F.col("k") % 1000)).withWatermark("ts", "1 second")
        return spark_state.keyed_process(events, "k", fns.TimerPerKey(), "k bigint, fired bigint",
                                         parallelism=4, name="timers")
    return spark_state.keyed_process(df, "k", fns.RunningCount(), "k bigint, n bigint", parallelism=4, name="count")


def keyed_figures(progress) -> dict:
    """The keyed function's figures of a batch (its observation in the progress: ``figures``)."""
    for name, row in dict(progress.observedMetrics or {}).items():
        if name.startswith("spark_state."):
            figures = row.asDict(recursive=True).get("figures") or {}
            return {"keyed": {k: v for k, v in figures.items() if isinstance(v, (int, float))}}
    return {}


def watch_rss(pid: int, stop: threading.Event, peaks: dict) -> None:
    """Peak RSS of the run's JVM and of one of its Python workers (provider workers, or PySpark's
    workers for keyed functions), sampled every 0.25 s; for workers also the peak of their anonymous
    RSS (``RssAnon``: without the pages of files they map, such as a commit's changes file, which the
    kernel drops when it needs the memory)."""
    while not stop.is_set():
        try:
            for child in psutil.Process(pid).children(recursive=True):
                try:
                    cmd = " ".join(child.cmdline())
                    rss = child.memory_info().rss
                except psutil.Error:
                    continue
                kind = "jvm" if "java" in os.path.basename(cmd.split(" ")[0]) else \
                    "workers" if "spark_state.provider.worker" in cmd or "pyspark.daemon" in cmd \
                    or "pyspark/daemon" in cmd or "pyspark.worker" in cmd else None
                if kind:
                    peaks[kind] = max(peaks.get(kind, 0), rss)
                if kind == "workers":
                    peaks["workers_anon"] = max(peaks.get("workers_anon", 0), _anon_rss(child.pid))
        except psutil.Error:
            return
        stop.wait(0.25)


def _anon_rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def launch(spec: dict, cap_s: float) -> tuple[list[dict], dict]:
    """Run ``spec`` in its own process and session; returns its lines and the peak RSS (bytes) of its
    JVM and Python workers."""
    peaks: dict = {}
    stop = threading.Event()
    with open(spec["result"] + ".log", "w") as log:
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--_worker", json.dumps(spec)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        watcher = threading.Thread(target=watch_rss, args=(proc.pid, stop, peaks), daemon=True)
        watcher.start()
        try:
            proc.wait(timeout=cap_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)  # its own session: the JVM and Python workers go too
            proc.wait()
            with open(spec["result"], "a") as out:
                out.write(json.dumps({"error": f"stopped after the {cap_s:.0f} s cap"}) + "\n")
        stop.set()
        watcher.join()
    lines = []
    if os.path.exists(spec["result"]):
        with open(spec["result"]) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    return lines, peaks


def stage(input_dir: str, files: list[str]) -> None:
    """Make ``input_dir`` hold exactly ``files`` (hard links; modification times kept)."""
    os.makedirs(input_dir, exist_ok=True)
    for f in files:
        target = os.path.join(input_dir, os.path.basename(f))
        if not os.path.exists(target):
            os.link(f, target)


def run_provider(name: str, args, workdir: str, inputs: dict[int, dict], confs: dict) -> dict:
    """Every phase of one provider; returns its figures."""
    suite = args.suite
    out: dict = {"first": {}}
    largest = max(inputs)
    for n, files in sorted(inputs.items()):
        tag = f"{name}-{n}"
        run_dir = os.path.join(workdir, "runs", tag)
        shutil.rmtree(run_dir, ignore_errors=True)
        input_dir = os.path.join(run_dir, "in")
        first_files = [os.path.join(files["first"], f) for f in sorted(os.listdir(files["first"]))]
        updates = files["updates"][:args.updates] if n == largest and suite == "provider" else []
        stage(input_dir, first_files + updates)
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
            stage(input_dir, [files["updates"][args.updates]])
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
    stage(input_dir, [os.path.join(files["first"], f) for f in sorted(os.listdir(files["first"]))]
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
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json")
    parser.add_argument("--_worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._worker:
        run_worker(json.loads(args._worker))
        return 0
    confs = dict(item.split("=", 1) for item in args.conf)
    sizes = [int(s) for s in args.first_batches.split(",") if s.strip()]
    workdir = args.workdir or tempfile.mkdtemp(prefix="large-state-bench-")
    results: dict = {"settings": {k: v for k, v in vars(args).items() if not k.startswith("_")}, "runs": {}}
    try:
        t = time.monotonic()
        inputs = {n: generate(workdir, n, args.updates) for n in sizes}
        print(f"inputs generated in {time.monotonic() - t:.0f} s; local[2], 4 partitions, driver heap "
              f"{args.driver_memory}", flush=True)
        names = ["keyed"] if args.suite == "keyed" else [p.strip() for p in args.providers.split(",") if p.strip()]
        for name in names:
            if args.suite == "provider" and name not in PROVIDERS:
                parser.error(f"unknown provider {name!r}; one of {', '.join(PROVIDERS)}")
            results["runs"][name] = run_provider(name, args, workdir, inputs, confs)
        if args.suite == "keyed" and args.timers:
            results["runs"]["timers"] = run_timers(args, workdir, args.timers)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report(results, sizes)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    return 0


def report(results: dict, sizes: list[int]) -> None:
    runs = results["runs"]
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

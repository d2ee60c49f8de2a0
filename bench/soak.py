"""Soak test: do files in checkpoint storage, local disk and worker memory stay bounded over
thousands of micro-batches, with snapshots, retention and maintenance at work?

One streaming query in one application carries both halves of spark-state, so that "batch N"
means the same for both:

    rate-micro-batch (--rows-per-batch rows, keys uniform over --keys)
      -> keyed_process(SoakCount)      state in PySpark's Python workers (RocksDB, in-process)
      -> groupBy(k).agg(count, max)    state on spark-state's provider (its Python workers)
      -> noop sink, back-to-back batches (processingTime 0)

Snapshots every ``--snapshot-interval`` commits, ``--retained`` versions kept (state and Spark's
own logs: ``minBatchesToRetain``), maintenance every ``--maintenance-interval``.

At batch 1 and every ``--sample-every`` batches it records:

* checkpoint storage: files and bytes of the query's checkpoint (Spark's logs and the
  provider's state under ``state/``) and of the keyed state location;
* local disk: the provider workers' directory (``<spark.local.dir>/**/spark-state-*``: store
  working copies, read views, worker logs), the keyed stores' working copies
  (``$TMPDIR/spark-state-*`` of PySpark's workers), and Spark's own block manager dirs;
* memory: RSS and open files of the provider workers, PySpark's daemon and workers, the
  executor/driver JVM and this driver; the JVM heap in use after a full GC.

It prints a table and the ratios of the last sample to the sample at batch 100.

Usage: python bench/soak.py [--batches 1000] [--sample-every 100] [--json out.json]
                            [--workdir DIR --keep]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import soakmetrics
from harness import heap, processes, results, sessions


def start(args, workdir: str):
    """The session and the running query."""
    from pyspark.sql import functions as F

    from harness.keyed_fns import SoakCount
    from spark_state import keyed_process

    spark = sessions.start(sessions.builder(
        "spark-state-soak", spark_state=True, configure_options={"snapshotInterval": str(args.snapshot_interval)},
        partitions=args.partitions, local_dir=os.path.join(workdir, "spark-local"),
        confs={"spark.sql.streaming.stateStore.maintenanceInterval": args.maintenance_interval,
               "spark.sql.streaming.minBatchesToRetain": str(args.retained),
               # Native Memory Tracking: which of the JVM's native areas an RSS change comes from.
               "spark.driver.extraJavaOptions": "-XX:NativeMemoryTracking=summary"}))
    events = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", args.rows_per_batch)
              .option("numPartitions", args.partitions).load()
              .select((F.col("value") * 7919 % args.keys).cast("string").alias("k"), (F.col("value") % 10).alias("v")))
    counted = keyed_process(events, "k", SoakCount(), "k string, n bigint", parallelism=args.partitions,
                            state_location=os.path.join(workdir, "keyed-state"),
                            engine={"snapshotInterval": str(args.snapshot_interval),
                                    "retainedVersions": str(args.retained)})
    agg = counted.groupBy("k").agg(F.count("*").alias("rows"), F.max("n").alias("n"))
    query = (agg.writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", os.path.join(workdir, "checkpoint"))
             .trigger(processingTime="0 seconds").start())
    return spark, query


def sample(spark, workdir: str, batch: int, started: float) -> dict:
    ckpt = os.path.join(workdir, "checkpoint")
    keyed = os.path.join(workdir, "keyed-state")
    local = os.path.join(workdir, "spark-local")
    # PythonWorker.baseDir of each executor JVM: <spark.local.dir>/spark-<uuid>/spark-state-<uuid>
    provider_dirs = soakmetrics.dirs_matching(os.path.join(local, "*", "spark-state-*"))
    keyed_local = soakmetrics.dirs_matching(os.path.join(workdir, "tmp", "spark-state-*"))
    blockmgr = soakmetrics.dirs_matching(os.path.join(local, "**", "blockmgr-*"))
    views = sum(len(soakmetrics.dirs_matching(os.path.join(d, "stores", "spark-state-*", "views-*", "v*")))
                for d in provider_dirs)
    heap_mb, committed_mb = heap.heap_after_full_gc(spark)
    return {
        "batch": batch,
        "elapsed_s": round(time.monotonic() - started, 1),
        "checkpoint": vars(soakmetrics.dir_stats(ckpt)),
        "checkpoint_state": vars(soakmetrics.dir_stats(os.path.join(ckpt, "state"))),
        "checkpoint_parts": soakmetrics.subdir_stats(ckpt),
        "keyed_state": vars(soakmetrics.dir_stats(keyed)),
        "keyed_state_parts": soakmetrics.subdir_stats(keyed),
        "local_provider": vars(soakmetrics.dir_stats(*provider_dirs)),
        "local_provider_parts": {os.path.basename(d): _provider_parts(d) for d in provider_dirs},
        "provider_views": views,
        "local_keyed": vars(soakmetrics.dir_stats(*keyed_local)),
        "local_keyed_dirs": len(keyed_local),
        "local_spark_blockmgr": vars(soakmetrics.dir_stats(*blockmgr)),
        "processes": processes.process_summary(os.getpid()),
        "jvm_heap_used_after_gc_mb": round(heap_mb, 1),
        # The heap the JVM has committed (its pages count in RSS once touched, whatever is live).
        "jvm_heap_committed_mb": round(committed_mb, 1),
        "jvm_native_committed_mb": processes.native_memory(heap.jvm_pid(spark)),
    }


def _provider_parts(base: str) -> dict:
    """A provider base dir: its worker logs (files directly in it) and each worker's process
    directory under ``stores/`` (store working copies and read views)."""
    parts = {"worker logs": soakmetrics.subdir_stats(base).get(".", {"files": 0, "bytes": 0})}
    for d in soakmetrics.dirs_matching(os.path.join(base, "stores", "*")):
        parts[os.path.basename(d)] = soakmetrics.subdir_stats(d)
    return parts


COLUMNS = [
    ("batch", lambda s: s["batch"]),
    ("ckpt files", lambda s: s["checkpoint"]["files"]),
    ("ckpt MB", lambda s: s["checkpoint"]["bytes"] / 2**20),
    ("keyed files", lambda s: s["keyed_state"]["files"]),
    ("keyed MB", lambda s: s["keyed_state"]["bytes"] / 2**20),
    ("local prov MB", lambda s: s["local_provider"]["bytes"] / 2**20),
    ("local prov files", lambda s: s["local_provider"]["files"]),
    ("local keyed MB", lambda s: s["local_keyed"]["bytes"] / 2**20),
    ("local keyed files", lambda s: s["local_keyed"]["files"]),
    ("prov worker RSS", lambda s: s["processes"]["provider_workers"]["rss_mb"]),
    ("pyspark wkr RSS", lambda s: s["processes"]["pyspark_workers"]["max_rss_mb"]),
    ("JVM RSS", lambda s: s["processes"]["jvm"]["rss_mb"]),
    ("JVM heap", lambda s: s["jvm_heap_used_after_gc_mb"]),
    ("JVM heap commit", lambda s: s["jvm_heap_committed_mb"]),
    ("JVM non-heap", lambda s: sum(v for k, v in s["jvm_native_committed_mb"].items() if k != "Java Heap")),
    ("JVM fds", lambda s: s["processes"]["jvm"]["fds"]),
    ("blockmgr MB", lambda s: s["local_spark_blockmgr"]["bytes"] / 2**20),
]


def table(samples: list[dict]) -> str:
    widths = [max(len(name), 8) for name, _ in COLUMNS]
    lines = ["  ".join(name.rjust(w) for (name, _), w in zip(COLUMNS, widths))]
    for s in samples:
        lines.append("  ".join(_fmt(get(s)).rjust(w) for (_, get), w in zip(COLUMNS, widths)))
    return "\n".join(lines)


def ratios(samples: list[dict], base_batch: int = 100) -> dict[str, float]:
    """Last sample over the sample at ``base_batch`` (or the first one after it), per column."""
    base = next((s for s in samples if s["batch"] >= base_batch), None)
    last = samples[-1]
    if base is None or base is last:
        return {}
    out = {}
    for name, get in COLUMNS[1:]:
        b, l_ = get(base), get(last)
        out[name] = round(l_ / b, 3) if b else float("nan")
    return out


def _fmt(value) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--sample-every", type=int, default=100)
    ap.add_argument("--rows-per-batch", type=int, default=2000)
    ap.add_argument("--keys", type=int, default=5000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--snapshot-interval", type=int, default=5)
    ap.add_argument("--retained", type=int, default=10)
    ap.add_argument("--maintenance-interval", default="2s")
    ap.add_argument("--workdir", help="default: a temp dir, removed at the end unless --keep")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--json", help="write the samples here")
    args = ap.parse_args(argv)

    workdir = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="spark-state-soak-"))
    os.makedirs(os.path.join(workdir, "tmp"), exist_ok=True)
    # Before the JVM starts: every Python worker inherits it, so the keyed stores' working
    # copies land where we can measure them.
    os.environ["TMPDIR"] = os.path.join(workdir, "tmp")
    targets = sorted({1, *range(args.sample_every, args.batches + 1, args.sample_every), args.batches})
    samples: list[dict] = []
    spark, query = start(args, workdir)
    started = time.monotonic()
    try:
        while targets:
            if query.exception() is not None:
                raise RuntimeError(f"the soak query failed: {query.exception()}")
            progress = query.lastProgress
            done = progress["batchId"] + 1 if progress else 0  # batches completed
            if done >= targets[0]:
                while targets and done >= targets[0]:
                    targets.pop(0)
                samples.append(sample(spark, workdir, done, started))
                s = samples[-1]
                print(f"batch {done}: checkpoint {s['checkpoint']['files']} files, keyed state "
                      f"{s['keyed_state']['files']} files, provider workers "
                      f"{s['processes']['provider_workers']['rss_mb']} MB, {s['elapsed_s']} s", flush=True)
            else:
                time.sleep(0.2)
    finally:
        query.stop()
    print(table(samples))
    r = ratios(samples)
    if r:
        base = next(s for s in samples if s["batch"] >= 100)["batch"]
        print(f"\nratios, batch {samples[-1]['batch']} / batch {base}:")
        for name, value in r.items():
            print(f"  {name:18} {value}")
    if args.json:
        results.write_json(args.json, {"args": results.settings(args), "samples": samples, "ratios": r})
    spark.stop()
    if not args.workdir and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

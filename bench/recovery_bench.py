"""Recovery benchmark: how long a stateful query takes to commit its first batch after losing its
local state, as the state grows, on spark-state's provider and on Spark's RocksDB provider.

Workload: ``groupBy("k").count()`` in update mode into the ``noop`` sink, ``local[2]``,
``spark.sql.shuffle.partitions=4``, ``spark.driver.memory`` 1 GB (the executor's heap in local
mode), each provider in its own processes on the same parquet files (the processes of
``bench/large_state_bench.py``). For every state size N of ``--sizes``:

1. one batch of N distinct keys builds the state on a fresh checkpoint (not measured);
2. **a restart on empty disks**: the process ends, its local directories (``spark.local.dir``:
   our stores' working copies, Spark's RocksDB instances, our workers' directories) are deleted,
   and a new process runs one batch of ``--restart-updates`` existing keys on the checkpoint.

Reported per run: the time from the process's start to the first committed batch, split into
Spark's own part (the session's start, then the query's start up to its first batch, and the
batch's planning, offsets and log writes) and the batch's execution (``addBatch``, which holds
the stores' loads); for spark-state also the stores' load figures from the operator's custom
metrics (``sparkStateLoadTimeMs`` summed over the 4 stores, files and bytes fetched or linked,
changelog bytes replayed). The ratio is spark-state / Spark RocksDB, and per provider the load at
the largest size over the smallest.

``--providers`` takes ``sparkstate`` (``backend=rocksdb``), ``sparkstate-hashmap``, ``rocksdb`` (Spark's)
and ``keyed``: ``keyed_process`` keeping a running count per key (its stores' load, ``load_ms``, is
its slowest task's rather than a sum). ``--rescale P`` restarts at ``P`` partitions instead: a
savepoint of the stopped query, restored at that count (both timed), before the restart.

Usage:
    python bench/recovery_bench.py [--providers sparkstate,rocksdb] [--sizes 1000000,10000000,30000000]
        [--restart-updates 100000] [--rounds 1] [--driver-memory 1g] [--rescale P] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import large_state_bench as L  # the worker processes and inputs of the large-state benchmark
from harness import inputs, results, stats
from harness.stats import median

#: Spark's own steps of a batch in its progress (``durationMs``), besides ``addBatch``.
SPARK_STEPS = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "commitOffsets")
#: spark-state's load figures among the operator's custom metrics.
LOAD_METRICS = ("sparkStateLoadTimeMs", "sparkStateLoadFilesFetched", "sparkStateLoadBytesFetched",
                "sparkStateLoadFilesLinked", "sparkStateChangelogBytesReplayed", "sparkStateRestoresFromCheckpoint")


#: The contender that runs a keyed function (``keyed_process``: a running count per key, rocksdb
#: backend) instead of Spark's aggregation on a provider.
KEYED = "keyed"
#: A keyed function's load figures (its progress figures), under the provider's metric names. Its
#: ``load_ms`` is its slowest task's, where the provider's load time is summed over the stores.
KEYED_LOAD = {"load_ms": "sparkStateLoadTimeMs", "load_files_fetched": "sparkStateLoadFilesFetched",
              "load_bytes_fetched": "sparkStateLoadBytesFetched",
              "changelog_bytes_replayed": "sparkStateChangelogBytesReplayed"}


def restart_inputs(workdir: str, size: int, updates: int) -> tuple[str, str]:
    """The first batch of ``size`` distinct keys (large_state_bench's) and a file of ``updates``
    existing keys for the restart."""
    import numpy as np

    first = L.generate(workdir, size, 0)["first"]
    path = os.path.join(workdir, f"restart-{size}-{updates}.parquet")
    if not os.path.exists(path):
        rng = np.random.default_rng(11)
        L.write_keys(path, lambda _: rng.choice(size, size=min(updates, size), replace=False).astype(np.int64), 1, 1)
    return first, path


def one_restart(name: str, size: int, args, workdir: str, first_dir: str, restart_file: str, r: int) -> dict:
    run_dir = os.path.join(workdir, "runs", f"{name}-{size}-{r}")
    shutil.rmtree(run_dir, ignore_errors=True)
    input_dir = os.path.join(run_dir, "in")
    inputs.stage(input_dir, [os.path.join(first_dir, f) for f in sorted(os.listdir(first_dir))])
    keyed = name == KEYED
    spec = {"provider": name, "suite": "keyed" if keyed else "provider", "input_dir": input_dir,
            "driver_memory": args.driver_memory,
            "checkpoint": os.path.join(run_dir, "ckpt"), "local_dir": os.path.join(run_dir, "local"),
            "result": os.path.join(run_dir, "build.jsonl"), "confs": {}, "query": "count"}
    lines, _ = L.launch(spec, args.cap_s)
    if not [b for b in lines if "batch" in b]:
        return {"error": next((b["error"] for b in lines if "error" in b), "the state was not built")}
    shutil.rmtree(spec["local_dir"], ignore_errors=True)  # a new executor: no local state
    checkpoint, offline = rescale_offline(spec, run_dir, args.rescale) if args.rescale else (spec["checkpoint"], {})
    inputs.stage(input_dir, [restart_file])
    restart = dict(spec, result=os.path.join(run_dir, "restart.jsonl"), checkpoint=checkpoint)
    lines, _ = L.launch(restart, args.cap_s)
    done = [b for b in lines if "batch" in b]
    if not done:
        return {"error": next((b["error"] for b in lines if "error" in b), "no batch")}
    b = done[0]
    steps = b.get("duration_ms", {})
    spark_batch_ms = sum(steps.get(k, 0) for k in SPARK_STEPS)
    out = {"first_commit_s": (b["session_start_ms"] + b["since_start_ms"]) / 1000,
           "session_start_s": b["session_start_ms"] / 1000,
           "query_to_batch_s": (b["since_start_ms"] - b["trigger_ms"]) / 1000,
           "spark_steps_s": spark_batch_ms / 1000,
           "add_batch_s": steps.get("addBatch", 0) / 1000,
           "state_rows": b["state_rows"],
           "load": ({KEYED_LOAD[k]: v for k, v in b.get("keyed", {}).items() if k in KEYED_LOAD} if keyed else
                    {k: b["custom"].get(k) for k in LOAD_METRICS if k in b["custom"]})}
    out["spark_own_s"] = out["session_start_s"] + out["query_to_batch_s"] + out["spark_steps_s"]
    out.update(offline)
    return out


def rescale_offline(spec: dict, run_dir: str, partitions: int) -> tuple[str, dict]:
    """``--rescale P``: a savepoint of the stopped query's checkpoint, restored into a new checkpoint
    at ``P`` partitions (the offline steps of a rescale); that checkpoint, which the restart runs
    on, and the two steps' times."""
    from spark_state.ops import restore, savepoint

    sp, rescaled = os.path.join(run_dir, "savepoint"), os.path.join(run_dir, "ckpt-rescaled")
    t = time.monotonic()
    savepoint(spec["checkpoint"], sp, progress=False)
    taken = time.monotonic()
    restore(sp, rescaled, partitions=partitions, progress=False)
    return rescaled, {"savepoint_s": taken - t, "restore_s": time.monotonic() - taken}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", default="sparkstate,rocksdb")
    parser.add_argument("--sizes", default="1000000,10000000,30000000")
    parser.add_argument("--restart-updates", type=int, default=100_000)
    parser.add_argument("--rounds", type=stats.rounds, default=1)
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--rescale", type=int, help="restart at this many partitions: a savepoint restored at "
                        "that count first (spark-state only; Spark's providers cannot change it)")
    parser.add_argument("--cap-s", type=float, default=1800)
    parser.add_argument("--workdir")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    providers = args.providers.split(",")
    if args.rescale and "rocksdb" in providers:
        parser.error("--rescale: Spark's RocksDB provider cannot restore at another partition count")
    sizes = [int(s) for s in args.sizes.split(",")]
    workdir = args.workdir or tempfile.mkdtemp(prefix="recovery-bench-")
    figures: dict = {p: {} for p in providers}
    try:
        for size in sizes:
            first_dir, restart_file = restart_inputs(workdir, size, args.restart_updates)
            for r in range(args.rounds):
                for name in providers if r % 2 == 0 else list(reversed(providers)):
                    t = time.monotonic()
                    res = one_restart(name, size, args, workdir, first_dir, restart_file, r)
                    figures[name].setdefault(size, []).append(res)
                    print(f"  {name} {size:,} keys, round {r + 1}: " + (
                        f"first commit {res['first_commit_s']:.1f} s after the start (Spark's own part "
                        f"{res['spark_own_s']:.1f} s, the batch's execution {res['add_batch_s']:.1f} s); "
                        f"load {res['load']}" if "error" not in res else f"failed: {res['error'][:300]}")
                          + f" ({time.monotonic() - t:.0f} s in all)", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    report(figures, sizes, providers)
    if args.json:
        results.write_json(args.json, {"settings": results.settings(args), "results": figures})
    return 0


def _median(runs: list[dict], key: str, sub: str = "") -> float:
    """The median of a figure over the rounds that did not fail (NaN if all did)."""
    return median((r[key].get(sub) if sub else r[key]) for r in runs if "error" not in r)


def report(figures: dict, sizes: list[int], providers: list[str]) -> None:
    print("\nrestart on empty disks: start to first committed batch (median of rounds), s")
    print("| state | " + " | ".join(providers) + (" | ratio |" if len(providers) > 1 else " |"))
    for size in sizes:
        cells = [_median(figures[p].get(size, []), "first_commit_s") for p in providers]
        row = f"| {size / 1e6:g}M keys | " + " | ".join(f"{c:.1f}" for c in cells)
        if len(cells) > 1:
            row += f" | {cells[0] / cells[1]:.2f}"
        print(row + " |")
    for p in providers:
        own = [_median(figures[p].get(s, []), "spark_own_s") for s in sizes]
        execution = [_median(figures[p].get(s, []), "add_batch_s") for s in sizes]
        print(f"{p}: Spark's own part {', '.join(f'{v:.1f}' for v in own)} s; the batch's execution "
              f"{', '.join(f'{v:.1f}' for v in execution)} s")
        if any("restore_s" in r for s in sizes for r in figures[p].get(s, [])):
            offline = [(_median(figures[p].get(s, []), "savepoint_s"), _median(figures[p].get(s, []), "restore_s"))
                       for s in sizes]
            print(f"{p}: before the restart, the savepoint and its restore at another partition count: "
                  + ", ".join(f"{a:.1f} + {b:.1f}" for a, b in offline) + " s")
        loads = [_median(figures[p].get(s, []), "load", "sparkStateLoadTimeMs") for s in sizes]
        if all(v == v for v in loads):  # no NaN: the provider reports our load metrics
            how = "the slowest task's" if p == KEYED else "summed over the stores"
            print(f"{p}: the stores' load, {how}: {', '.join(f'{v:.0f}' for v in loads)} ms; "
                  f"largest / smallest {loads[-1] / max(loads[0], 1):.2f}")


if __name__ == "__main__":
    sys.exit(main())

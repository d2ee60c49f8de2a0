"""keyed_process vs Spark's transformWithStateInPandas (RocksDB provider): same logic, same input.

Workloads (``--rows-per-batch`` rows per micro-batch, keys uniform over ``--keys``):

* ``count``   -- keyed running count: every row increments its key's count (value state)
  and emits ``(k, count)``.
* ``listmap`` -- every row appends ``v`` to its key's list state and increments the count of
  bucket ``v % 10`` in its key's map state, and emits ``(k, bucket, bucket count)``.
* ``count_timer`` -- the keyed count with one event-time timer per key (Flink's periodic
  page-view counter): the input is ``withWatermark("ts", "5 seconds")``; the first row of a
  key after an emission registers a timer at ``ts + 10 s`` (kept in value state), and the
  timer emits the key's count. ``keyed_process`` only (transformWithStateInPandas has no
  equivalent run here).

Floors and forms for the Python per-row cost (``--suite speed``):

* ``passthrough`` -- the same routed stream (key group + route columns, ``repartition``) through
  a ``mapInArrow`` that returns its input's ``k`` and ``v`` columns: no Python per row at all;
* ``dictloop`` -- the same routed stream through a ``mapInArrow`` with a bare per-row Python
  loop counting in a dict (``to_pylist`` per column, one dict get/set and one output tuple per
  row): the per-row floor a keyed function is measured against;
* ``process`` -- ``keyed_process`` with the per-row ``process_element`` function;
* ``vector`` -- ``keyed_process`` with the vectorized form ``process_elements(rows, ctx)``
  (one call per key and Arrow batch).

``process`` and ``vector`` run once per backend in ``--backends`` (rocksdb, hashmap).

keyed_process runs the per-row Flink-style function (``KeyedProcessFunction``) with the
engine in-process (default backend RocksDB). transformWithStateInPandas runs the same logic per
key group, vectorised with pandas the way its API invites (one state read and write per key
and batch, not per row), on Spark's RocksDB provider (the only one it accepts).

Method: input is generated up front (one parquet file per micro-batch), read with
``maxFilesPerTrigger=1`` and ``trigger(availableNow=True)`` into the ``noop`` sink; ``local[2]``,
``--partitions`` partitions. Every (workload, engine) runs in a fresh Python process and JVM;
the first ``--warmup`` batches are not measured; the figure is the median ``addBatch`` time of
the measured batches, as rows/s. Ratios are keyed_process over transformWithStateInPandas.
``--rounds N`` runs every engine N times, interleaved (A B C A B C ...): a figure is then the
median of its rounds, and a ratio the median of the rounds' ratios, printed with their spread
(one batch of the count takes well under a second here, so a single run swings by +-20 %).
Everything runs at each driver heap of ``--heaps`` (default ``1g,4g``: Spark's default driver
memory and a larger one), ratios within a heap; ``--record`` keeps the ratios for
``bench/compare.py``. The keyed functions are ``bench/harness/keyed_fns.py``'s.

Usage: python bench/keyed_bench.py [--rows-per-batch 50000] [--keys 25000] [--batches 4]
           [--workloads count,listmap,count_timer] [--engines process,tws]
           [--backends rocksdb,hashmap] [--heaps 1g,4g] [--rounds 1] [--json out.json] [--record]
       python bench/keyed_bench.py --suite speed    # the per-row cost shape: 200k rows/batch, 20k keys,
           # workloads count,listmap; engines passthrough,dictloop,process,vector; both backends
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

from harness import inputs, queries, results, sessions, stats, workers
from harness.contenders import CONTENDERS

WORKLOADS = ("count", "listmap", "count_timer")
ENGINES = ("process", "tws")
OUTPUTS = {"count": "k bigint, count bigint", "listmap": "k bigint, bucket bigint, count bigint",
           "count_timer": "k bigint, count bigint"}
#: engines each workload runs on (others are skipped)
SUPPORTED = {"count": ("passthrough", "dictloop", "process", "vector", "tws"),
             "listmap": ("process", "vector", "tws"), "count_timer": ("process",)}
#: engines that run keyed_process (once per backend in --backends)
KEYED_ENGINES = ("process", "vector")
#: event time of batch b's rows: [b * BATCH_EVENT_MS, (b + 1) * BATCH_EVENT_MS)
BATCH_EVENT_MS = 10_000


# ------------------------------------------------------------------------------ functions
def process_function(workload: str):
    """The keyed_process function of a workload (per-row form)."""
    from harness import keyed_fns

    return {"count": keyed_fns.RunningCount, "listmap": keyed_fns.ListMap,
            "count_timer": keyed_fns.CountWithTimer}[workload]()


def vector_function(workload: str):
    """The vectorized form (``process_elements``: one call per key and Arrow batch)."""
    from harness import keyed_fns

    return {"count": keyed_fns.RunningCountVector, "listmap": keyed_fns.ListMapVector}[workload]()


def floor_carrier(df, engine: str, partitions: int):
    """The floors: the stream routed exactly as keyed_process routes it, then a pass-through
    ``mapInArrow`` (``passthrough``) or a bare per-row Python dict count (``dictloop``)."""
    import pyarrow as pa

    from spark_state.process.routing import add_routing_columns

    routed = add_routing_columns(df, ["k"], partitions, 128)
    schema = pa.schema([("k", pa.int64()), ("count", pa.int64())])

    def passthrough(batches):
        for b in batches:
            yield pa.RecordBatch.from_arrays([b.column("k"), b.column("v")], schema=schema)

    counts: dict = {}  # per Python worker, across batches (the workers are reused)

    def dictloop(batches):
        get = counts.get
        for b in batches:
            ks = b.column("k").to_pylist()
            out = []
            append = out.append
            for k in ks:
                n = get(k, 0) + 1
                counts[k] = n
                append((k, n))
            cols = list(zip(*out)) if out else [[], []]
            yield pa.RecordBatch.from_arrays([pa.array(cols[0], pa.int64()), pa.array(cols[1], pa.int64())],
                                             schema=schema)

    return routed.mapInArrow(passthrough if engine == "passthrough" else dictloop, OUTPUTS["count"])


def tws_processor(workload: str):
    """The transformWithStateInPandas processor of a workload."""
    import numpy as np
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class RunningCount(StatefulProcessor):
        def init(self, handle):
            self.count = handle.getValueState("count", "count bigint")

        def handleInputRows(self, key, rows, timerValues):
            n = sum(len(pdf) for pdf in rows)
            state = self.count.get()  # None when unset: one round trip, not exists() + get()
            prev = state[0] if state is not None else 0
            self.count.update((prev + n,))
            yield pd.DataFrame({"k": np.full(n, key[0], dtype=np.int64),
                                "count": np.arange(prev + 1, prev + n + 1, dtype=np.int64)})

        def close(self):
            pass

    class ListMap(StatefulProcessor):
        def init(self, handle):
            self.values = handle.getListState("values", "v bigint")
            self.buckets = handle.getMapState("buckets", "b bigint", "n bigint")

        def handleInputRows(self, key, rows, timerValues):
            pdf = pd.concat(list(rows), ignore_index=True)
            self.values.appendList(pdf[["v"]])
            bucket = pdf["v"] % 10
            counts = bucket.groupby(bucket).cumcount() + 1
            out = np.empty(len(pdf), dtype=np.int64)
            for b, idx in bucket.groupby(bucket).groups.items():
                prev = self.buckets.getValue((int(b),))
                base = prev[0] if prev is not None else 0
                out[idx] = base + counts.loc[idx].to_numpy()
                self.buckets.updateValue((int(b),), (int(base + len(idx)),))
            yield pd.DataFrame({"k": np.full(len(pdf), key[0], dtype=np.int64),
                                "bucket": bucket.to_numpy(dtype=np.int64), "count": out})

        def close(self):
            pass

    return RunningCount() if workload == "count" else ListMap()


# ------------------------------------------------------------------------------ one run
def generate_inputs(root: str, files: int, rows: int, keys: int, seed: int = 7) -> str:
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)

    def table(b: int):
        ts = (b * BATCH_EVENT_MS + rng.integers(0, BATCH_EVENT_MS, size=rows)) * 1000  # microseconds
        return pa.table({"k": rng.integers(0, keys, size=rows, dtype=np.int64),
                         "v": rng.integers(0, 1000, size=rows, dtype=np.int64),
                         "ts": pa.array(ts, type=pa.timestamp("us", tz="UTC"))})

    return inputs.write_batches(root, files, table)


def run_worker(spec: dict) -> dict:
    """One (workload, engine, backend, heap) run in this process: the measured batches' durations."""
    import spark_state
    from spark_state.spark.jvm import EXTENSIONS_CLASS, jar_path

    confs = {"spark.pyspark.python": sys.executable,
             "spark.jars": jar_path()}  # keyed_process's tick source is a JVM class
    if spec["extensions"] == "on":  # as spark_state.configure sets it: the SQL tab's node per keyed function
        confs["spark.sql.extensions"] = EXTENSIONS_CLASS
    spark = sessions.start(sessions.builder(  # tws runs on Spark's RocksDB provider, the only one it accepts
        "keyed-bench", contender=CONTENDERS["rocksdb"], partitions=spec["partitions"],
        driver_memory=spec["driver_memory"], confs=confs))
    workload, engine = spec["workload"], spec["engine"]
    df = queries.file_stream(spark, "k bigint, v bigint, ts timestamp", spec["input"])
    if workload == "count_timer":
        df = df.withWatermark("ts", "5 seconds")
    if engine in ("passthrough", "dictloop"):
        out = floor_carrier(df, engine, spec["partitions"])
    elif engine in KEYED_ENGINES:
        fn = vector_function(workload) if engine == "vector" else process_function(workload)
        out = spark_state.keyed_process(df, "k", fn, OUTPUTS[workload],
                                        parallelism=spec["partitions"], state_location=spec["state"],
                                        engine={"backend": spec["backend"]})
    else:
        out = df.groupBy("k").transformWithStateInPandas(
            statefulProcessor=tws_processor(workload), outputStructType=OUTPUTS[workload],
            outputMode="Append", timeMode="None")
    query = queries.start_to_noop(out, spec["checkpoint"], mode="append")
    query.awaitTermination()
    # the batches that read an input file (not the one a due timer runs after the input: count_timer)
    progress = [p for p in queries.progress(query) if p["numInputRows"] >= spec["rows_per_batch"]]
    durations = [p["durationMs"]["addBatch"] for p in progress if "addBatch" in p.get("durationMs", {})]
    spark.stop()
    return {"addBatch": durations, "rows": [p["numInputRows"] for p in progress]}


def run_one(workload: str, engine: str, backend: str, heap: str, args: argparse.Namespace, input_dir: str,
            tmp: str) -> list[float]:
    """One run in its own process and JVM; the measured batches' seconds."""
    work = tempfile.mkdtemp(dir=tmp)
    spec = {"workload": workload, "engine": engine, "backend": backend, "input": input_dir,
            "partitions": args.partitions, "checkpoint": os.path.join(work, "ckpt"),
            "state": os.path.join(work, "state"), "rows_per_batch": args.rows_per_batch,
            "extensions": args.extensions, "driver_memory": heap, "result": os.path.join(work, "result.json")}
    done = workers.run(__file__, spec, os.path.join(work, "log"))
    result = workers.read_result(spec["result"])
    if done.returncode != 0 or result is None:
        raise RuntimeError(f"{workload}/{engine} ({heap} heap) failed:\n{done.log_tail(6000)}")
    shutil.rmtree(work, ignore_errors=True)
    return [d / 1000 for d in result["addBatch"][args.warmup:]]


def run_heap(heap: str, args: argparse.Namespace, input_dir: str, tmp: str) -> dict:
    """Every (workload, engine, backend) at one heap, ``--rounds`` times interleaved (A B C A B C ...);
    prints each run, then every ratio as the median of its rounds' ratios with their spread."""
    print(f"driver heap {heap}:")
    runs = [(workload, engine, backend) for workload in args.workloads.split(",")
            for engine in args.engines.split(",") if engine in SUPPORTED[workload]
            for backend in (args.backends.split(",") if engine in KEYED_ENGINES else ["-"])]
    out: dict = {}
    for round_no in range(args.rounds):
        for workload, engine, backend in runs:
            name = engine if backend == "-" else f"{engine}/{backend}"
            secs = run_one(workload, engine, backend if backend != "-" else "rocksdb", heap, args, input_dir, tmp)
            med = statistics.median(secs)
            x = out.setdefault(workload, {}).setdefault(name, {"rounds": []})
            x["rounds"].append({"batch_seconds": secs, "median_s": med, "rows_per_s": args.rows_per_batch / med})
            print(f"  round {round_no + 1} {workload:8s} {name:18s} median {med:7.2f} s/batch  "
                  f"{args.rows_per_batch / med:10.0f} rows/s   batches: {[round(s, 2) for s in secs]}", flush=True)
    for r in out.values():
        for x in r.values():
            x["rows_per_s"] = statistics.median(t["rows_per_s"] for t in x["rounds"])
    print()
    for workload, r in out.items():
        base = r.get("dictloop") or out.get("count", {}).get("dictloop")
        floor = r.get("passthrough") or out.get("count", {}).get("passthrough")
        for name, x in r.items():
            parts = []
            for key, ref, label in (("vs_dictloop", base, "the per-row dict loop"),
                                    ("vs_passthrough", floor, "pass-through mapInArrow")):
                if ref is not None and ref is not x:
                    parts.append(_ratio(x, ref, key, label))
            if parts:
                print(f"  {workload:8s} {name:18s} " + ", ".join(parts))
        for backend in args.backends.split(","):
            if f"process/{backend}" in r and "tws" in r:
                ratio = _ratio(r[f"process/{backend}"], r["tws"], "vs_tws", "transformWithStateInPandas (RocksDB)")
                print(f"  {workload}: keyed_process ({backend}) is {ratio}")
    first = args.backends.split(",")[0]
    if "count" in out and "count_timer" in out and f"process/{first}" in out["count_timer"]:
        rel = (out["count_timer"][f"process/{first}"]["rows_per_s"]
               / out["count"][f"process/{first}"]["rows_per_s"])
        print(f"  count_timer runs at {rel:.2f}x the rows/s of count (same input, same run)")
    return out


def _ratio(x: dict, ref: dict, key: str, label: str) -> str:
    """``x`` over ``ref`` round by round (a round's runs ran side by side): the median is kept in
    ``x[key]``, the spread in ``x[key + "_spread"]``; returns the printed form."""
    per_round = [a["rows_per_s"] / b["rows_per_s"] for a, b in zip(x["rounds"], ref["rounds"])]
    x[key] = statistics.median(per_round)
    x[key + "_spread"] = [min(per_round), max(per_round)]
    spread = f" ({min(per_round):.2f}-{max(per_round):.2f} over {len(per_round)} rounds)" if len(per_round) > 1 else ""
    return f"{x[key]:.2f}x {label}{spread}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", help="keyed_process engine backends (default rocksdb; speed suite: hashmap,rocksdb)")
    ap.add_argument("--suite", choices=["speed"], help="speed: the per-row cost comparison")
    ap.add_argument("--workloads", help=f"default {','.join(WORKLOADS)}; speed suite: count,listmap")
    ap.add_argument("--engines")
    ap.add_argument("--rows-per-batch", type=int, default=50_000)
    ap.add_argument("--keys", type=int, default=25_000)
    ap.add_argument("--batches", type=int, default=4, help="measured batches")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=stats.rounds, default=1,
                    help="runs of every engine, interleaved; ratios are the median of the rounds' ratios")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--extensions", choices=["on", "off"], default="on",
                    help="spark-state's session extensions (the SQL tab's node), as configure sets them")
    sessions.add_heaps_option(ap)
    ap.add_argument("--json")
    results.add_record_option(ap)
    workers.add_worker_option(ap)
    args = ap.parse_args(argv)
    if workers.serve(args, run_worker):
        return
    if args.suite == "speed":
        args.rows_per_batch, args.keys = 200_000, 20_000
        args.workloads = args.workloads or "count,listmap"
        args.backends = args.backends or "hashmap,rocksdb"
        args.engines = args.engines or "passthrough,dictloop,process,vector"
    args.workloads = args.workloads or ",".join(WORKLOADS)
    args.backends = args.backends or "rocksdb"
    args.engines = args.engines or ",".join(ENGINES)
    try:
        heaps = sessions.parse_heaps(args.heaps)
    except ValueError as exc:
        ap.error(str(exc))
    tmp = tempfile.mkdtemp(prefix="keyed-bench-")
    try:
        input_dir = generate_inputs(os.path.join(tmp, "input"), args.warmup + args.batches,
                                    args.rows_per_batch, args.keys)
        print(f"keyed_bench: {args.rows_per_batch} rows/batch over {args.keys} keys, {args.warmup} warm-up + "
              f"{args.batches} measured batches, {args.partitions} partitions, local[2], "
              f"driver heap {' and '.join(heaps)}")
        by_heap = {heap: run_heap(heap, args, input_dir, tmp) for heap in heaps}
        ratios = {results.ratio_key(heap, workload, name, key): x[key]
                  for heap, r in by_heap.items() for workload, names in r.items() for name, x in names.items()
                  for key in ("vs_dictloop", "vs_passthrough", "vs_tws") if key in x}
        if args.json:
            results.write_json(args.json, {"args": results.settings(args), "heaps": by_heap, "ratios": ratios},
                               indent=2)
        if args.record:
            results.record("keyed_bench", ratios, results.run_argv(sys.argv[1:] if argv is None else argv))
            print(f"recorded {len(ratios)} ratios in {results.RECORDED}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

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

Floors and forms for the Python per-row cost (issue 14, item 4; ``--suite speed``):

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

Usage: python bench/keyed_bench.py [--rows-per-batch 50000] [--keys 25000] [--batches 4]
           [--workloads count,listmap,count_timer] [--engines process,tws]
           [--backends rocksdb,hashmap] [--json out.json]
       python bench/keyed_bench.py --suite speed    # issue 14's shape: 200k rows/batch, 20k keys,
           # workloads count,listmap; engines passthrough,dictloop,process,vector; both backends
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

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
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
    """The keyed_process function of a workload (defined here so that it pickles by value)."""
    from pyspark.sql.types import LongType

    from spark_state.process import KeyedProcessFunction
    from spark_state.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

    class RunningCount(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))

        def process_element(self, row, ctx):
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            return ((row.k, n),)

    class ListMap(KeyedProcessFunction):
        def open(self, ctx):
            self.values = ctx.get_list_state(ListStateDescriptor("values", LongType()))
            self.buckets = ctx.get_map_state(MapStateDescriptor("buckets", LongType(), LongType()))

        def process_element(self, row, ctx):
            self.values.add(row.v)
            b = row.v % 10
            n = (self.buckets.get(b) or 0) + 1
            self.buckets.put(b, n)
            return ((row.k, b, n),)

    class CountWithTimer(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
            self.timer = ctx.get_state(ValueStateDescriptor("timer", LongType()))

        def process_element(self, row, ctx):
            self.count.update((self.count.value() or 0) + 1)
            if self.timer.value() is None:
                t = ctx.timestamp() + 10_000
                ctx.timer_service().register_event_time_timer(t)
                self.timer.update(t)
            return ()

        def on_timer(self, timestamp, ctx):
            self.timer.clear()
            return ((ctx.current_key, self.count.value()),)

    if workload == "count_timer":
        return CountWithTimer()
    return RunningCount() if workload == "count" else ListMap()


def vector_function(workload: str):
    """The vectorized form (``process_elements``: one call per key and Arrow batch)."""
    from pyspark.sql.types import LongType

    from spark_state.process import KeyedProcessFunction
    from spark_state.state import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor

    class RunningCount(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))

        def process_elements(self, rows, ctx):
            n = self.count.value() or 0
            self.count.update(n + len(rows))
            k = ctx.current_key
            return [(k, c) for c in range(n + 1, n + len(rows) + 1)]

    class ListMap(KeyedProcessFunction):
        def open(self, ctx):
            self.values = ctx.get_list_state(ListStateDescriptor("values", LongType()))
            self.buckets = ctx.get_map_state(MapStateDescriptor("buckets", LongType(), LongType()))

        def process_elements(self, rows, ctx):
            vs = [r.v for r in rows]
            self.values.add_all(vs)
            counts: dict = {}
            get = self.buckets.get
            out = []
            for v in vs:
                b = v % 10
                n = counts.get(b)
                if n is None:
                    n = get(b) or 0
                counts[b] = n = n + 1
                out.append((ctx.current_key, b, n))
            self.buckets.put_all(counts)
            return out

    return RunningCount() if workload == "count" else ListMap()


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
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    for b in range(files):
        ts = (b * BATCH_EVENT_MS + rng.integers(0, BATCH_EVENT_MS, size=rows)) * 1000  # microseconds
        table = pa.table({"k": rng.integers(0, keys, size=rows, dtype=np.int64),
                          "v": rng.integers(0, 1000, size=rows, dtype=np.int64),
                          "ts": pa.array(ts, type=pa.timestamp("us", tz="UTC"))})
        path = os.path.join(root, f"batch-{b:06d}.parquet")
        pq.write_table(table, path)
        os.utime(path, (1_700_000_000 + 10 * b,) * 2)
    return root


def child(args: argparse.Namespace) -> None:
    """One (workload, engine) run in this process; prints a JSON line with batch durations."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_state
    from spark_state.spark.jvm import EXTENSIONS_CLASS, jar_path

    spark = (SparkSession.builder.master("local[2]").appName("keyed-bench")
             .config("spark.sql.shuffle.partitions", str(args.partitions))
             .config("spark.ui.enabled", "false").config("spark.pyspark.python", sys.executable)
             .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
             .config("spark.jars", jar_path()))  # keyed_process's tick source is a JVM class
    if args.extensions == "on":  # as spark_state.configure sets it: the SQL tab's node per keyed function
        spark = spark.config("spark.sql.extensions", EXTENSIONS_CLASS)
    spark = spark.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.readStream.schema("k bigint, v bigint, ts timestamp").option("maxFilesPerTrigger", 1).parquet(args.input)
    if args.workload == "count_timer":
        df = df.withWatermark("ts", "5 seconds")
    if args.engine in ("passthrough", "dictloop"):
        out = floor_carrier(df, args.engine, args.partitions)
    elif args.engine in ("process", "vector"):
        fn = vector_function(args.workload) if args.engine == "vector" else process_function(args.workload)
        out = spark_state.keyed_process(df, "k", fn, OUTPUTS[args.workload],
                                        parallelism=args.partitions, state_location=args.state,
                                        engine={"backend": args.backend})
    else:
        out = df.groupBy("k").transformWithStateInPandas(
            statefulProcessor=tws_processor(args.workload), outputStructType=OUTPUTS[args.workload],
            outputMode="Append", timeMode="None")
    writer = out.writeStream.format("noop").outputMode("append").option("checkpointLocation", args.checkpoint)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    progress = [json.loads(p.json()) for p in query._jsq.recentProgress()]
    # the batches that read an input file (not the one a due timer runs after the input: count_timer)
    progress = [p for p in progress if p["numInputRows"] >= args.rows_per_batch]
    durations = [p["durationMs"]["addBatch"] for p in progress if "addBatch" in p.get("durationMs", {})]
    print("RESULT " + json.dumps({"addBatch": durations, "rows": [p["numInputRows"] for p in progress]}))
    spark.stop()


def run_one(workload: str, engine: str, backend: str, args: argparse.Namespace, input_dir: str, tmp: str) -> list[float]:
    work = tempfile.mkdtemp(dir=tmp)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--workload", workload, "--engine", engine,
           "--backend", backend, "--input", input_dir, "--partitions", str(args.partitions),
           "--checkpoint", os.path.join(work, "ckpt"), "--state", os.path.join(work, "state"),
           "--rows-per-batch", str(args.rows_per_batch), "--extensions", args.extensions]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"{workload}/{engine} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    shutil.rmtree(work, ignore_errors=True)
    durations = json.loads(line[len("RESULT "):])["addBatch"]
    return [d / 1000 for d in durations[args.warmup:]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workload"), ap.add_argument("--engine"), ap.add_argument("--input")
    ap.add_argument("--checkpoint"), ap.add_argument("--state")
    ap.add_argument("--backend", default="rocksdb", help=argparse.SUPPRESS)
    ap.add_argument("--backends", default="rocksdb", help="keyed_process engine backends (rocksdb,hashmap)")
    ap.add_argument("--suite", choices=["speed"], help="speed: issue 14's per-row cost comparison")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--engines")
    ap.add_argument("--rows-per-batch", type=int, default=50_000)
    ap.add_argument("--keys", type=int, default=25_000)
    ap.add_argument("--batches", type=int, default=4, help="measured batches")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--extensions", choices=["on", "off"], default="on",
                    help="spark-state's session extensions (the SQL tab's node), as configure sets them")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.suite == "speed":
        args.rows_per_batch, args.keys = 200_000, 20_000
        args.workloads, args.backends = "count,listmap", "hashmap,rocksdb"
        args.engines = args.engines or "passthrough,dictloop,process,vector"
    args.engines = args.engines or ",".join(ENGINES)
    if args.child:
        child(args)
        return
    tmp = tempfile.mkdtemp(prefix="keyed-bench-")
    try:
        os.makedirs(os.path.join(tmp, "input"))
        input_dir = generate_inputs(os.path.join(tmp, "input"), args.warmup + args.batches,
                                    args.rows_per_batch, args.keys)
        print(f"keyed_bench: {args.rows_per_batch} rows/batch over {args.keys} keys, {args.warmup} warm-up + "
              f"{args.batches} measured batches, {args.partitions} partitions, local[2]")
        results: dict = {}
        for workload in args.workloads.split(","):
            for engine in args.engines.split(","):
                if engine not in SUPPORTED[workload]:
                    continue
                backends = args.backends.split(",") if engine in KEYED_ENGINES else ["-"]
                for backend in backends:
                    name = engine if backend == "-" else f"{engine}/{backend}"
                    secs = run_one(workload, engine, backend if backend != "-" else "rocksdb", args, input_dir, tmp)
                    med = statistics.median(secs)
                    results.setdefault(workload, {})[name] = {
                        "batch_seconds": secs, "median_s": med, "rows_per_s": args.rows_per_batch / med}
                    print(f"  {workload:8s} {name:18s} median {med:7.2f} s/batch  "
                          f"{args.rows_per_batch / med:10.0f} rows/s   batches: {[round(s, 2) for s in secs]}",
                          flush=True)
        print()
        for workload, r in results.items():
            base = r.get("dictloop") or results.get("count", {}).get("dictloop")
            floor = r.get("passthrough") or results.get("count", {}).get("passthrough")
            for name, x in r.items():
                parts = []
                if base is not None and name != "dictloop":
                    x["vs_dictloop"] = x["rows_per_s"] / base["rows_per_s"]
                    parts.append(f"{x['vs_dictloop']:.2f}x the per-row dict loop")
                if floor is not None and name != "passthrough":
                    x["vs_passthrough"] = x["rows_per_s"] / floor["rows_per_s"]
                    parts.append(f"{x['vs_passthrough']:.2f}x pass-through mapInArrow")
                if parts:
                    print(f"  {workload:8s} {name:18s} " + ", ".join(parts))
            for backend in args.backends.split(","):
                if f"process/{backend}" in r and "tws" in r:
                    ratio = r[f"process/{backend}"]["rows_per_s"] / r["tws"]["rows_per_s"]
                    r[f"ratio_tws/{backend}"] = ratio
                    print(f"  {workload}: keyed_process ({backend}) is {ratio:.1f}x transformWithStateInPandas (RocksDB)")
        first = args.backends.split(",")[0]
        if "count" in results and "count_timer" in results and f"process/{first}" in results["count_timer"]:
            rel = (results["count_timer"][f"process/{first}"]["rows_per_s"]
                   / results["count"][f"process/{first}"]["rows_per_s"])
            print(f"  count_timer runs at {rel:.2f}x the rows/s of count (same input, same run)")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"args": vars(args), "results": results}, f, indent=2)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

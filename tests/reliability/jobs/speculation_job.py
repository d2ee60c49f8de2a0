"""Every built-in stateful operator and keyed_process on spark-state with speculation forced on.

Runs in its own process against a standalone cluster of two one-core executors on two hosts
(see the ``standalone_cluster`` fixture). In batch 1 of every query, the first attempt of
partition 0 sleeps *after* its state store committed (in a mapInArrow after the stateful
operator, in the same task), so Spark launches a speculative copy on the other host; the copy
commits the same version of the same stores, finds it committed, and its commit is a no-op.

Usage: speculation_job.py MASTER WORKDIR. Prints ``RESULT <json>``: per case the rows of every
batch and, per state store, the versions that saw more than one commit attempt.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(TESTS, "spark"), os.path.join(TESTS, "process"), os.path.join(TESTS, "reliability")]

#: micro-batches per query (batch 1 is the speculated one; batch 2 reads what it committed)
BATCHES = 3
SLOW_BATCH = "1"
SLOW_SECONDS = 30.0
#: The operators run with speculation: one per way a task commits the provider's stores -- one
#: store (aggregation), four stores per task (join), prefix-scan stores (session window). The
#: commit protocol under test (first committer wins) is the provider's, the same for every
#: operator; the others are covered by the equivalence suite.
CASES = ("agg_update", "join_inner", "session_window")
#: set by main(); shipped with the function (module pickled by value)
ATTEMPTS_DIR = ""


def speculated_cases() -> list:
    """The equivalence suite's cases named in :data:`CASES`."""
    import test_operator_equivalence as eq

    return [c for c in eq.SEMANTIC_CASES if c.name in CASES]


def slow_after_commit(batches):
    """Pass rows through. Draining the input first means the stateful operator upstream (same
    task) has committed. Then, in batch 1, the first attempt of partition 0 waits until a
    second (speculative) attempt of it has committed too -- at most ``SLOW_SECONDS``."""
    from pyspark import TaskContext

    rows = list(batches)
    tc = TaskContext.get()
    name = f"{tc.getLocalProperty('sql.streaming.queryId')}__b{tc.getLocalProperty('streaming.sql.batchId')}"
    if tc.attemptNumber() > 0:
        # evidence for the test (and the signal for the first attempt): a second attempt committed
        open(os.path.join(ATTEMPTS_DIR, f"{name}-p{tc.partitionId()}-a{tc.attemptNumber()}"), "w").close()
    elif tc.partitionId() == 0 and tc.getLocalProperty("streaming.sql.batchId") == SLOW_BATCH:
        deadline = time.monotonic() + SLOW_SECONDS
        while time.monotonic() < deadline and not any(
                n.startswith(f"{name}-p0-a") for n in os.listdir(ATTEMPTS_DIR)):
            time.sleep(0.1)
    yield from rows


def commit_attempts(ckpt_state: str) -> dict:
    """Per store directory: {version: changelogs written} for versions written more than once
    (a second attempt wrote its changelog, then found the version committed), and the number
    of manifests per (version, run rank) -- always 1."""
    found = {}
    for root, dirs, files in os.walk(ckpt_state):
        if os.path.basename(root) != "changelogs":
            continue
        store = os.path.dirname(root)
        per_version: dict[int, int] = {}
        for name in files:
            m = re.match(r"^(\d+)-", name)
            if m:
                per_version[int(m.group(1))] = per_version.get(int(m.group(1)), 0) + 1
        manifests = os.listdir(os.path.join(store, "manifests"))
        dupes = {v: n for v, n in per_version.items() if n > 1}
        found[os.path.relpath(store, ckpt_state)] = {"multi": dupes, "manifests": sorted(manifests),
                                                     "loaded": load_latest(store)}
    return found


def load_latest(store_dir: str) -> str:
    """Load the newest committed version of a store into an empty local directory, as a
    reader (CRC-checked); returns "<version>: <keys> keys" or the error."""
    from spark_state import EngineConfig, VersionedStore
    from spark_state.checkpoint.runs import RunContext, RunRegistry
    from spark_state.storage import open_storage

    storage = open_storage(store_dir)
    try:
        with VersionedStore(storage, EngineConfig(), runs=RunContext(RunRegistry(storage), None)) as store:
            version = store.latest_version()
            store.load(version)
            return f"{version}: {store.num_keys()} keys"
    except Exception as exc:  # reported to the test, which fails with it
        return f"ERROR {type(exc).__name__}: {exc}"


def main(master: str, workdir: str) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import spark_state
    import process_fns
    import reliability_fns
    import test_operator_equivalence as eq
    from spark_state.process import keyed_process
    from streaming_harness import HDFS_PROVIDER, SPARKSTATE_PROVIDER, run_query, ship_module_by_value, write_batches

    global ATTEMPTS_DIR
    ATTEMPTS_DIR = os.path.join(workdir, "attempts")
    os.makedirs(ATTEMPTS_DIR)
    ship_module_by_value(sys.modules[__name__])
    ship_module_by_value(process_fns)
    spark = spark_state.configure(
        SparkSession.builder.master(master).appName("spark-state-speculation")
        .config("spark.sql.shuffle.partitions", "4").config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.memory", "768m")
        .config("spark.speculation", "true").config("spark.speculation.interval", "100ms")
        .config("spark.speculation.multiplier", "1.5").config("spark.speculation.quantile", "0.5")
        .config("spark.speculation.minTaskRuntime", "200ms")
        # speculate on duration alone (the efficiency check looks at processing rates, which
        # are noise for the few rows of these batches)
        .config("spark.speculation.efficiency.enabled", "false")
        # one-task stages (streaming limit) are speculated after this long
        .config("spark.speculation.task.duration.threshold", "2s")
        .config("spark.sql.ansi.enabled", "false")
    ).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    deadline = time.time() + 120
    while spark.sparkContext._jsc.sc().getExecutorIds().size() < 2 and time.time() < deadline:
        time.sleep(0.5)

    results = {}
    for case in speculated_cases():
        dirs = eq.write_inputs(case, os.path.join(workdir, "in", case.name), upto=BATCHES)
        ckpt = os.path.join(workdir, "ckpt", case.name)

        def build(*dfs, _case=case):
            out = _case.build(*dfs)
            return out.mapInArrow(slow_after_commit, out.schema)

        run = run_query(spark, build, provider_class=SPARKSTATE_PROVIDER, input_dir=dirs,
                        schema=[s() for s in case.schemas], checkpoint_dir=ckpt, output_mode=case.output_mode,
                        extra_confs=case.extra_confs, timeout=300)
        results[case.name] = {"batches": {str(b): rows for b, rows in run.batches.items()},
                              "stores": commit_attempts(os.path.join(ckpt, "state")),
                              "attempts": sorted(n.split("__", 1)[1] for n in os.listdir(ATTEMPTS_DIR)
                                                 if n.startswith(run.query_id))}

    batches = reliability_fns.keyed_batches(BATCHES)
    write_batches(os.path.join(workdir, "in", "keyed"), batches, process_fns.INPUT_SCHEMA)
    state = os.path.join(workdir, "keyed-state")

    def build_keyed(df):
        out = keyed_process(df, "k", process_fns.AllStates(), process_fns.ALL_STATES_OUTPUT, parallelism=4,
                            state_location=state)
        return out.mapInArrow(slow_after_commit, out.schema)

    run = run_query(spark, build_keyed, provider_class=HDFS_PROVIDER, input_dir=os.path.join(workdir, "in", "keyed"),
                    schema=process_fns.INPUT_SCHEMA, checkpoint_dir=os.path.join(workdir, "ckpt", "keyed"),
                    output_mode="append", timeout=300)
    results["keyed_process"] = {"batches": {str(b): rows for b, rows in run.batches.items()},
                                "stores": commit_attempts(os.path.join(state, "stores")),
                                "attempts": sorted(n.split("__", 1)[1] for n in os.listdir(ATTEMPTS_DIR)
                                                   if n.startswith(run.query_id))}
    spark.stop()
    print("RESULT " + json.dumps(results, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

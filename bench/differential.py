"""The randomized differential test, longer: generated stateful queries and inputs (operator, key
count, watermark delay, batches, rows per batch, lateness, partition count; see
``tests/spark/differential.py``), each run on Spark's HDFS provider and on spark-state's provider on
both backends, compared row by row with batch ids and by state rows per batch. CI runs one fixed
query per operator (``tests/spark/test_differential.py``).

Prints one line per query, then what the run covered; exits 1 if any query differed (its seed
reproduces it: ``--seed S --queries 1``).

Usage: python bench/differential.py [--queries 40] [--seed 1] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter

_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
sys.path.insert(0, os.path.join(_TESTS, "spark"))

import differential as D  # noqa: E402
from harness import sessions  # noqa: E402
from streaming_harness import SPARKSTATE_BACKENDS, ship_module_by_value  # noqa: E402


def _session():
    """The session every generated query runs in (each query sets its own provider)."""
    from spark_state.spark.jvm import jar_path

    return sessions.start(sessions.builder(
        "spark-state-differential", master="local[2,4]", partitions=None,
        confs={"spark.jars": jar_path(), "spark.pyspark.python": sys.executable, "spark.sql.ansi.enabled": "false"}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--seed", type=int, default=1, help="seed of the first query; the next ones count up")
    ap.add_argument("--workdir", help="default: a temp dir (removed unless a query differed)")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="spark-state-differential-"))
    spark = _session()
    ship_module_by_value(D)
    operators: Counter = Counter()
    batches = rows = evicting = 0
    failed = []
    started = time.monotonic()
    for i, seed in enumerate(range(args.seed, args.seed + args.queries)):
        spec = D.draw(seed)
        outcome = D.compare(spark, spec, SPARKSTATE_BACKENDS, os.path.join(root, f"q{seed}"))
        operators[spec.operator] += 1
        batches += outcome.batches
        rows += outcome.rows
        evicting += outcome.evicting_batches
        status = "ok" if not outcome.differences else "DIFFERS"
        print(f"[{i + 1}/{args.queries} {time.monotonic() - started:.0f} s] {status}: {spec.describe()}", flush=True)
        for line in outcome.differences[:5]:
            print("    " + line, flush=True)
        if outcome.differences:
            failed.append(seed)
        else:
            shutil.rmtree(os.path.join(root, f"q{seed}"), ignore_errors=True)
    print(f"\n{args.queries} queries, {batches} batches ({evicting} of them evicting state), {rows} output rows, "
          f"each on HDFS and on spark-state rocksdb and hashmap, in {time.monotonic() - started:.0f} s")
    print("operators: " + ", ".join(f"{op} {n}" for op, n in sorted(operators.items())))
    if failed:
        print(f"DIFFERED: seeds {failed} (workdirs under {root})")
        return 1
    if not args.workdir:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

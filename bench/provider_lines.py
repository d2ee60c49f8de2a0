"""The provider benchmark on every supported Spark line, one line after another.

Each line runs ``bench/provider_bench.py`` in that line's virtualenv (the ones ``./dev test-lines``
creates: ``.venv-lines/spark-<line>``, and ``.venv`` for the newest line), so that spark-state is
compared with *that line's own* HDFS and RocksDB providers in the same run. The table printed at the
end gives, per line, our rows/s as a ratio to each of them; the lines' absolute figures are not
comparable with each other (different Spark and RocksDB versions, and the machine's mood).

Usage::

    ./dev test-lines            # once: creates the older lines' virtualenvs
    .venv/bin/python bench/provider_lines.py [--lines 3.5,4.0,4.1,4.2,4.3] [--json out.json] \\
        -- --workloads agg --batches 4 --warmup 1

Arguments after ``--`` go to ``provider_bench.py`` (default: ``--workloads agg --batches 4 --warmup 1``);
``--providers`` is always ``hdfs,rocksdb,sparkstate``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness import results  # noqa: E402
from harness.stats import fmt_ratio  # noqa: E402
from spark_state.spark.lines import LINES, NEWEST, get_line  # noqa: E402

DEFAULT_BENCH_ARGS = ["--workloads", "agg", "--batches", "4", "--warmup", "1"]


def line_python(name: str) -> Path:
    """The interpreter of a line's virtualenv; exits naming how to create it when it is missing."""
    venv = ROOT / (".venv" if name == NEWEST.name else f".venv-lines/spark-{name}")
    python = venv / "bin" / "python"
    if not python.exists():
        sys.exit(f"no virtualenv for Spark {name} at {venv}: run ./dev setup (newest line) or "
                 f"./dev test-lines {name} once to create it")
    return python


def run_line(name: str, bench_args: list[str], workdir: Path) -> dict:
    """Run provider_bench.py on one line; returns its JSON report (``heaps`` -> heap -> ``workloads`` ->
    provider -> summary)."""
    python = line_python(name)
    out = workdir / f"spark-{name}.json"
    env = dict(os.environ, PYSPARK_PYTHON=str(python), PYSPARK_DRIVER_PYTHON=str(python))
    cmd = [str(python), str(ROOT / "bench" / "provider_bench.py"), "--providers", "hdfs,rocksdb,sparkstate",
           "--json", str(out), *bench_args]
    print(f"== Spark {name}: {' '.join(cmd[1:])}", flush=True)
    proc = subprocess.run(cmd, env=env, cwd=ROOT)
    if proc.returncode != 0 or not out.exists():
        return {"error": f"provider_bench.py exited {proc.returncode}"}
    with open(out) as f:
        report = json.load(f)
    version = subprocess.run([str(python), "-c", "import pyspark; print(pyspark.__version__)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    report["pyspark"] = version
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", default=",".join(line.name for line in LINES),
                        help="comma-separated Spark lines (default: every supported line)")
    parser.add_argument("--json", help="also write every line's report to this JSON file")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="after --: arguments for provider_bench.py")
    args = parser.parse_args()
    names = [get_line(n.strip()).name for n in args.lines.split(",") if n.strip()]
    bench_args = [a for a in args.bench_args if a != "--"] or DEFAULT_BENCH_ARGS
    for name in names:
        line_python(name)  # fail before the first long run, not after it

    reports: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="provider-lines-") as tmp:
        for name in names:
            reports[name] = run_line(name, bench_args, Path(tmp))

    failed = 0
    print("\nspark-state (backend rocksdb) against the same line's own providers, same run:")
    print(f"  {'line':<6}{'pyspark':<10}{'heap':<6}{'workload':<10}{'hdfs rows/s':>13}{'rocksdb rows/s':>16}"
          f"{'ours rows/s':>13}{'vs rocksdb':>12}{'vs hdfs':>9}")
    for name, report in reports.items():
        if "error" in report:
            failed += 1
            print(f"  {name:<6}{'-':<10}{report['error']}")
            continue
        for heap, at_heap in report["heaps"].items():
            for workload, summary in at_heap["workloads"].items():
                ours, hdfs, rocks = (summary.get(p, {}) for p in ("sparkstate", "hdfs", "rocksdb"))
                where = f"  {name:<6}{report['pyspark']:<10}{heap:<6}{workload:<10}"
                if not ours.get("measured_batches"):
                    failed += 1
                    print(f"{where} spark-state has no measured batches")
                    continue
                print(f"{where}{hdfs.get('rows_per_s', 0):>13,.0f}{rocks.get('rows_per_s', 0):>16,.0f}"
                      f"{ours['rows_per_s']:>13,.0f}{fmt_ratio(ours.get('throughput_vs_rocksdb'), suffix='x'):>12}"
                      f"{fmt_ratio(ours.get('throughput_vs_hdfs'), suffix='x'):>9}")
    if args.json:
        results.write_json(args.json, reports, indent=2)
        print(f"\nwrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Today's ratios beside the last recorded ones: is spark-state slower than it was?

Runs ``bench/provider_bench.py`` and ``bench/keyed_bench.py`` again, each with the arguments of its
last recorded run (``--record`` keeps a run's ratios, date, commit and arguments in
``bench/recorded.json``), and prints every ratio -- ours over a baseline of the same run, per heap,
workload and contender -- as recorded and as measured today, with the change. A ratio that fell by
more than ``--tolerance`` (default 10%: a short run on a shared machine moves by about that much) is
marked ``WORSE``, and the command exits 1, so that a regression shows the day it lands.

Ratios only: rows/s move with the machine's load, a ratio of two contenders measured in the same run
much less. For a ratio where lower is better (``latency_vs_rocksdb``) a rise is what is marked.

Usage:
    python bench/compare.py [--benches provider,keyed] [--tolerance 0.1] [--record]
        [--provider-args "..."] [--keyed-args "..."]

``--provider-args``/``--keyed-args`` replace the recorded arguments (then the comparison is only
as good as the two runs are alike); without a recorded run a benchmark runs with
:data:`DEFAULT_ARGS`. ``--record`` makes today's ratios the recorded ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from typing import Optional

from harness import results
from harness.stats import fmt_ratio

HERE = os.path.dirname(os.path.abspath(__file__))
#: benchmark -> (its script, the name it records under)
BENCHES = {"provider": ("provider_bench.py", "provider_bench"), "keyed": ("keyed_bench.py", "keyed_bench")}
#: the arguments of a benchmark that has no recorded run yet (the documented commands)
DEFAULT_ARGS = {"provider": ["--providers", "hdfs,rocksdb,sparkstate,sparkstate-hashmap", "--rounds", "2",
                             "--batches", "4", "--warmup", "1"],
                "keyed": ["--suite", "speed"]}
#: ratios where lower is better (the others: higher is better)
LOWER_IS_BETTER = ("latency_vs_rocksdb",)


def run_today(bench: str, argv: list[str], record: bool) -> Optional[dict]:
    """Run a benchmark with ``argv``; its report's flat ratios (None if it wrote no report)."""
    script, _ = BENCHES[bench]
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        out = os.path.join(tmp, "report.json")
        cmd = [sys.executable, os.path.join(HERE, script), *argv, "--json", out] + (["--record"] if record else [])
        print(f"== {' '.join(['python', 'bench/' + script, *argv])}", flush=True)
        proc = subprocess.run(cmd)
        if not os.path.exists(out):
            print(f"   {script} exited {proc.returncode} without a report")
            return None
        with open(out) as f:
            return json.load(f).get("ratios", {})


def change(name: str, before: float, today: float) -> float:
    """How much better (> 0) or worse (< 0) today is, as a share of the recorded ratio."""
    rel = today / before - 1
    return -rel if name.endswith(LOWER_IS_BETTER) else rel


def print_comparison(bench: str, recorded: dict, today: dict, tolerance: float) -> int:
    """The table of one benchmark; returns how many ratios got worse beyond ``tolerance``."""
    before = recorded.get("ratios", {})
    when = f"recorded {recorded['recorded_at']} at {recorded.get('commit') or '?'}" if recorded else "nothing recorded"
    print(f"\n{BENCHES[bench][1]}: today beside the last recorded run ({when}); "
          f"WORSE: more than {tolerance:.0%} worse")
    print(f"  {'heap':<6}{'workload':<12}{'contender':<24}{'ratio':<26}{'recorded':>9}{'today':>9}{'change':>9}")
    worse = 0
    for key in sorted(set(before) | set(today), key=lambda k: k.split(" ")):
        heap, workload, contender, name = key.split(" ", 3)
        b, t = before.get(key), today.get(key)
        delta = change(name, b, t) if b and t is not None else None
        mark = ""
        if delta is not None and delta < -tolerance:
            mark, worse = "  WORSE", worse + 1
        print(f"  {heap:<6}{workload:<12}{contender:<24}{name:<26}{fmt_ratio(b):>9}{fmt_ratio(t):>9}"
              f"{'-' if delta is None else f'{delta:+.0%}':>9}{mark}")
    return worse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--benches", default=",".join(BENCHES), help="comma list of: " + ", ".join(BENCHES))
    ap.add_argument("--tolerance", type=float, default=0.10, help="a ratio this much worse is marked (0.10: 10%%)")
    ap.add_argument("--record", action="store_true", help="make today's ratios the recorded ones")
    for bench in BENCHES:
        ap.add_argument(f"--{bench}-args", help=f"arguments for {BENCHES[bench][0]} instead of the recorded ones")
    args = ap.parse_args(argv)
    benches = [b.strip() for b in args.benches.split(",") if b.strip()]
    for b in benches:
        if b not in BENCHES:
            ap.error(f"unknown benchmark {b!r}; one of {', '.join(BENCHES)}")
    recorded = results.load_recorded()
    tables = []
    for bench in benches:
        last = recorded.get(BENCHES[bench][1], {})
        override = getattr(args, f"{bench}_args")
        bench_argv = shlex.split(override) if override is not None else last.get("argv") or DEFAULT_ARGS[bench]
        tables.append((bench, last, run_today(bench, bench_argv, args.record)))
    worse = sum(print_comparison(bench, last, today or {}, args.tolerance) for bench, last, today in tables)
    failed = [BENCHES[bench][0] for bench, _, today in tables if today is None]
    if worse:
        print(f"\n{worse} ratio(s) more than {args.tolerance:.0%} worse than recorded")
    if failed:
        print(f"\nno report from {', '.join(failed)}")
    return 1 if worse or failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The kill test, longer and randomized: many seeded scenarios of SIGKILLs of the provider's state
workers, of PySpark workers running ``keyed_process`` and of the whole application, at random
crash points and ordinals (see ``tests/reliability/killtest.py``; CI runs two fixed scenarios).

Each scenario runs a provider aggregation and ``keyed_process`` in one application until the
input is drained, restarting after whole-application kills, and compares every batch with the
model of an uninterrupted run. A failing scenario prints its seed; ``--seed S --scenarios 1``
runs it again (its workdir is kept).

Usage: python bench/kill_test.py [--scenarios 20] [--seed 1] [--workdir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
for sub in ("reliability", "spark", "process"):
    sys.path.insert(0, os.path.join(_TESTS, sub))

import killtest  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1, help="seed of the first scenario; the next ones count up")
    ap.add_argument("--workdir", help="default: a temp dir")
    ap.add_argument("--keep", action="store_true", help="keep the workdirs of passing scenarios too")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.workdir or tempfile.mkdtemp(prefix="spark-state-kill-"))
    failures = []
    for seed in range(args.seed, args.seed + args.scenarios):
        rng = random.Random(-seed)
        scenario = killtest.plan(seed, job_kills=rng.choice((0, 1, 1, 2)), timed_kill=rng.random() < 0.4)
        workdir = os.path.join(root, f"seed-{seed}")
        started = time.monotonic()
        try:
            outcome = killtest.run_scenario(scenario, workdir)
            killtest.check(outcome)
        except AssertionError as exc:
            failures.append(seed)
            print(f"FAIL {scenario.describe()}\n  {exc}\n  workdir kept: {workdir}", flush=True)
            continue
        print(f"ok   {scenario.describe()} ({outcome.starts} starts, {time.monotonic() - started:.0f} s)"
              + "".join(f"\n     {n}" for n in outcome.notes), flush=True)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"{args.scenarios - len(failures)}/{args.scenarios} scenarios passed"
          + (f"; failing seeds: {failures}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

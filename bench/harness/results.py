"""What a benchmark writes: its JSON report, and the ratios it records for ``bench/compare.py``.

``--json FILE`` writes a run's whole report. ``--record`` (``provider_bench.py``, ``keyed_bench.py``)
also keeps the run's *ratios* -- figures of ours over a baseline of the same run, which survive a
busy machine better than rows/s do -- in :data:`RECORDED` under the benchmark's name, with the
date, the commit and the arguments of the run. ``bench/compare.py`` runs the benchmarks again with
those arguments and prints today's ratios beside the recorded ones, so a change that makes a
ratio worse shows on the day it lands.

Ratios are flat: ``"<heap> <workload> <contender> <ratio name>"`` -> value, so that two runs
compare key by key whatever the benchmark.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
from typing import Optional

#: The recorded ratios of every benchmark that records them (committed with the code they measure).
RECORDED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "recorded.json")


def settings(args) -> dict:
    """A run's arguments as the report's ``settings`` (internal options, ``_*``, left out)."""
    return {k: v for k, v in vars(args).items() if not k.startswith("_")}


def write_json(path: str, report, indent: int = 1) -> None:
    with open(path, "w") as out:
        json.dump(report, out, indent=indent, default=str)


def ratio_key(heap: str, workload: str, contender: str, name: str) -> str:
    return f"{heap} {workload} {contender} {name}"


def add_record_option(parser) -> None:
    """The ``--record`` option of a benchmark whose ratios ``bench/compare.py`` compares."""
    parser.add_argument("--record", action="store_true", help="keep this run's ratios for bench/compare.py")


def load_recorded(path: str = RECORDED) -> dict:
    """Every benchmark's last recorded ratios (``{}`` before the first ``--record``)."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def record(bench: str, ratios: dict[str, float], argv: list[str], path: str = RECORDED) -> None:
    """Keep ``ratios`` as ``bench``'s last recorded ones (with the date, commit and arguments)."""
    recorded = load_recorded(path)
    recorded[bench] = {"recorded_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                       "commit": _commit(), "argv": argv, "ratios": dict(sorted(ratios.items()))}
    with open(path, "w") as out:
        json.dump(recorded, out, indent=1)
        out.write("\n")


def run_argv(argv: list[str]) -> list[str]:
    """A run's arguments without where its outputs went (``--json FILE``, ``--record``): what to
    run again to measure the same thing."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--json":
            skip = True
        elif a != "--record" and not a.startswith("--json="):
            out.append(a)
    return out


def _commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=os.path.dirname(RECORDED), check=True).stdout.strip() or None
    except (OSError, subprocess.CalledProcessError):
        return None

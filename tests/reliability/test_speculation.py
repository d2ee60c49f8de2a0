"""Speculative execution: two attempts of one task commit the same version of the same store.
The first committer wins and the other's commit is a no-op; the output of every operator run
(one per way a task commits its stores, ``speculation_job.CASES``) equals Spark's HDFS provider's; no version is
written twice; every store stays loadable."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import process_fns
import test_operator_equivalence as eq
from reliability_fns import keyed_batches
from streaming_harness import HDFS_PROVIDER

pytestmark = pytest.mark.spark

JOB = os.path.join(os.path.dirname(__file__), "jobs", "speculation_job.py")
sys.path.insert(0, os.path.dirname(JOB))
import speculation_job  # noqa: E402  (constants shared with the job)


def _normal(rows):
    return json.loads(json.dumps(rows, default=str))


def test_speculative_attempts_commit_once_and_every_operator_matches_the_hdfs_provider(
        standalone_cluster, spark, tmp_path, tmp_path_factory):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, JOB, standalone_cluster, str(tmp_path / "job")], capture_output=True,
                          text=True, timeout=1200, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"speculation job printed no result (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
    result = json.loads(lines[0][len("RESULT "):])
    print("second attempts:", json.dumps({name: r["attempts"] for name, r in result.items()}))

    speculated = []
    for case in speculation_job.speculated_cases():
        dirs = eq.write_inputs(case, tmp_path_factory.mktemp(f"in-{case.name}"), upto=speculation_job.BATCHES)
        reference = eq.run_case(spark, case, HDFS_PROVIDER, dirs, tmp_path_factory.mktemp(f"ref-{case.name}") / "c")
        got = result[case.name]
        assert got["batches"] == _normal({str(b): rows for b, rows in reference.batches.items()}), case.name
        _check_stores(case.name, got["stores"])
        if any(s["multi"] for s in got["stores"].values()):
            speculated.append(case.name)

    keyed = result["keyed_process"]
    expected = process_fns.expected_all_states(keyed_batches(speculation_job.BATCHES))
    assert keyed["batches"] == _normal({str(b): rows for b, rows in expected.items()})
    _check_stores("keyed_process", keyed["stores"])
    if any(s["multi"] for s in keyed["stores"].values()):
        speculated.append("keyed_process")
    # Speculation really happened: in every query a second attempt reached its commit.
    assert len(speculated) == len(speculation_job.CASES) + 1, f"second attempts committed only in {speculated}"


def _check_stores(name, stores):
    assert stores, f"{name}: no state stores found"
    for store, info in stores.items():
        versions = [m.split(".")[0] for m in info["manifests"]]
        assert len(versions) == len(set(versions)), f"{name} {store}: a version has two manifests: {info}"
        assert not info["loaded"].startswith("ERROR"), f"{name} {store}: {info['loaded']}"

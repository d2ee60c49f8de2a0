"""Spark jobs that need a Spark of their own, run in a subprocess: two executor JVMs
(local-cluster), and an executor Python without spark-state."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.spark

JOBS = os.path.join(os.path.dirname(__file__), "jobs")


def _run_job(script: str, *args: str, timeout: int = 600) -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    proc = subprocess.run([sys.executable, os.path.join(JOBS, script), *args], capture_output=True,
                          text=True, timeout=timeout, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"{script} printed no result (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                         f"{proc.stderr[-6000:]}")


def test_two_executors_each_run_a_worker_and_moved_partitions_restore(tmp_path):
    result = _run_job("cluster_job.py", str(tmp_path))
    assert result["counts_match"], result
    assert result["keys"] == 97 and result["total"] == 2400
    assert result["workers_before_kill"] == 2  # one Python worker per executor JVM
    assert result["killed"] is not None and result["killed"] not in result["executors_after_kill"]
    after_kill = {int(b): n for b, n in result["restores"].items() if int(b) >= 3}
    # Partitions of the removed executor were restored from checkpoint storage on the other one.
    assert sum(after_kill.values()) >= 1, result


def test_executor_python_without_spark_state_gives_a_clear_error(tmp_path):
    # An interpreter that cannot see the project's packages: the same Python, isolated (-I) and
    # without site-packages (-S).
    bad = tmp_path / "python-without-spark-state"
    bad.write_text(f"#!/bin/sh\nexec {sys.executable} -I -S \"$@\"\n")
    bad.chmod(0o755)
    message = _run_job("bad_python_job.py", str(tmp_path), str(bad))["message"]
    assert "spark_state.provider.worker" in message and str(bad) in message
    assert "does not have spark-state installed" in message
    assert "spark.pyspark.python" in message

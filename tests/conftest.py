"""Shared fixtures: one SparkSession per test session, and a real S3 server (moto) on loopback.

Markers: ``spark`` (needs a JVM), ``s3`` (needs the moto server), ``hdfs`` (needs a real
NameNode at $HDFS_NAMENODE_URL; CI has none, so those tests skip there and say so).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from typing import Iterator

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def spark():
    """One SparkSession shared by every Spark test (start-up costs ~10 s)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from spark_state.spark.jvm import EXTENSIONS_CLASS, jar_path

    # The shim jar is on the classpath of every test session; each query chooses its provider
    # (tests compare ours with Spark's), so the session default stays Spark's HDFS provider.
    # local[2,4]: two task threads, up to 4 attempts per task (task-retry tests need retries).
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("spark-state-tests")
        .config("spark.jars", jar_path())
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.extensions", EXTENSIONS_CLASS)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.ansi.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server in its own process, speaking HTTP on a loopback port."""
    port = _free_port()
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto S3 server did not start on {endpoint}")
            time.sleep(0.1)
    yield endpoint
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


S3_TEST_CREDENTIALS = {"s3.access_key_id": "testing", "s3.secret_access_key": "testing", "s3.region": "us-east-1"}


@pytest.fixture
def s3_location(s3_endpoint: str) -> tuple[str, dict[str, str]]:
    """A fresh bucket on the moto server: returns (``s3://bucket/prefix`` URL, storage options)."""
    import boto3

    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=bucket)
    options = dict(S3_TEST_CREDENTIALS, **{"s3.endpoint_url": s3_endpoint})
    return f"s3://{bucket}/state", options


# --- Parallel runs (pytest-xdist; ./dev test runs with -n 2 --dist loadgroup) ----------------
#
# Each xdist worker is its own process with its own session fixtures (SparkSession, moto server,
# standalone cluster: free ports, own temp dirs). Two things are arranged here:
#
# * Work units: the tests that share a costly module-scoped fixture run on one worker, back to
#   back, so the fixture is built once, not once per worker: the Connect server, the soak run,
#   the wheel build, the CLI's checkpoint, keyed_process's and event time's unscaled runs, the
#   no-data batch tests' runs, the state-as-data query, the TTL dedup test's HDFS run; and, per operator case, the tests
#   that compare with the case's reference runs (test_operator_equivalence.reference_run, a
#   per-session cache shared with the ops tests). Every other test is a unit of its own.
#   (xdist's own ``xdist_group`` marks do not work with pytest 9.2: xdist 3.8 renames
#   ``item._nodeid``, which pytest no longer reads.)
# * Order: the long tests (their own Spark applications, clusters, restarts) are handed out
#   first and the many short ones last, so that the run does not end with one worker still in a
#   long test while the other has nothing left to do.

#: Modules whose tests share a module-scoped fixture that runs a query, a server or a build.
_SHARED_MODULES = {"tests/connect/test_connect.py", "tests/soak/test_soak_short.py", "tests/ops/test_cli.py",
                   "tests/packaging/test_wheel.py", "tests/process/test_keyed_process.py", "tests/process/test_time.py",
                   "tests/process/test_no_data_batches.py", "tests/state_data/test_state_data.py",
                   "tests/state_data/test_data_source.py", "tests/upgrade/test_upgrade_check.py"}
#: Tests (all their parameters) that share a module-scoped fixture.
_SHARED_TESTS = {"tests/spark/test_provider_ttl.py::test_dedup_with_ttl_keeps_state_bounded_while_hdfs_grows"}
#: Modules whose tests take the operator case as their first parameter and compare with its
#: reference runs; the equivalence module's tests without a case run agg_update.
_CASE_MODULES = {"tests/spark/test_operator_equivalence.py": "agg_update", "tests/ops/test_savepoint_restore.py": None,
                 "tests/ops/test_migrate.py": None, "tests/ops/test_rescale.py": None}
#: Run first, in this order (node id prefixes): the longest tests and units.
_LONG_FIRST = [
    "tests/reliability/test_speculation.py", "tests/reliability/test_kill.py", "tests/reliability/test_time_kills.py",
    "tests/lines/", "tests/soak/",
    "tests/spark/test_jobs.py", "tests/reliability/test_single_writer.py", "tests/connect/",
    "tests/spark/test_operator_equivalence.py", "tests/ops/", "tests/reliability/", "tests/packaging/",
    "tests/faults/", "tests/spark/", "tests/process/", "tests/state_data/", "tests/upgrade/", "tests/docs/", "tests/s3/",
    "examples/",
]


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: tests of one unit run on one worker, in collection order."""
    path, _, name = nodeid.partition("::")
    function, _, params = name.removesuffix("]").partition("[")
    if path in _CASE_MODULES:
        first = params.split("-", 1)[0]
        case = first if first[:1].islower() else _CASE_MODULES[path]  # provider ids are CamelCase
        if case:
            return f"case:{case}"
    if path in _SHARED_MODULES:
        return path
    if f"{path}::{function}" in _SHARED_TESTS:
        return f"{path}::{function}"
    return nodeid


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        return next((i for i, prefix in enumerate(_LONG_FIRST) if item.nodeid.startswith(prefix)), len(_LONG_FIRST))

    items.sort(key=rank)  # stable: collection order within a rank


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # the tests run without pytest-xdist too (in one process)
    pass
else:
    class _WorkUnitScheduling(LoadScopeScheduling):
        """xdist's load-scope scheduling (each unit goes whole to the next free worker, in
        collection order with --no-loadscope-reorder) over the units of :func:`work_unit`."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    def pytest_xdist_make_scheduler(config, log):
        return _WorkUnitScheduling(config, log) if config.getvalue("dist") == "loadgroup" else None

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

    from spark_state.jvm import jar_path

    # The shim jar is on the classpath of every test session; each query chooses its provider
    # (tests compare ours with Spark's), so the session default stays Spark's HDFS provider.
    # local[2,4]: two task threads, up to 4 attempts per task (task-retry tests need retries).
    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("spark-state-tests")
        .config("spark.jars", jar_path())
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "4")
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

"""An S3 server on loopback (moto) for the benchmarks that put a checkpoint on S3, and the storage
options that reach it.

moto accepts any credentials; the benchmarks use ``testing`` everywhere, as the test suite does,
so that a real AWS profile on the machine is never picked up.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid

CREDENTIALS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


def start_server(timeout_s: float = 30) -> tuple[subprocess.Popen, str]:
    """A moto server on a free loopback port; returns the process and its endpoint URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline:
                proc.terminate()
                raise RuntimeError("the moto server did not start") from None
            time.sleep(0.1)


def client(endpoint: str):
    """A boto3 S3 client of ``endpoint``."""
    import boto3

    return boto3.client("s3", endpoint_url=endpoint, **CREDENTIALS)


def create_bucket(endpoint: str, prefix: str) -> str:
    """A new bucket ``<prefix>-<random>`` on ``endpoint``; returns its name."""
    bucket = f"{prefix}-{uuid.uuid4().hex[:8]}"
    client(endpoint).create_bucket(Bucket=bucket)
    return bucket


def storage_options(endpoint: str) -> dict[str, str]:
    """spark-state's checkpoint storage options for ``endpoint`` (``s3.*``)."""
    return {"s3.endpoint_url": endpoint, "s3.access_key_id": "testing", "s3.secret_access_key": "testing",
            "s3.region": "us-east-1"}

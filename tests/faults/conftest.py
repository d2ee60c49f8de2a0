"""Fixtures of the storage fault tests: the fault proxy in front of the moto S3 server, and a
tiny tmpfs (see ``tinyfs``)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Iterator

import boto3
import pytest

from faults.s3proxy import FaultProxy
from faults.tinyfs import TinyFs

# The query tests reuse the streaming harness of tests/spark and the functions of tests/process.
_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _sub in ("spark", "process"):
    if os.path.join(_TESTS, _sub) not in sys.path:
        sys.path.insert(0, os.path.join(_TESTS, _sub))

#: Retries that keep tests quick but still exercise backoff: waits of up to 20, 40, 80 ... ms,
#: at most 400 ms; 8 attempts (the default) in at most 30 s (the default).
FAST_RETRY = {"retry.baseDelayMs": "20", "retry.maxDelayMs": "400"}


@dataclass
class ProxiedS3:
    """A fresh bucket reached through a fault proxy."""

    url: str                      # s3://bucket/state
    options: dict[str, str]       # storage options through the proxy
    direct: dict[str, str]        # storage options straight to moto (to check what is stored)
    proxy: FaultProxy
    bucket: str
    client: object                # a plain boto3 client straight to moto

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def open_uploads(self) -> list[dict]:
        return self.client.list_multipart_uploads(Bucket=self.bucket).get("Uploads", [])


@pytest.fixture
def proxied_s3(s3_endpoint: str, s3_location: tuple[str, dict[str, str]]) -> Iterator[ProxiedS3]:
    url, direct = s3_location
    with FaultProxy(s3_endpoint, seed=20240611) as proxy:
        options = dict(direct, **{"s3.endpoint_url": proxy.endpoint}, **FAST_RETRY)
        client = boto3.client("s3", endpoint_url=s3_endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")
        bucket = url[len("s3://"):].split("/", 1)[0]
        yield ProxiedS3(url, options, dict(direct), proxy, bucket, client)


@pytest.fixture
def tinyfs_factory(tmp_path) -> Iterator:
    """``make(name, size_bytes) -> TinyFs``; every mount is unmounted after the test."""
    mounted: list[TinyFs] = []

    def make(name: str, size: int) -> TinyFs:
        fs = TinyFs(str(tmp_path / name), size)
        mounted.append(fs)
        return fs

    yield make
    for fs in mounted:
        fs.unmount()

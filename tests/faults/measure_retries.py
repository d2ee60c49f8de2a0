"""Measure how S3 checkpoint storage behaves under faults, with the default retry policy.

Not a test (pytest does not collect it) and not a benchmark: one run prints the figures the
README's "Storage faults" section quotes. It starts its own moto server and fault proxy::

    .venv/bin/python tests/faults/measure_retries.py
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time

import boto3

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from faults.s3proxy import FaultProxy  # noqa: E402
from spark_state.storage import open_storage  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _persistent(proxy: FaultProxy, options: dict, kind: str, op: str, call) -> str:
    proxy.clear()
    before = len(proxy.records)
    proxy.add(kind, ops={op})
    started = time.monotonic()
    try:
        call(open_storage("s3://bucket/m", options))
        outcome = "succeeded?!"
    except Exception as exc:  # what the caller gets
        outcome = type(exc).__name__
    elapsed = time.monotonic() - started
    proxy.clear()
    return f"{kind:>10} on {op:<10} -> {outcome} after {elapsed:5.1f} s, {len(proxy.records) - before} HTTP requests"


def main() -> None:
    port = _free_port()
    moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="t", aws_secret_access_key="t",
                     region_name="us-east-1").create_bucket(Bucket="bucket")
        with FaultProxy(endpoint, seed=1) as proxy:
            options = {"s3.endpoint_url": proxy.endpoint, "s3.access_key_id": "t", "s3.secret_access_key": "t",
                       "s3.region": "us-east-1"}
            st = open_storage("s3://bucket/m", options)
            st.write_bytes("x", b"1" * 1000)
            print("persistent faults, default policy (8 attempts, 30 s budget):")
            print(" ", _persistent(proxy, options, "slowdown", "GetObject", lambda s: s.read_bytes("x")))
            print(" ", _persistent(proxy, options, "drop", "PutObject", lambda s: s.write_bytes("y", b"2")))
            print(" ", _persistent(proxy, options, "deny", "PutObject", lambda s: s.write_bytes("y", b"2")))

            for share in (0.0, 0.25):
                proxy.clear()
                for kind, part in (("slowdown", 0.3), ("internal", 0.2), ("drop", 0.2), ("lose-reply", 0.15),
                                   ("cut-body", 0.15)):
                    if share:
                        proxy.add(kind, share=share * part / (1 - share * 0.5))
                st = open_storage("s3://bucket/m", options)
                before = len(proxy.records)
                latencies = []
                for i in range(60):
                    started = time.monotonic()
                    st.write_bytes(f"mixed/{i}", os.urandom(1000))
                    st.read_bytes(f"mixed/{i}")
                    latencies.append(time.monotonic() - started)
                requests = len(proxy.records) - before
                faults = sum(1 for r in proxy.records[before:] if r.fault)
                latencies.sort()
                print(f"share {share:.0%}: 60 write+read pairs all succeeded; {requests} HTTP requests, {faults} faults "
                      f"({faults / max(requests, 1):.0%}); per pair median {statistics.median(latencies):.2f} s, "
                      f"p95 {latencies[int(0.95 * len(latencies))]:.2f} s, max {latencies[-1]:.2f} s; "
                      f"storage-layer retries {st.stats.retries}, exhausted {st.stats.exhausted}")
    finally:
        moto.terminate()


if __name__ == "__main__":
    main()

"""Reliability tests reuse the streaming harness of ``tests/spark`` and the process test
functions of ``tests/process``; some need a Spark standalone cluster of two "hosts"."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

_TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for sub in ("spark", "process"):
    path = os.path.join(_TESTS, sub)
    if path not in sys.path:
        sys.path.insert(0, path)


def _free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory):
    """A Spark standalone master and two workers, one core each, bound to 127.0.0.2 and
    127.0.0.3: two executors on two *hosts*. Spark never runs a speculative copy of a task on
    the host of the running attempt, and every executor of ``local-cluster`` is on one host,
    so speculation needs this. Started from pyspark's own ``bin/spark-class``."""
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    spark_class = os.path.join(spark_home, "bin", "spark-class")
    workdir = tmp_path_factory.mktemp("standalone")
    env = dict(os.environ, SPARK_HOME=spark_home, PYSPARK_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1")
    port = _free_port()
    procs = []
    logs = []

    def start(name, *args):
        log = open(workdir / f"{name}.log", "w")
        logs.append(log)
        procs.append(subprocess.Popen([spark_class, *args], stdout=log, stderr=subprocess.STDOUT, env=env,
                                      cwd=workdir, start_new_session=True))

    url = f"spark://127.0.0.1:{port}"
    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", "0")
        for host in ("127.0.0.2", "127.0.0.3"):
            start(f"worker-{host}", "org.apache.spark.deploy.worker.Worker", "--host", host, "--cores", "1",
                  "--memory", "1g", "--webui-port", "0", "--work-dir", str(workdir / f"work-{host}"), url)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            text = (workdir / "master.log").read_text()
            if text.count("Registering worker") >= 2:
                break
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"standalone cluster process died:\n{text[-3000:]}")
            time.sleep(0.5)
        else:
            raise RuntimeError(f"standalone workers did not register:\n{(workdir / 'master.log').read_text()[-3000:]}")
        yield url
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, 15)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
        for log in logs:
            log.close()

"""One measured run in a fresh Python process and JVM.

A SparkSession stopped and rebuilt in one process keeps its JVM: the JIT warm-up of the previous
run, loaded state store providers and their maintenance threads, RocksDB's native memory and the
garbage of the previous run carry over, and ``spark.jars`` or ``spark.driver.memory`` only take
effect in a new JVM. So a benchmark runs each (workload, contender, heap) as its own script again,
``script --_worker '<spec JSON>'``; the worker writes its figures to ``spec["result"]`` (one JSON
object, or one JSON line per batch with :func:`append_line`) and its log goes to a file.

The worker runs in a session of its own (``start_new_session``) so that a run past its cap is
stopped with everything it started: the JVM and its Python workers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Optional

#: The hidden option through which a benchmark script runs as a worker.
WORKER_FLAG = "--_worker"


def add_worker_option(parser) -> None:
    """The hidden ``--_worker SPEC`` option of a benchmark script."""
    import argparse

    parser.add_argument(WORKER_FLAG, dest="_worker", help=argparse.SUPPRESS)


def serve(args, run_worker: Callable[[dict], Optional[dict]]) -> bool:
    """If this process is a worker (``--_worker SPEC``), run ``run_worker(spec)`` and write what it
    returns (if anything) to ``spec["result"]``; returns whether it was a worker."""
    if not getattr(args, "_worker", None):
        return False
    spec = json.loads(args._worker)
    result = run_worker(spec)
    if result is not None:
        write_result(spec["result"], result)
    return True


@dataclass
class WorkerRun:
    """How a worker process ended."""

    returncode: Optional[int]
    timed_out: bool
    log_path: str

    def log_tail(self, chars: int = 3000, drop_stack: bool = False) -> str:
        """The end of the worker's log (without JVM stack frames with ``drop_stack``)."""
        try:
            with open(self.log_path, errors="replace") as f:
                text = f.read()
        except OSError:
            return ""
        if drop_stack:
            text = "\n".join(line for line in text.splitlines() if not line.startswith("\tat "))
        return text[-chars:]


def run(script: str, spec: dict, log_path: str, cap_s: Optional[float] = None,
        watch: Optional[Callable[[int, threading.Event], None]] = None,
        env: Optional[dict] = None) -> WorkerRun:
    """Run ``script`` as a worker on ``spec``; kill its process group after ``cap_s`` seconds.
    ``watch(pid, stop)`` runs in a thread while the worker runs (an RSS sampler)."""
    env = dict(env if env is not None else os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    stop = threading.Event()
    timed_out = False
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, os.path.abspath(script), WORKER_FLAG, json.dumps(spec)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        watcher = threading.Thread(target=watch, args=(proc.pid, stop), daemon=True) if watch else None
        if watcher:
            watcher.start()
        try:
            proc.wait(timeout=cap_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the JVM and Python workers go too
            proc.wait()
        finally:
            stop.set()
            if watcher:
                watcher.join()
    return WorkerRun(proc.returncode, timed_out, log_path)


def run_batches(script: str, spec: dict, cap_s: Optional[float],
                watch: Optional[Callable[[int, threading.Event], None]] = None) -> list[dict]:
    """Run a worker that writes a JSON line per batch to ``spec["result"]`` (log beside it,
    ``.log``); returns its lines, with an ``error`` line if the cap stopped it."""
    done = run(script, spec, spec["result"] + ".log", cap_s, watch)
    if done.timed_out:
        append_line(spec["result"], {"error": f"stopped after the {cap_s:.0f} s cap"})
    return read_lines(spec["result"])


def record_batches(query, path: str, line_of: Callable[[dict], dict]) -> None:
    """In a worker: one JSON line per completed micro-batch of ``query`` (``line_of(progress)``) as
    it lands, until the query ends; an ``error`` line if it fails (the lines before it stand: a
    provider that runs out of memory is reported up to its last batch)."""
    from .queries import follow

    try:
        for p in follow(query):
            append_line(path, line_of(p))
    except Exception as exc:
        append_line(path, {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"})


def append_line(path: str, record: dict) -> None:
    """One JSON line more in a worker's result file (a batch's figures, or an ``error``)."""
    with open(path, "a") as out:
        out.write(json.dumps(record) + "\n")


def read_lines(path: str) -> list[dict]:
    """Every JSON line of a worker's result file; none if it wrote none."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_result(path: str) -> Optional[dict]:
    """A worker's one JSON result, or None if it wrote none."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def write_result(path: str, result: dict) -> None:
    """A worker's one JSON result."""
    with open(path, "w") as out:
        json.dump(result, out)

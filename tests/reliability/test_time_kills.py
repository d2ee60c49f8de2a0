"""Timers and watermarks through whole-application, executor and worker kills on two executor JVMs
(``local-cluster[2,1,1024]``, ``jobs/time_kill_job.py``): event-time timers, processing-time timers
and a two-input function, every batch compared with the model of an uninterrupted run over the
batches Spark formed, and every batch's time with Spark's own (the offset log).

The sequence (from a report of a watermark one batch ahead after such kills):

1. the application is killed after batch ``K1``'s output was written and before Spark committed
   the batch;
2. the restarted application runs ``K1`` again; meanwhile one executor JVM is killed (the
   standalone worker starts another), then a provider worker; ``K1`` completes;
3. later the application is killed between the file source's log write of batch ``K2`` and the
   offset log's (a directory in the place of ``offsets/<K2>`` makes that write fail, so the kill
   lands there every time): Spark's file source then puts the files of ``K2`` and ``K2 + 1`` in
   one batch (exactly-once per file, not per batch boundary), and every later batch reads the
   file after its own number. That is the drift of the report: the input, not the function's
   time, moved by one batch; Spark's watermark moved with it and the function's equals it in
   every batch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Optional

import pytest

import time_kill_fns as T
from killtest import _descendants, batch_files, expected_agg, kill_tree
from streaming_harness import write_batches
from time_fns import expected_co_counts, watermarks

pytestmark = pytest.mark.spark

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "time_kill_job.py")
NUM_BATCHES = 8
#: the batch killed between its output and its commit, and run again with an executor kill
K1 = 2
#: the batch whose offset log write the application is killed before
K2 = 5


class _Job:
    """One start of the application, its output lines read as they come."""

    def __init__(self, workdir: str, log) -> None:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        self.proc = subprocess.Popen([sys.executable, JOB, workdir], stdout=subprocess.PIPE, stderr=log, text=True,
                                     env=env, start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def done(self) -> bool:
        return "DONE" in self.lines


def _held(control: str, flag: str) -> Optional[int]:
    """The pid held at ``flag`` (see ``time_kill_fns.Holding``), if any."""
    for name in os.listdir(control):
        if name.startswith(f"{flag}.held-"):
            return int(name.rsplit("-", 1)[1])
    return None


def _wait(job: _Job, what, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        if job.proc.poll() is not None:
            raise AssertionError(f"the job exited ({job.proc.returncode}) while the test waited; output {job.lines}")
        time.sleep(0.1)
    kill_tree(job.proc.pid)
    raise AssertionError(f"timed out waiting; output {job.lines}")


def _ancestor(pid: int, marker: str) -> int:
    while pid > 1:
        with open(f"/proc/{pid}/cmdline") as f:
            if marker in f.read():
                return pid
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    raise AssertionError(f"no ancestor process runs {marker}")


def _running(root: int, marker: str) -> list[int]:
    found = []
    for pid in _descendants(root):
        try:
            with open(f"/proc/{pid}/cmdline") as f:
                if marker in f.read().replace("\0", " "):
                    found.append(pid)
        except OSError:
            continue
    return sorted(found)


def _run_with_kills(workdir: str) -> list[str]:
    """The three starts of the module docstring; returns what the test did, in order."""
    control = os.path.join(workdir, "control")
    os.makedirs(control)
    offsets = os.path.join(workdir, "ckpt-session", "offsets")
    source_log = os.path.join(workdir, "ckpt-session", "sources", "0")
    done: list[str] = []
    with open(os.path.join(workdir, "job.log"), "a") as log:
        def flag(name: str, on: bool) -> None:
            path = os.path.join(control, name)
            if on:
                open(path, "w").close()
            elif os.path.exists(path):
                os.remove(path)

        flag(f"sink-{K1}", True)
        job = _Job(workdir, log)
        _wait(job, lambda: _held(control, f"sink-{K1}"))
        kill_tree(job.proc.pid)
        done.append(f"application killed after batch {K1}'s output")
        flag(f"sink-{K1}", False)

        flag(f"fn-{K1}", True)
        job = _Job(workdir, log)
        held = _wait(job, lambda: _held(control, f"fn-{K1}"))
        os.kill(_ancestor(held, "CoarseGrainedExecutorBackend"), signal.SIGKILL)
        done.append(f"executor JVM killed in batch {K1}")
        time.sleep(2)
        workers = _running(job.proc.pid, "spark_state.provider.worker")
        assert workers, "a provider worker runs"
        os.kill(workers[0], signal.SIGKILL)
        done.append("provider worker killed")
        flag(f"fn-{K1}", False)
        _wait(job, lambda: os.path.exists(os.path.join(offsets, str(K2 - 1))))
        os.mkdir(os.path.join(offsets, str(K2)))
        _wait(job, lambda: os.path.exists(os.path.join(source_log, str(K2))))
        kill_tree(job.proc.pid)
        os.rmdir(os.path.join(offsets, str(K2)))
        done.append(f"application killed between the file source's and the offset log's writes of batch {K2}")

        job = _Job(workdir, log)
        _wait(job, job.done, timeout=600)
        job.proc.wait(timeout=120)
    return done


def _outputs(workdir: str, query: str) -> dict[int, dict]:
    d = os.path.join(workdir, "out", query)
    return {int(n[:-5]): json.load(open(os.path.join(d, n))) for n in os.listdir(d) if n.endswith(".json")}


def _grouped(data: list[list[tuple]], grouping: dict[int, list[int]]) -> list[list[tuple]]:
    assert sorted(grouping) == list(range(len(grouping)))
    return [[r for f in grouping[b] for r in data[f]] for b in sorted(grouping)]


def _rows(out: dict[int, dict]) -> dict[int, list]:
    return {b: [tuple(r) for r in o["rows"]] for b, o in out.items()}


def test_timers_and_watermarks_through_application_executor_and_worker_kills(tmp_path):
    workdir = str(tmp_path)
    data = {name: T.events(seed, NUM_BATCHES) for name, seed in (("events", 1), ("left", 2), ("right", 3))}
    for name, rows in data.items():
        write_batches(os.path.join(workdir, "input", name), rows, T.EVENTS_SCHEMA)
    done = _run_with_kills(workdir)
    assert len(done) == 4, done

    # the session query: Spark put the files of K2 and K2 + 1 in batch K2
    grouping = batch_files(os.path.join(workdir, "ckpt-session"))
    assert grouping[K2] == [K2, K2 + 1] and all(files == [b] for b, files in grouping.items() if b < K2), grouping
    batches = _grouped(data["events"], grouping)
    out = _outputs(workdir, "session")
    spark_rule = watermarks(batches + [[]], lambda r: T.ms_of(r[1]), T.DELAY_MS)
    assert _rows(out) == {b: [tuple(r) for r in rows] for b, rows in T.expected_sessions(batches).items()}
    for b, o in out.items():
        assert o["spark"][0] == spark_rule[b], f"session batch {b}: Spark's watermark"
        assert all(r[5] == o["spark"][0] for r in o["rows"]), f"session batch {b}: the function's watermark"
    assert sum(len(o["rows"]) for o in out.values()) >= 10 and len({b for b, o in out.items() if o["rows"]}) >= 4

    # processing-time timers fire at the next batch, at its processing time: Spark's batch timestamp
    grouping = batch_files(os.path.join(workdir, "ckpt-ptime"))
    out = _outputs(workdir, "ptime")
    timestamps = {b: o["spark"][1] for b, o in out.items()}
    expected = T.expected_processing_counts(_grouped(data["events"], grouping), timestamps)
    assert _rows(out) == {b: [tuple(r) for r in rows] for b, rows in expected.items()}

    # two inputs, event time on both
    lefts = _grouped(data["left"], batch_files(os.path.join(workdir, "ckpt-co"), 0))
    rights = _grouped(data["right"], batch_files(os.path.join(workdir, "ckpt-co"), 1))
    out = _outputs(workdir, "co")
    expected = expected_co_counts(lefts, rights, T.DELAY_MS, T.DELAY_MS)
    assert _rows(out) == {b: [tuple(r) for r in rows] for b, rows in expected.items()}
    for b, o in out.items():
        assert all(r[4] == o["spark"][0] for r in o["rows"]), f"co batch {b}: the function's watermark"
    assert len({b for b, o in out.items() if o["rows"]}) >= 3

    # Spark's own aggregation on spark-state's provider, through the same kills
    grouping = batch_files(os.path.join(workdir, "ckpt-agg"))
    agg_data = [[(k, 1, 0) for k, _ in rows] for rows in data["events"]]
    expected = expected_agg(agg_data, grouping)
    assert {b: [[r[0], r[1]] for r in rows] for b, rows in _rows(_outputs(workdir, "agg")).items()} == \
        {b: [[k, n] for k, n, _ in rows] for b, rows in expected.items()}

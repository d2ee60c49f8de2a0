"""The kill test: seeded scenarios of SIGKILLs during commits, snapshot uploads and maintenance,
for the provider and ``keyed_process``, each run's output compared batch by batch with a model
of an uninterrupted run.

A *scenario* (:func:`plan`) is a list of crash-point entries
(:mod:`spark_state.testing.crashpoints`), each one of:

* a kill of the provider's Python state worker (role ``provider``) or of a PySpark Python
  worker running ``keyed_process`` (role ``process``) at the ``n``-th time a crash point is
  reached -- the process SIGKILLs itself; Spark fails the task and its retry restores;
* the same point, but the whole application is killed (``:job``): the process holding the
  point signals the harness, which SIGKILLs the driver, the executor JVM and every Python
  worker at once, then starts the application again from its checkpoints;

plus, optionally, a whole-application kill at a seeded random time after a given batch.
Everything comes from the seed, so a failing scenario is re-run exactly by its seed (the
ordinals count reaches across all processes, so which task is hit may differ when tasks race;
the outcome must not).

:func:`run_scenario` writes the input (one parquet file per micro-batch), runs
``jobs/crash_job.py`` (a provider aggregation and ``keyed_process`` with ``AllStates`` in one
application) until it has drained the input, restarting it after every whole-application
kill, and returns what each batch wrote. :func:`check` compares that with the models, checks
that every scheduled kill happened, and that the state locations hold no leftovers of an
attempt below their retained versions.
"""

from __future__ import annotations

import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Optional

from spark_state.testing.crashpoints import ENV_VAR, Entry, format_schedule

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs", "crash_job.py")

#: Micro-batches of a scenario (one input file each), rows per batch, keys.
NUM_BATCHES = 10
ROWS_PER_BATCH = 60
NUM_KEYS = 30

#: Crash points each kind of process reaches in this job. ``maintenance.snapshot.*`` is not
#: here: Spark never calls ``VersionedStore.snapshot()`` (the engine test covers it).
PROVIDER_POINTS = ("commit.before-changelog", "commit.after-changelog", "commit.after-apply",
                   "snapshot.mid-upload", "commit.before-manifest", "commit.after-manifest",
                   "snapshot.background.before-manifest", "cleanup.mid-delete", "provider.maintenance")
PROCESS_POINTS = ("commit.before-changelog", "commit.after-changelog", "commit.after-apply",
                  "snapshot.mid-upload", "commit.before-manifest", "commit.after-manifest",
                  "cleanup.mid-delete")
#: Ordinals that a run reaches for sure, per point: 2 partitions x 10 batches = 20 commits per
#: query; a snapshot every 2 commits uploads >= 3 files; cleanup deletes something after each
#: snapshot from the 4th version on (>= 4 per partition); maintenance runs every second.
ORDINALS = {
    "commit.before-changelog": (2, 16), "commit.after-changelog": (2, 16), "commit.after-apply": (2, 16),
    "commit.before-manifest": (2, 16), "commit.after-manifest": (2, 16), "snapshot.mid-upload": (1, 24),
    "cleanup.mid-delete": (1, 6), "provider.maintenance": (2, 8),
    # The provider's worker uploads snapshots in the background: >= 3 per partition complete.
    "snapshot.background.before-manifest": (1, 6),
}


@dataclass
class Scenario:
    seed: int
    entries: list[Entry]
    #: (batch, delay s): kill the whole application ``delay`` after the agg query wrote ``batch``
    timed_kill: Optional[tuple[int, float]] = None

    def describe(self) -> str:
        timed = f", job kill {self.timed_kill[1]:.2f}s after batch {self.timed_kill[0]}" if self.timed_kill else ""
        return f"seed {self.seed}: " + ", ".join(e.render() for e in self.entries) + timed


def all_targets() -> list[tuple[str, str]]:
    return [("provider", p) for p in PROVIDER_POINTS] + [("process", p) for p in PROCESS_POINTS]


def plan(seed: int, targets: Optional[list[tuple[str, str]]] = None, *, job_kills: int = 1,
         timed_kill: bool = False) -> Scenario:
    """A scenario from ``seed``: one entry per (role, point) in ``targets`` (default: 2 to 6
    drawn at random), with a random ordinal; ``job_kills`` of them kill the whole application;
    with ``timed_kill`` also a whole-application kill at a random time."""
    rng = random.Random(seed)
    if targets is None:
        targets = rng.sample(all_targets(), rng.randint(2, 6))
    job_idx = set(rng.sample(range(len(targets)), min(job_kills, len(targets))))
    entries = []
    for i, (role, point) in enumerate(targets):
        lo, hi = ORDINALS[point]
        entries.append(Entry(point, rng.randint(lo, hi), role=role, job=i in job_idx))
    # Early and short, so that plenty of batches remain after it in whichever start it lands.
    timed = (rng.randint(1, 3), round(rng.uniform(0.0, 1.0), 2)) if timed_kill else None
    return Scenario(seed, entries, timed)


def ci_scenarios(seeds: list[int]) -> list[Scenario]:
    """Scenarios that together hit every (role, point) once: the targets are dealt out over the
    seeds in a seeded order; each scenario has one point-triggered whole-application kill, and
    the last one also a timed one."""
    targets = all_targets()
    random.Random(sum(seeds)).shuffle(targets)
    dealt = [targets[i::len(seeds)] for i in range(len(seeds))]
    return [plan(seed, dealt[i], timed_kill=i == len(seeds) - 1) for i, seed in enumerate(seeds)]


# ------------------------------------------------------------------------------- input, models
def batches(seed: int) -> list[list[tuple[str, int, int]]]:
    """The scenario's input, one list per file: (k, v, seq) rows; ``v == 0`` clears the key in
    AllStates; ``seq`` numbers all rows in order."""
    rng = random.Random(seed * 7919 + 1)
    return [[(f"k{rng.randrange(NUM_KEYS):02d}", rng.randrange(0, 10), f * ROWS_PER_BATCH + i)
             for i in range(ROWS_PER_BATCH)] for f in range(NUM_BATCHES)]


def batch_files(checkpoint: str, source: int = 0) -> dict[int, list[int]]:
    """Which input files each micro-batch of a query read from its file source ``source``, from
    its checkpoint: the offset log gives each batch's end offset in the file source's log, which
    names the files. Usually one file per batch; two when a whole-application kill fell between
    the two logs' writes."""
    paths: dict[int, str] = {}
    source_log = os.path.join(checkpoint, "sources", str(source))
    for name in os.listdir(source_log):
        if name.startswith("."):
            continue
        with open(os.path.join(source_log, name)) as f:
            for line in f.read().splitlines()[1:]:
                if line.strip():
                    entry = json.loads(line)
                    paths[int(entry["batchId"])] = entry["path"]
    ends = {}
    for name in os.listdir(os.path.join(checkpoint, "offsets")):
        if name.isdigit():
            with open(os.path.join(checkpoint, "offsets", name)) as f:
                ends[int(name)] = int(json.loads(f.read().splitlines()[2 + source])["logOffset"])
    grouping, previous = {}, -1
    for batch in sorted(ends):
        grouping[batch] = [int(paths[o].rsplit("batch-", 1)[1].split(".")[0]) for o in range(previous + 1, ends[batch] + 1)]
        previous = ends[batch]
    return grouping


def expected_agg(data, grouping: dict[int, list[int]]) -> dict[int, list]:
    """Update mode: each key of the batch once, with its running count and sum."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    out = {}
    for b, files in sorted(grouping.items()):
        rows = [r for f in files for r in data[f]]
        for k, v, _ in rows:
            totals[k][0] += 1
            totals[k][1] += v
        out[b] = sorted([k, *totals[k]] for k in {k for k, _, _ in rows})
    return out


def expected_keyed(data, grouping: dict[int, list[int]]) -> dict[int, list]:
    """AllStates over each batch's rows in ``seq`` order (``process_fns`` has the model)."""
    from process_fns import expected_all_states

    ids = sorted(grouping)
    per_batch = [[(k, v) for f in grouping[b] for k, v, _ in data[f]] for b in ids]
    return {ids[i]: [list(r) for r in rows] for i, rows in expected_all_states(per_batch).items()}


# ------------------------------------------------------------------------------------ running
@dataclass
class Outcome:
    scenario: Scenario
    workdir: str
    #: batch -> rows, per query ("agg", "keyed")
    outputs: dict[str, dict[int, list]]
    fired: list[str]
    #: crash-point entries that held a process for a whole-application kill, and timed kills
    job_kills: list[str]
    starts: int
    log: str = ""
    notes: list[str] = field(default_factory=list)


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = defaultdict(list)
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children[ppid].append(int(name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill_tree(root: int) -> None:
    """SIGKILL ``root`` and every process below it at once. PySpark's daemon puts itself in a
    process group of its own, so a ``killpg`` of the job's group would miss it and its workers:
    freeze the whole tree first (nothing can fork or exit meanwhile), then kill it."""
    frozen: set[int] = set()
    while True:
        tree = ({root} | _descendants(root)) - frozen
        if not tree:
            break
        for pid in tree:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        frozen |= tree
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _write_input(workdir: str, data) -> None:
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from streaming_harness import write_batches

    schema = StructType([StructField("k", StringType()), StructField("v", LongType()), StructField("seq", LongType())])
    write_batches(os.path.join(workdir, "input"), data, schema)


def run_scenario(scenario: Scenario, workdir: str, *, max_starts: int = 8, timeout: float = 1800.0) -> Outcome:
    """Run the job until it drains its input, restarting it after each whole-application kill."""
    os.makedirs(workdir, exist_ok=True)
    markers = os.path.join(workdir, "markers")
    os.makedirs(markers, exist_ok=True)
    tmp = os.path.join(workdir, "tmp")  # the job's temp files (keyed stores' local dirs) stay here
    os.makedirs(tmp, exist_ok=True)
    _write_input(workdir, batches(scenario.seed))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, TMPDIR=tmp,
               **{ENV_VAR: format_schedule(markers, scenario.entries)})
    job_kills: list[str] = []
    handled_job_markers: set[str] = set()
    timed_pending = scenario.timed_kill
    deadline = time.monotonic() + timeout
    log_path = os.path.join(workdir, "job.log")
    starts = 0
    done = False
    with open(log_path, "a") as log:
        while not done:
            if starts >= max_starts:
                raise AssertionError(f"{scenario.describe()}: the job did not finish in {max_starts} starts; "
                                     f"log: {log_path}")
            starts += 1
            log.write(f"\n===== start {starts} =====\n")
            log.flush()
            proc = subprocess.Popen([sys.executable, JOB, workdir], stdout=subprocess.PIPE, stderr=log, text=True,
                                    env=env, start_new_session=True)
            lines: "queue.Queue[Optional[str]]" = queue.Queue()

            def pump(stream=proc.stdout, q=lines):
                for line in stream:
                    q.put(line)
                q.put(None)

            threading.Thread(target=pump, daemon=True).start()
            timed_at: Optional[float] = None
            killed = False
            while True:
                try:
                    line = lines.get(timeout=0.05)
                except queue.Empty:
                    line = ""
                if line is None:  # stdout closed: the job exited (or we killed it)
                    break
                if line:
                    log.write("[stdout] " + line)
                    if line.strip() == "DONE":
                        done = True
                    parts = line.split()
                    if (timed_pending and timed_at is None and parts[:2] == ["BATCH", "agg"]
                            and int(parts[2]) >= timed_pending[0]):
                        timed_at = time.monotonic() + timed_pending[1]
                if not killed:
                    new = sorted(n for n in os.listdir(markers) if n.startswith("job-") and n not in handled_job_markers)
                    if new:
                        kill_tree(proc.pid)
                        killed = True
                        handled_job_markers.update(new)
                        job_kills.extend(new)
                    elif timed_at is not None and time.monotonic() >= timed_at and not done:
                        kill_tree(proc.pid)
                        killed = True
                        job_kills.append(f"timed-after-batch-{timed_pending[0]}+{timed_pending[1]}s")
                        timed_pending = None
                if time.monotonic() > deadline:
                    kill_tree(proc.pid)
                    raise AssertionError(f"{scenario.describe()}: timed out; log: {log_path}")
            code = proc.wait()
            log.write(f"===== exit {code} (killed by the harness: {killed}) =====\n")
            log.flush()
            if not killed and not done:
                raise AssertionError(f"{scenario.describe()}: the job failed with exit code {code} without "
                                     f"being killed by the test:\n{_tail(log_path)}")
    outputs: dict[str, dict[int, list]] = {}
    for query in ("agg", "keyed"):
        d = os.path.join(workdir, "out", query)
        outputs[query] = {int(n[:-5]): json.load(open(os.path.join(d, n))) for n in os.listdir(d)
                          if n.endswith(".json") and not n.startswith(".")}
    fired = sorted(n for n in os.listdir(markers) if n.startswith(("fired-", "job-")))
    return Outcome(scenario, workdir, outputs, fired, job_kills, starts, log=log_path)


def _tail(path: str, chars: int = 6000) -> str:
    with open(path) as f:
        return f.read()[-chars:]


def check(outcome: Outcome) -> None:
    """Assert the outcome of a scenario equals an uninterrupted run's; messages name the seed."""
    sc = outcome.scenario
    why = f"kill test {sc.describe()} (workdir {outcome.workdir}, log {outcome.log})"
    data = batches(sc.seed)
    for query, model in (("agg", expected_agg), ("keyed", expected_keyed)):
        grouping = batch_files(os.path.join(outcome.workdir, f"ckpt-{query}"))
        assert sorted(f for files in grouping.values() for f in files) == list(range(NUM_BATCHES)), \
            f"{why}: {query} read the input files {grouping}"
        if any(len(files) > 1 for files in grouping.values()):
            outcome.notes.append(f"{query}: a kill between Spark's source and offset logs merged files into "
                                 f"one batch: {grouping}")
        expected, got = model(data, grouping), outcome.outputs[query]
        assert sorted(got) == sorted(grouping), f"{why}: {query} wrote batches {sorted(got)}, ran {sorted(grouping)}"
        for b in sorted(grouping):
            assert got[b] == expected[b], f"{why}: {query} batch {b} differs from the uninterrupted run"
    want = sorted(("job-" if e.job else "fired-") + e.label for e in sc.entries)
    assert outcome.fired == want, f"{why}: scheduled kills {want}, happened {outcome.fired}"
    expected_job_kills = sum(e.job for e in sc.entries) + (1 if sc.timed_kill else 0)
    assert len(outcome.job_kills) == expected_job_kills, f"{why}: whole-application kills {outcome.job_kills}"
    assert outcome.starts == 1 + expected_job_kills, f"{why}: {outcome.starts} starts"
    for store in store_dirs(outcome.workdir):
        stray = out_of_cleanups_reach(store)
        assert not stray, f"{why}: {store} holds files that cleanup can never delete: {stray}"


def store_dirs(workdir: str) -> list[str]:
    """Every VersionedStore directory of the job: the provider's partitions, keyed_process's."""
    return sorted(root for root, dirs, _ in os.walk(workdir) if "manifests" in dirs)


def out_of_cleanups_reach(store_dir: str) -> list[str]:
    """Files a crash left in a store that retention would never delete: anything but the
    versioned names of the four file kinds, or temp files of writes to such names (which a
    kill can cut short). Files of abandoned attempts have versioned names and are deleted
    once retention passes their version (``test_crash_points.py`` checks that on the engine)."""
    from spark_state.checkpoint import layout
    from spark_state.storage.base import temp_target

    stray = []
    for directory in ("manifests", "changelogs", "snapshots", "shared"):
        path = os.path.join(store_dir, directory)
        for name in os.listdir(path) if os.path.isdir(path) else ():
            name = temp_target(name) or name
            ok = layout.parse_manifest_name(name) if directory == "manifests" else layout.parse_versioned_name(name)
            if ok is None:
                stray.append(f"{directory}/{name}")
    return stray

"""Crash points of the engine: a writer process SIGKILLed at each point, then restarted as a
new run, ends with exactly the state of a writer that never crashed; every retained version
restores; nothing the crash left behind outlives retention. Also the schedule's parsing
and its once-only counting across processes (``spark_state.testing.crashpoints``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from engine_crash_child import model
from spark_state import EngineConfig, VersionedStore
from spark_state.checkpoint import layout
from spark_state.checkpoint.retention import list_copies, needed_files, read_manifest
from spark_state.checkpoint.runs import RunContext, RunRegistry
from spark_state.errors import ConfigError
from spark_state.storage import open_storage
from spark_state.testing import crashpoints
from spark_state.testing.crashpoints import ENV_VAR, Entry, format_schedule, parse_schedule

CHILD = os.path.join(os.path.dirname(__file__), "engine_crash_child.py")
UNTIL = 9


def _run_child(checkpoint: str, backend: str, run_id: str, env_spec: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **{ENV_VAR: env_spec})
    return subprocess.run([sys.executable, CHILD, checkpoint, backend, run_id, str(UNTIL), *extra],
                          capture_output=True, text=True, env=env, timeout=120)


CASES = [
    ("rocksdb", "commit.before-changelog", 3),
    ("rocksdb", "commit.after-changelog", 3),
    ("rocksdb", "commit.after-apply", 4),
    ("rocksdb", "snapshot.mid-upload", 2),
    ("rocksdb", "commit.before-manifest", 4),
    ("rocksdb", "commit.after-manifest", 3),
    ("rocksdb", "cleanup.mid-delete", 1),
    ("rocksdb", "maintenance.snapshot.before-manifest", 2),
    ("hashmap", "commit.after-apply", 3),
    ("hashmap", "snapshot.mid-upload", 1),
    ("hashmap", "cleanup.mid-delete", 2),
    # Snapshots uploaded in the background (the provider's worker): a crash mid-upload, or after
    # the upload but before the version's manifest is re-pointed at it, or while commits go on
    # beside an upload, loses nothing. (Cleanup is the same code; when a background upload
    # triggers it depends on timing, so the kill test covers it on the provider.) For the two
    # points inside the upload, the writer waits for each upload before its next commit, as the
    # provider's micro-batches usually do: without that, on a loaded machine the upload's thread
    # may reach its point only at close(), after the last commit, and the case proves nothing.
    # Commits beside an upload in flight are the third case's.
    ("rocksdb+bg", "snapshot.mid-upload", 2),
    ("rocksdb+bg", "snapshot.background.before-manifest", 1),
    ("rocksdb+bg", "commit.before-manifest", 4),
]


@pytest.mark.parametrize("backend,point,n", CASES, ids=[f"{b}-{p}@{n}" for b, p, n in CASES])
def test_writer_killed_at_a_crash_point_resumes_with_the_uninterrupted_state(tmp_path, backend, point, n):
    checkpoint, markers = str(tmp_path / "ckpt"), tmp_path / "markers"
    markers.mkdir()
    spec = format_schedule(str(markers), [Entry(point, n, role="engine")])
    extra = ("--maintenance-snapshots",) if point.startswith("maintenance.") else ()
    if backend.endswith("+bg"):
        backend, extra = backend[:-len("+bg")], extra + ("--background-snapshots",)
        if point.startswith("snapshot."):
            extra += ("--await-uploads",)

    first = _run_child(checkpoint, backend, "run-1", spec, *extra)
    assert first.returncode == -signal.SIGKILL, (first.returncode, first.stdout, first.stderr[-3000:])
    assert (markers / f"fired-engine-{point}-{n}").exists()
    storage = open_storage(checkpoint)
    reached = max(list_copies(storage), default=0)
    assert reached < UNTIL, "the writer was killed after its last commit: the test proves nothing"

    # The restart keeps the schedule: the entry already fired, so it never fires again.
    second = _run_child(checkpoint, backend, "run-2", spec, *extra)
    assert second.returncode == 0 and f"DONE {UNTIL}" in second.stdout, second.stderr[-3000:]

    reader = VersionedStore(storage, runs=RunContext(RunRegistry(storage), None))
    copies = list_copies(storage)
    assert max(copies) == UNTIL
    for version in sorted(copies):  # every retained version restores to the model
        reader.load(version)
        assert dict(reader.iterate()) == model(version), f"version {version}"
        assert reader.num_keys() == len(model(version))
    reader.close()

    # Nothing the crash left below the retained versions survives retention. Background
    # uploads clean up when they land, so the last cleanup of run 2 may come before its last
    # commits; the next cleanup (any writer's) must then remove everything the crash left.
    if "--background-snapshots" in extra:
        VersionedStore(storage, EngineConfig(retained_versions=2), runs=RunContext(RunRegistry(storage), None)) \
            .cleanup()
        copies = list_copies(storage)
    oldest = min(copies)
    manifests = [read_manifest(storage, v, r) for v, ranks in copies.items() for r in ranks]
    needed = needed_files(storage, manifests)
    for directory in ("manifests", "changelogs", "snapshots", "shared"):
        for name in storage.list_dir(directory):
            version = (layout.parse_manifest_name(name) or (None,))[0] if directory == "manifests" \
                else layout.parse_versioned_name(name)
            assert f"{directory}/{name}" in needed or version >= oldest, f"{directory}/{name} leaked"
        local = os.path.join(checkpoint, directory)
        for name in os.listdir(local) if os.path.isdir(local) else ():
            assert not name.endswith(".tmp"), f"temp file {directory}/{name} left behind"


def test_an_entry_fires_once_across_processes_and_counts_only_its_role(tmp_path):
    markers = tmp_path / "m"
    markers.mkdir()
    spec = format_schedule(str(markers), [Entry("commit.after-apply", 3, role="engine", job=False),
                                          Entry("commit.after-apply", 2, role="provider")])
    code = (
        "import sys; from spark_state.testing import crashpoints as c\n"
        "c.set_role(sys.argv[1])\n"
        "for _ in range(int(sys.argv[2])): c.reached('commit.after-apply'); c.reached('commit.after-changelog')\n"
        "print('survived')\n"
    )

    def run(role: str, times: int) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code, role, str(times)], capture_output=True, text=True,
                              env=dict(os.environ, **{ENV_VAR: spec}), timeout=60)

    assert run("engine", 2).stdout.strip() == "survived"    # engine count 1, 2
    assert run("process", 5).stdout.strip() == "survived"   # another role: not counted
    assert run("engine", 2).returncode == -signal.SIGKILL   # engine count 3: fires
    assert run("engine", 4).stdout.strip() == "survived"    # 4..7: fired already
    assert run("provider", 1).stdout.strip() == "survived"
    assert run("provider", 1).returncode == -signal.SIGKILL
    assert sorted(p.name for p in markers.iterdir() if p.name.startswith("fired-")) == \
        ["fired-engine-commit.after-apply-3", "fired-provider-commit.after-apply-2"]
    assert (markers / "count-engine-commit.after-apply").read_text().strip().lstrip("0") == "7"


def test_schedules_are_validated(tmp_path):
    d = str(tmp_path)
    assert parse_schedule(f"dir={d};provider:commit.after-changelog@3;snapshot.mid-upload@1:job").entries == (
        Entry("commit.after-changelog", 3, "provider", False), Entry("snapshot.mid-upload", 1, None, True))
    for bad, message in [
        ("provider:commit.after-changelog@3", "must start with dir="),
        (f"dir={d}/missing;commit.after-apply@1", "does not exist"),
        (f"dir={d};commit.after-aply@1", "unknown crash point 'commit.after-aply'"),
        (f"dir={d};driver:commit.after-apply@1", "unknown role 'driver'"),
        (f"dir={d};commit.after-apply@0", "counts from 1"),
        (f"dir={d};commit.after-apply", r"is not \[<role>:\]<point>@<n>\[:job\]"),
        (f"dir={d};commit.after-apply@2:later", "is not"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_schedule(bad)


def test_unset_the_hook_does_nothing():
    # Production: the variable is unset in this test process, so reaching a point is a no-op.
    assert ENV_VAR not in os.environ and crashpoints._SPEC is None
    crashpoints.reached("commit.after-apply")

"""Testing only: named points in the engine where a crash test SIGKILLs the process.

The engine calls :func:`reached` at a few points of a commit, a snapshot upload and a
cleanup. In production nothing is configured and :func:`reached` returns at once (one
global lookup). A crash test enables a *schedule* through the environment variable
``SPARK_STATE_TESTING_CRASH_POINTS``, read once per process at import. An environment
variable rather than a Spark conf, because it reaches every process that commits state:
the provider's Python workers (started by the executor JVM, which inherits the driver's
environment in ``local`` mode, or through ``spark.executorEnv.*``) and PySpark's own Python
workers running ``keyed_process``. Never set it in production.

Schedule
--------
::

    SPARK_STATE_TESTING_CRASH_POINTS = dir=<marker dir>;<entry>[;<entry>...]
    entry = [<role>:]<point>@<n>[:job]

* ``<point>`` is one of :data:`POINTS`; ``<n>`` (>= 1) says at which time the point is
  reached that the entry fires, counted **across every process** sharing the marker
  directory and across restarts (the count is a file in the marker directory, updated
  under ``flock``). Each entry therefore fires exactly once per marker directory, so a
  restarted job does not crash again at the same place.
* ``<role>`` restricts counting and firing to one kind of process: ``provider`` (the Spark
  provider's Python worker), ``process`` (a PySpark worker running ``keyed_process`` or
  ``checkpointed_process``) or ``engine`` (anything else, e.g. a test using the engine API).
  Without a role any process counts.
* Action: by default the process that reaches the point writes ``fired-<entry>`` into the
  marker directory and SIGKILLs itself (no cleanup, no ``finally``, no ``atexit``). With
  ``:job`` it writes ``job-<entry>`` (holding its pid) and blocks: the test harness, which
  watches the directory, SIGKILLs the whole application (driver, executor JVM, every
  Python worker) while this process is held at the point. If nobody does within
  :data:`JOB_WAIT_S`, it SIGKILLs itself.

Example: ``dir=/tmp/m;provider:commit.after-changelog@3;process:snapshot.mid-upload@2:job``.
A malformed schedule raises :class:`~spark_state.errors.ConfigError` naming the variable
at the first point reached (a test builds schedules with :func:`format_schedule`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import signal
import time
from dataclasses import dataclass
from typing import Optional

from ..errors import ConfigError

ENV_VAR = "SPARK_STATE_TESTING_CRASH_POINTS"

#: Every crash point, and the state of the store when a process dies there.
POINTS: dict[str, str] = {
    "commit.before-changelog": "the commit has its run rank; nothing of the version is written",
    "commit.after-changelog": "the changelog is durable; the local copy is unchanged, no manifest",
    "commit.after-apply": "the changes are applied to the local copy; no snapshot, no manifest",
    "snapshot.mid-upload": "after each file of a snapshot upload, before its descriptor",
    "commit.before-manifest": "changelog (and snapshot, if one is due) written; no manifest yet (a background "
                              "snapshot is only captured locally by then)",
    "commit.after-manifest": "the version is committed; the caller has not been told",
    "cleanup.mid-delete": "retention deleted obsolete manifests, not yet the files they named",
    "maintenance.snapshot.before-manifest": "VersionedStore.snapshot() uploaded; the manifest is not rewritten",
    "snapshot.background.before-manifest": "a background snapshot is uploaded (descriptor written); the "
                                           "version's manifest is not re-pointed at it yet",
    "provider.maintenance": "the provider's maintenance call (Spark's maintenance thread) starts its cleanup",
}
ROLES = ("provider", "process", "engine")
#: How long a ``:job`` entry holds its process for the harness before killing it alone.
JOB_WAIT_S = 300.0

_LOG = logging.getLogger(__name__)
_ENTRY_RE = re.compile(r"^(?:(?P<role>[a-z]+):)?(?P<point>[a-z.-]+)@(?P<n>\d+)(?::(?P<action>job))?$")


@dataclass(frozen=True)
class Entry:
    """One scheduled crash: the ``n``-th time ``point`` is reached (by ``role``, or anyone)."""

    point: str
    n: int
    role: Optional[str] = None
    job: bool = False

    @property
    def counter(self) -> str:
        """Name of the count this entry watches (entries of one role and point share it)."""
        return f"count-{self.role or 'any'}-{self.point}"

    @property
    def label(self) -> str:
        return f"{self.role or 'any'}-{self.point}-{self.n}"

    def render(self) -> str:
        return f"{self.role + ':' if self.role else ''}{self.point}@{self.n}{':job' if self.job else ''}"


@dataclass(frozen=True)
class Schedule:
    marker_dir: str
    entries: tuple[Entry, ...]

    def render(self) -> str:
        return ";".join([f"dir={self.marker_dir}", *(e.render() for e in self.entries)])


def parse_schedule(spec: str) -> Schedule:
    """Parse and validate a schedule (see the module docstring); raises ConfigError."""
    parts = [p.strip() for p in spec.split(";") if p.strip()]
    if not parts or not parts[0].startswith("dir="):
        raise ConfigError(f"{ENV_VAR} (testing only) must start with dir=<marker dir>, got {spec!r}")
    marker_dir = parts[0][len("dir="):]
    if not os.path.isdir(marker_dir):
        raise ConfigError(f"{ENV_VAR} (testing only): marker directory {marker_dir!r} does not exist")
    entries = []
    for raw in parts[1:]:
        m = _ENTRY_RE.match(raw)
        if not m:
            raise ConfigError(f"{ENV_VAR} (testing only): entry {raw!r} is not [<role>:]<point>@<n>[:job]")
        role, point, n = m.group("role"), m.group("point"), int(m.group("n"))
        if role is not None and role not in ROLES:
            raise ConfigError(f"{ENV_VAR} (testing only): unknown role {role!r} in {raw!r}; roles: {', '.join(ROLES)}")
        if point not in POINTS:
            raise ConfigError(f"{ENV_VAR} (testing only): unknown crash point {point!r} in {raw!r}; "
                              f"points: {', '.join(POINTS)}")
        if n < 1:
            raise ConfigError(f"{ENV_VAR} (testing only): {raw!r} counts from 1")
        entries.append(Entry(point, n, role, m.group("action") == "job"))
    return Schedule(marker_dir, tuple(entries))


def format_schedule(marker_dir: str, entries: list[Entry]) -> str:
    """The environment value for ``entries`` (validated by parsing it back)."""
    spec = Schedule(marker_dir, tuple(entries)).render()
    parse_schedule(spec)
    return spec


# ------------------------------------------------------------------------ the hook
_SPEC: Optional[str] = os.environ.get(ENV_VAR) or None
_schedule: Optional[Schedule] = None
_role = "engine"


def set_role(role: str) -> None:
    """Say which kind of process this is (the provider worker and the process runner do)."""
    global _role
    _role = role


def reached(point: str) -> None:
    """Crash point ``point`` is reached: crash if the schedule says so (testing only)."""
    if _SPEC is None:
        return
    _hit(point)


def _hit(point: str) -> None:
    global _schedule
    if _schedule is None:
        assert _SPEC is not None
        _schedule = parse_schedule(_SPEC)
    schedule = _schedule
    watching = [e for e in schedule.entries if e.point == point and e.role in (None, _role)]
    counts: dict[str, int] = {}
    for entry in watching:
        if entry.counter not in counts:
            counts[entry.counter] = _increment(os.path.join(schedule.marker_dir, entry.counter))
        if counts[entry.counter] == entry.n:
            _fire(schedule.marker_dir, entry)


def _increment(path: str) -> int:
    """Add one to the count in ``path`` under an exclusive lock; return the new count.

    The count is a fixed-width field written with one ``pwrite``, so a process killed at
    any moment leaves either the old or the new count."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        raw = os.pread(fd, 20, 0).strip()
        count = int(raw or b"0") + 1
        os.pwrite(fd, b"%020d" % count, 0)
        return count
    finally:
        os.close(fd)  # releases the lock


def _fire(marker_dir: str, entry: Entry) -> None:
    name = ("job-" if entry.job else "fired-") + entry.label
    with open(os.path.join(marker_dir, f".{name}.tmp"), "w") as f:
        f.write(f"{os.getpid()} {_role} {entry.render()}\n")
    os.replace(os.path.join(marker_dir, f".{name}.tmp"), os.path.join(marker_dir, name))
    if entry.job:
        _LOG.error("testing crash point %s: holding pid %d for the harness to kill the whole job",
                   entry.render(), os.getpid())
        deadline = time.monotonic() + JOB_WAIT_S
        while time.monotonic() < deadline:
            time.sleep(0.05)
        _LOG.error("testing crash point %s: nobody killed the job; killing this process alone", entry.render())
    else:
        _LOG.error("testing crash point %s: SIGKILL of pid %d (%s)", entry.render(), os.getpid(), _role)
    for handler in logging.getLogger().handlers:  # the worker's log should say why it died
        try:
            handler.flush()
        except Exception:
            pass
    os.kill(os.getpid(), signal.SIGKILL)

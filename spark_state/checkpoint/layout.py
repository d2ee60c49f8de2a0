"""Names of checkpoint files, relative to one store's root: pure functions, no I/O.

Layout (one store = one operator partition)::

    manifests/<version>.json                   commit point of <version> (written last), unranked
    manifests/<version>.r<rank>.json           commit point of <version> by the run of rank <rank>
    changelogs/<version>-<commit id>.arrow     the writes of the epoch that made <version>
    snapshots/<version>-<snapshot id>.json     a snapshot's descriptor (written last)
    snapshots/<version>-<snapshot id>-<name>   a snapshot's private files (MANIFEST, OPTIONS, ...)
    shared/<version>-<db id>-<sst name>        immutable SSTs, referenced by snapshots

The layout is flat (no directories below the four top-level ones) because object stores
have no directories: one listing per kind of file finds everything cleanup must consider.
Ids are random hex, so a retried or speculative commit of the same version never
overwrites a file another attempt's manifest may reference: the manifest decides which
attempt's files make up the version. A run (see :mod:`.runs`) creates its manifest of a
version with create-if-absent, so within a run the first committer wins; manifests of
other runs of the same version sit beside it and the run history says which one is valid.
Unranked manifests (the engine API without a run, and earlier releases) are replaced
atomically by a re-commit.

Run registries (per store for the Spark provider, per state location for the Python API)::

    runs/<seq>.json                            a run's record (create-if-absent, never changed)
    runs/<seq>.fenced                          that run was fenced off by an older live run
"""

from __future__ import annotations

import re
import uuid
from typing import Optional

from .. import constants as C

_MANIFEST_RE = re.compile(r"^(\d+)(?:\.r(\d+))?\.json$")
_RUN_RE = re.compile(r"^(\d+)\.(json|fenced)$")
_VERSIONED_RE = re.compile(r"^(\d+)-([0-9a-f]+)(?:[-.].*)?$")


def new_id() -> str:
    """A short random id for a commit attempt, snapshot or DB instance (64 bits of hex)."""
    return uuid.uuid4().hex[:16]


def manifest_path(version: int, rank: int = C.UNRANKED) -> str:
    """``manifests/<version>.json`` (unranked) or ``manifests/<version>.r<rank>.json``."""
    if rank == C.UNRANKED:
        return f"{C.MANIFEST_DIR}/{version}.json"
    return f"{C.MANIFEST_DIR}/{version}.r{rank}.json"


def changelog_path(version: int, commit_id: str) -> str:
    return f"{C.CHANGELOG_DIR}/{version}-{commit_id}.arrow"


def snapshot_descriptor_path(version: int, snapshot_id: str) -> str:
    return f"{C.SNAPSHOT_DIR}/{version}-{snapshot_id}.json"


def snapshot_file_path(version: int, snapshot_id: str, file_name: str) -> str:
    return f"{C.SNAPSHOT_DIR}/{version}-{snapshot_id}-{file_name}"


def shared_file_path(version: int, instance_id: str, file_name: str) -> str:
    return f"{C.SHARED_DIR}/{version}-{instance_id}-{file_name}"


def parse_manifest_name(name: str) -> Optional[tuple[int, int]]:
    """``"12.json"`` -> (12, 0); ``"12.r3.json"`` -> (12, 3); anything else -> None."""
    match = _MANIFEST_RE.match(name)
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)) if match.group(2) else C.UNRANKED


def run_record_path(seq: int) -> str:
    return f"{C.RUNS_DIR}/{seq}.json"


def fence_path(seq: int) -> str:
    return f"{C.RUNS_DIR}/{seq}.fenced"


def parse_run_name(name: str) -> Optional[tuple[int, str]]:
    """``"3.json"`` -> (3, "json"); ``"3.fenced"`` -> (3, "fenced"); anything else -> None."""
    match = _RUN_RE.match(name)
    return (int(match.group(1)), match.group(2)) if match else None


def parse_versioned_name(name: str) -> Optional[int]:
    """The leading version of a changelog, snapshot or shared file name, or None."""
    match = _VERSIONED_RE.match(name)
    return int(match.group(1)) if match else None

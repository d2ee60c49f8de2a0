"""Restore planning: which copy of a version a ``load`` brings in, and from what.

:func:`plan_restore` decides, before anything local changes, and returns a
:class:`RestorePlan`; ``VersionedStore.load`` executes it (:mod:`.restore`). The plan is one of:

* ``cached``  -- the local copy already holds the version: nothing to do;
* ``empty``   -- version 0, the empty state;
* ``replay``  -- the local copy is on the manifest's lineage: replay only the manifest's
  changelogs after the one that produced the local state;
* ``restore`` -- replace the local copy with the manifest's base snapshot (or the empty
  state when it has none) and replay all of the manifest's changelogs.

Invariants:

* **Commit point.** A version exists when its manifest exists (written last by a commit); the
  manifest is self-contained: its base snapshot plus its ``replay`` changelogs, in order, are
  the version. A changelog is named by the commit id of the attempt that wrote it
  (``changelogs/<v>-<commit id>.arrow``), so the path identifies one attempt's state.
* **Lineage.** The local copy carries its *origin*: the path of the changelog or snapshot
  that produced it ("" for the empty version 0). Replaying onto it is valid only when the
  origin is the manifest's base snapshot (or a snapshot captured from that very state, an
  *alias*) or one of its ``replay`` changelogs; anything else restores from storage.
* **Fencing.** The run registry is consulted once per plan (:meth:`.fencing.RunGate.admit_load`),
  before any manifest is read: it picks the valid copy (run rank) of the version for this
  run. Without a run the unranked copy is loaded, else the highest-ranked one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from ..checkpoint.metadata import ChangelogRef, Manifest
from ..checkpoint.retention import list_copies, read_manifest
from ..errors import CheckpointFileMissingError, VersionNotFoundError
from ..storage import CheckpointStorage
from .fencing import Admission, RunGate


@dataclass(frozen=True)
class HeldCopy:
    """What the local copy holds: ``version`` None when there is no trusted local copy."""

    version: Optional[int] = None
    #: the changelog or snapshot path that produced the local state ("" for version 0)
    origin: Optional[str] = None
    #: snapshot path -> the changelog whose state it captured (background snapshots)
    aliases: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RestorePlan:
    """How a load obtains ``version`` (see the module docstring for the modes)."""

    version: int
    mode: str
    manifest: Optional[Manifest] = None
    #: the changelogs to replay, in order (after the base snapshot for ``restore``)
    replay: tuple[ChangelogRef, ...] = ()


def plan_restore(storage: CheckpointStorage, gate: RunGate, version: int, held: HeldCopy) -> RestorePlan:
    """The plan for loading ``version`` onto the local copy ``held``. Reads manifests (and,
    with a run, the run registry and one listing of manifests); changes nothing."""
    cached = held.version == version
    admission = gate.admit_load(version, cached)
    if cached:
        return RestorePlan(version, "cached", None)
    if version == 0:
        return RestorePlan(0, "empty", None)
    manifest = manifest_to_load(storage, version, admission)
    start = replay_start(manifest, held)
    if start is not None:
        return RestorePlan(version, "replay", manifest, manifest.replay[start:])
    return RestorePlan(version, "restore", manifest, manifest.replay)


def manifest_to_load(storage: CheckpointStorage, version: int, admission: Admission) -> Manifest:
    """The manifest of the copy of ``version`` to load: the one the run registry admitted, or
    (without a run: ``admission.copies`` is None) the unranked one, else the highest-ranked."""
    copies = admission.copies
    if copies is None:
        try:
            return read_manifest(storage, version)
        except CheckpointFileMissingError:
            pass
        copies = list_copies(storage)
        ranks = copies.get(version, [])
        rank = max(ranks) if ranks else None
    else:
        ranks = copies.get(version, [])
        rank = admission.rank
    if rank is None:
        if ranks:
            raise VersionNotFoundError(
                version, sorted(copies), storage.url,
                detail=f"its copies (run ranks {ranks}) were all made by attempts that a later run "
                       "superseded, so none of them is a committed state")
        raise VersionNotFoundError(version, sorted(copies), storage.url)
    return read_manifest(storage, version, rank)


def replay_start(manifest: Manifest, held: HeldCopy) -> Optional[int]:
    """Index of the first changelog of ``manifest`` to replay on the local copy ``held``, or
    None when the local copy is not on this manifest's lineage (or is newer than it)."""
    if held.version is None or held.version > manifest.version:
        return None
    origin = held.origin
    base = manifest.base_snapshot
    if origin == "" and base is None:
        return 0
    if base is not None and (origin == base.path or held.aliases.get(base.path) == origin):
        return 0
    for i, ref in enumerate(manifest.replay):
        if ref.path == origin:
            return i + 1
    return None

"""The engine room's parts on their own: the restore plan chosen for a given set of manifests,
snapshots and runs (spark_state.engine.restore_plan), the run gate (engine.fencing), the
snapshot decision (engine.capture) and the commit pipeline's outcome (engine.commit)."""

from __future__ import annotations

import os

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.checkpoint.metadata import ChangelogRef, Manifest, SnapshotRef
from spark_state.checkpoint.retention import read_manifest
from spark_state.checkpoint.runs import RunContext, RunRegistry
from spark_state.engine.capture import snapshot_due
from spark_state.engine.fencing import RunGate
from spark_state.engine.restore_plan import HeldCopy, plan_restore, replay_start
from spark_state.errors import ConcurrentWriterError, VersionNotFoundError
from spark_state.storage import open_storage


def _ref(version: int) -> ChangelogRef:
    return ChangelogRef(path=f"changelogs/{version}-c{version}.arrow", size=1, crc32=0, version=version)


def _manifest(version: int, base: int = 0, snapshot_id: str = "s") -> Manifest:
    """Version ``version`` on a snapshot of ``base`` (0: no snapshot), replaying the rest."""
    snapshot = SnapshotRef(base, snapshot_id, f"snapshots/{base}-{snapshot_id}.json") if base else None
    return Manifest(version=version, commit_id=f"c{version}", backend="hashmap", changelog=_ref(version),
                    base_snapshot=snapshot, replay=tuple(_ref(v) for v in range(base + 1, version + 1)), num_keys=0)


# ----------------------------------------------------------------------------- lineage (pure)
def test_replay_start_continues_from_the_changelog_that_made_the_local_copy():
    m = _manifest(5)
    assert replay_start(m, HeldCopy(3, _ref(3).path)) == 3          # replay versions 4 and 5
    assert replay_start(m, HeldCopy(0, "")) == 0                    # empty state, no base: all of them
    assert replay_start(m, HeldCopy(None, _ref(3).path)) is None    # no trusted local copy
    assert replay_start(m, HeldCopy(6, _ref(6).path)) is None       # newer than the manifest
    assert replay_start(m, HeldCopy(3, "changelogs/3-other-attempt.arrow")) is None  # another attempt's state


def test_replay_start_on_a_snapshot_base_accepts_the_snapshot_or_the_state_it_captured():
    m = _manifest(5, base=3)
    base = m.base_snapshot.path
    assert replay_start(m, HeldCopy(3, base)) == 0
    assert replay_start(m, HeldCopy(3, _ref(3).path)) is None       # not known to be the captured state
    assert replay_start(m, HeldCopy(3, _ref(3).path, {base: _ref(3).path})) == 0  # a background capture of it
    assert replay_start(m, HeldCopy(4, _ref(4).path)) == 1
    assert replay_start(m, HeldCopy(0, "")) is None                 # the empty state is not on this lineage


def test_the_snapshot_decision_counts_the_chain_a_commit_would_write():
    assert not snapshot_due(0, _manifest(9), None)                  # interval 0: never
    assert snapshot_due(3, _manifest(2), None)                      # 2 changelogs + this commit's
    assert not snapshot_due(3, _manifest(1), None)
    assert not snapshot_due(3, _manifest(5, base=4), None)          # the chain restarts at the snapshot
    assert snapshot_due(1, None, None)


# ----------------------------------------------------------------------------- plans over storage
def _engine_store(root, tmp_path, runs=None, name="w") -> VersionedStore:
    config = EngineConfig(backend="hashmap", snapshot_interval=0,
                          local_dir=str(tmp_path / f"local-{name}-{os.urandom(3).hex()}"))
    return VersionedStore(str(root), config, runs=runs)


def _commit_versions(store: VersionedStore, start: int, end: int) -> None:
    store.load(start)
    for v in range(start + 1, end + 1):
        store.put(b"k", b"%d" % v)
        assert store.commit() == v


def test_the_plan_for_each_kind_of_local_copy(tmp_path):
    root = tmp_path / "ckpt"
    with _engine_store(root, tmp_path) as store:
        _commit_versions(store, 0, 3)
    storage = open_storage(str(root))
    gate = RunGate(None, storage)
    m2 = read_manifest(storage, 2)

    assert plan_restore(storage, gate, 0, HeldCopy(None)).mode == "empty"
    cached = plan_restore(storage, gate, 3, HeldCopy(3, "whatever"))
    assert (cached.mode, cached.manifest, cached.replay) == ("cached", None, ())
    replay = plan_restore(storage, gate, 3, HeldCopy(2, m2.changelog.path))
    assert replay.mode == "replay" and [r.version for r in replay.replay] == [3]
    restore = plan_restore(storage, gate, 3, HeldCopy(None))
    assert restore.mode == "restore" and [r.version for r in restore.replay] == [1, 2, 3]
    assert restore.manifest == read_manifest(storage, 3)
    with pytest.raises(VersionNotFoundError):
        plan_restore(storage, gate, 7, HeldCopy(None))


def _ctx(root, run_id) -> RunContext:
    return RunContext(RunRegistry(open_storage(str(root))), run_id)


def test_the_plan_loads_the_copy_of_the_run_that_superseded_the_others(tmp_path):
    root = tmp_path / "ckpt"
    with _engine_store(root, tmp_path, _ctx(root, "run-1"), "1") as first:
        _commit_versions(first, 0, 4)           # run 1 (rank 1) makes versions 1..4
    with _engine_store(root, tmp_path, _ctx(root, "run-2"), "2") as second:
        _commit_versions(second, 3, 4)          # run 2 (rank 2, start 3) re-runs batch 3: its copy of 4 wins
    storage = open_storage(str(root))
    plan = plan_restore(storage, RunGate(_ctx(root, None), storage), 4, HeldCopy(None))
    assert plan.mode == "restore" and (plan.manifest.rank, plan.manifest.run_id) == (2, "run-2")
    assert plan_restore(storage, RunGate(_ctx(root, None), storage), 3, HeldCopy(None)).manifest.rank == 1
    # Without run 2's copy, only run 1's copy of 4 is left, made by a batch run 2 re-ran: no committed state.
    storage.delete("manifests/4.r2.json")
    with pytest.raises(VersionNotFoundError, match="superseded"):
        plan_restore(storage, RunGate(_ctx(root, None), storage), 4, HeldCopy(None))


def test_a_run_that_starts_behind_is_stopped_by_the_gate_at_its_first_commit_not_its_load(tmp_path):
    root = tmp_path / "ckpt"
    with _engine_store(root, tmp_path, _ctx(root, "run-1"), "1") as first:
        _commit_versions(first, 0, 3)
    storage = open_storage(str(root))
    gate = RunGate(_ctx(root, "run-2"), storage)
    admission = gate.admit_load(1, cached=False)  # may still be a reader: no failure yet
    assert admission.rank == 1 and admission.copies == {1: [1], 2: [1], 3: [1]}
    with pytest.raises(ConcurrentWriterError, match="two queries are writing"):
        gate.commit_rank(1)
    assert gate.runs.own is None                  # it registered nothing


def test_a_cached_load_asks_the_registry_once_per_version_and_lists_nothing(tmp_path):
    root = tmp_path / "ckpt"
    storage = open_storage(str(root))
    listings = []
    original = storage.list_dir

    def counting(path):
        listings.append(path)
        return original(path)

    storage.list_dir = counting  # type: ignore[method-assign]
    gate = RunGate(_ctx(root, "run-1"), storage)
    gate.admit_load(0, cached=False)
    assert listings.count("manifests") == 1
    listings.clear()
    gate.admit_load(0, cached=True)           # checked already for version 0: no I/O at all
    assert listings == []
    assert RunGate(None, storage).admit_load(5, cached=False).copies is None  # no run: no registry


def test_a_commit_that_loses_to_an_earlier_attempt_adopts_the_winner(tmp_path):
    root = tmp_path / "ckpt"
    ctx = _ctx(root, "run-1")
    a, b = _engine_store(root, tmp_path, ctx, "a"), _engine_store(root, tmp_path, ctx, "b")
    with a, b:
        a.load(0)
        b.load(0)
        a.put(b"k", b"a")
        b.put(b"k", b"b")
        assert a.commit() == 1
        assert b.commit() == 1                    # a no-op: the version is a's
        assert b.last_commit.lost_to_earlier_attempt == "replaced"
        assert b.get(b"k") == b"a" and b.manifest.commit_id == a.manifest.commit_id

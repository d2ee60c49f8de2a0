"""Background snapshots (the provider's worker, ``VersionedStore(background_snapshots=True)``):
the capture of a due version is taken by the background thread after the commit returned, not
inside the commit; if the store moved on first, that snapshot is skipped and the next due commit
captures inside the commit; every version restores to the state an independent model gives."""

from __future__ import annotations

import threading

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.checkpoint.retention import read_manifest

BACKENDS = ["rocksdb", "hashmap"]


def _epoch(version: int) -> dict[bytes, bytes]:
    return {b"k%03d" % ((version * 7 + i) % 40): b"%d-%d" % (version, i) for i in range(15)}


def _model(version: int) -> dict[bytes, bytes]:
    state: dict[bytes, bytes] = {}
    for v in range(1, version + 1):
        state.update(_epoch(v))
    return state


@pytest.fixture(params=BACKENDS)
def store(request, tmp_path):
    config = EngineConfig(backend=request.param, snapshot_interval=2, retained_versions=10,
                          local_dir=str(tmp_path / "local"))
    s = VersionedStore(str(tmp_path / "ckpt"), config, background_snapshots=True)
    s.load(0)
    # Which thread took each capture, by version.
    captured_by: dict[int, str] = {}
    capture = s._capture_snapshot

    def recording(version: int):
        captured_by[version] = threading.current_thread().name
        return capture(version)

    s._capture_snapshot = recording  # type: ignore[method-assign]
    yield s, captured_by, str(tmp_path / "ckpt"), config
    s.close()


def _commit(s: VersionedStore) -> int:
    epoch = _epoch(s.version + 1)
    s.put_many(epoch.keys(), epoch.values())
    return s.commit()


def _snapshotted(checkpoint: str, version: int) -> bool:
    """Whether ``version``'s manifest restores from a snapshot of that very version."""
    from spark_state.storage import open_storage
    manifest = read_manifest(open_storage(checkpoint), version)
    return manifest.base_snapshot is not None and manifest.replay == ()


def _assert_every_version_restores(checkpoint: str, config: EngineConfig, until: int) -> None:
    with VersionedStore(checkpoint, config) as reader:
        for version in range(1, until + 1):
            reader.load(version)
            assert dict(reader.iterate()) == _model(version), f"version {version}"


def test_the_capture_is_taken_after_the_commit_by_the_background_thread(store):
    s, captured_by, checkpoint, config = store
    assert _commit(s) == 1
    # Version 2 is due: the commit hands it over; its capture waits for the lock this test takes
    # before the commit and keeps after it, so it cannot have happened inside the commit.
    with s._lock:
        assert _commit(s) == 2
        assert s.last_commit.snapshot_taken and 2 not in captured_by
    s._background.wait()
    assert captured_by[2].startswith("spark-state-snapshot"), captured_by
    assert _snapshotted(checkpoint, 2)
    assert _commit(s) == 3
    _assert_every_version_restores(checkpoint, config, 3)


def test_a_store_that_moved_on_skips_the_capture_and_the_next_due_commit_takes_its_own(store):
    s, captured_by, checkpoint, config = store
    _commit(s)
    with s._lock:  # two commits before the background thread can take version 2's capture
        assert _commit(s) == 2
        assert _commit(s) == 3  # due as well, but version 2's snapshot is still in flight
    s._background.wait()
    assert 2 not in captured_by and not _snapshotted(checkpoint, 2)
    assert s._background.last_capture_skipped
    assert _commit(s) == 4  # due: captured inside this commit, uploaded in the background
    assert captured_by[4] == threading.current_thread().name
    s._background.wait()
    assert _snapshotted(checkpoint, 4) and not s._background.last_capture_skipped
    assert _commit(s) == 5
    assert _commit(s) == 6  # back to deferred captures
    s._background.wait()
    assert captured_by[6].startswith("spark-state-snapshot") and _snapshotted(checkpoint, 6)
    _assert_every_version_restores(checkpoint, config, 6)

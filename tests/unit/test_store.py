"""VersionedStore behaviour on both backends, with local checkpoint storage."""

from __future__ import annotations

import os

import pytest

from spark_state import EngineConfig, StoreStateError, VersionedStore, VersionNotFoundError
from support import restored_state, run_epochs

BACKENDS = ["rocksdb", "hashmap"]


@pytest.fixture(params=BACKENDS)
def config(request, tmp_path) -> EngineConfig:
    return EngineConfig(backend=request.param, snapshot_interval=4, retained_versions=10,
                        local_dir=str(tmp_path / "local"))


@pytest.fixture
def store(config, tmp_path):
    with VersionedStore(str(tmp_path / "ckpt"), config) as s:
        s.load(0)
        yield s


def test_empty_version_zero(store):
    assert store.version == 0
    assert store.get(b"a") is None
    assert list(store.iterate()) == []
    assert store.versions() == []


def test_reads_see_uncommitted_writes(store):
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    assert store.get(b"a") == b"1"
    assert store.contains(b"b")
    assert store.commit() == 1
    store.put(b"a", b"10")
    store.delete(b"b")
    store.put(b"c", b"3")
    assert store.get(b"a") == b"10"
    assert store.get(b"b") is None and not store.contains(b"b")
    assert store.multi_get([b"a", b"b", b"c", b"zz"]) == [b"10", None, b"3", None]
    assert list(store.iterate()) == [(b"a", b"10"), (b"c", b"3")]


def test_abort_discards_pending_writes(store):
    store.put(b"a", b"1")
    store.commit()
    store.put(b"a", b"2")
    store.put(b"b", b"2")
    store.abort()
    assert store.get(b"a") == b"1" and store.get(b"b") is None
    assert store.commit() == 2
    assert list(store.iterate()) == [(b"a", b"1")]


def test_scans_are_ordered_and_bounded(store):
    keys = [b"\x00\x01a", b"\x00\x01b", b"\x00\x02a", b"\x00\xff\xff", b"\x01\x00", b"\xff\xff"]
    for k in keys[::2]:
        store.put(k, k)
    store.commit()
    for k in keys[1::2]:
        store.put(k, k)
    assert [k for k, _ in store.iterate()] == keys
    assert [k for k, _ in store.prefix_scan(b"\x00\x01")] == keys[:2]
    assert [k for k, _ in store.prefix_scan(b"\x00\xff")] == [b"\x00\xff\xff"]
    assert [k for k, _ in store.prefix_scan(b"\xff")] == [b"\xff\xff"]
    assert [k for k, _ in store.iterate(b"\x00\x02", b"\x01\x00")] == keys[2:4]
    store.delete(b"\x00\x01a")
    assert [k for k, _ in store.prefix_scan(b"\x00\x01")] == [b"\x00\x01b"]


def test_load_older_version_and_continue(store):
    store.put(b"a", b"1")
    store.commit()
    store.put(b"a", b"2")
    store.commit()
    store.load(1)
    assert store.get(b"a") == b"1"
    store.put(b"b", b"x")
    assert store.commit() == 2  # re-commit of version 2 replaces the first one
    store.load(2)
    assert list(store.iterate()) == [(b"a", b"1"), (b"b", b"x")]


def test_recommit_same_version_is_idempotent_overwrite(store, config, tmp_path):
    store.put(b"k", b"first")
    store.commit()
    for attempt in (b"retry-1", b"retry-2"):
        store.load(0)
        store.put(b"k", attempt)
        assert store.commit() == 1
    assert store.versions() == [1]
    assert restored_state(str(tmp_path / "ckpt"), config, 1) == [(b"k", b"retry-2")]


def test_every_retained_version_restores_bit_for_bit(store, config, tmp_path):
    history = run_epochs(store, 23)
    store.cleanup()
    store.close()
    retained = list(range(23 - config.retained_versions + 1, 24))
    with VersionedStore(str(tmp_path / "ckpt"), config) as probe:
        assert probe.versions() == retained
        with pytest.raises(VersionNotFoundError, match="available versions: 14..23"):
            probe.load(13)
    for version in retained:
        assert restored_state(str(tmp_path / "ckpt"), config, version) == sorted(history[version].items())


def test_missing_version_names_the_available_ones(store, tmp_path):
    for _ in range(3):
        store.put(b"a", b"1")
        store.commit()
    with pytest.raises(VersionNotFoundError) as err:
        store.load(7)
    assert "state version 7 not found" in str(err.value)
    assert "available versions: 1..3" in str(err.value)
    assert err.value.available == [1, 2, 3]


def test_operations_need_a_loaded_version(config, tmp_path):
    with VersionedStore(str(tmp_path / "ckpt"), config) as s:
        with pytest.raises(StoreStateError, match="call load"):
            s.get(b"a")
        with pytest.raises(StoreStateError):
            s.commit()
    with pytest.raises(StoreStateError, match="closed"):
        s.load(0)


def test_another_instance_replays_only_new_changelogs(config, tmp_path):
    ckpt = str(tmp_path / "ckpt")
    with VersionedStore(ckpt, config) as writer, VersionedStore(ckpt, config) as follower:
        writer.load(0)
        writer.put(b"a", b"1")
        writer.commit()
        follower.load(1)
        assert follower.last_restore.mode == "restore"
        for i in range(2):
            writer.put(b"b%d" % i, b"x")
            writer.commit()
        follower.load(3)
        assert follower.last_restore.mode == "replay"
        assert follower.last_restore.changelogs_replayed == 2
        assert list(follower.iterate()) == list(writer.iterate())


@pytest.mark.parametrize("written_by,read_by", [("rocksdb", "hashmap"), ("hashmap", "rocksdb")])
def test_backend_can_change_on_restart(tmp_path, written_by, read_by):
    ckpt = str(tmp_path / "ckpt")
    cfg = EngineConfig(backend=written_by, snapshot_interval=2, local_dir=str(tmp_path / "l"))
    with VersionedStore(ckpt, cfg) as s:
        history = run_epochs(s, 5)
    assert restored_state(ckpt, cfg.replace(backend=read_by), 5) == sorted(history[5].items())


def test_local_directory_is_removed_on_close(config, tmp_path):
    s = VersionedStore(str(tmp_path / "ckpt"), config)
    s.load(0)
    s.put(b"a", b"1")
    s.commit()
    local_root = config.local_dir

    def working_copies():  # store dirs in the process directories under localDir (localdirs)
        return [n for d in os.listdir(local_root) for n in os.listdir(os.path.join(local_root, d))
                if n.startswith("store-")]

    if config.backend == "rocksdb":
        assert working_copies()
    s.close()
    assert working_copies() == []


def test_key_count_is_exact_across_commits_and_restores(store, config, tmp_path):
    history = run_epochs(store, 9, keys=150, writes_per_epoch=90)
    assert store.num_keys() == len(history[9])
    with VersionedStore(str(tmp_path / "ckpt"), config) as fresh:
        for version in (3, 8, 9):
            fresh.load(version)
            assert fresh.num_keys() == len(history[version])


def test_export_view_is_an_openable_copy_of_the_committed_version(tmp_path):
    import rocksdict

    cfg = EngineConfig(backend="rocksdb", local_dir=str(tmp_path / "local"))
    with VersionedStore(str(tmp_path / "ckpt"), cfg) as store:
        history = run_epochs(store, 3, keys=100, writes_per_epoch=50)
        store.put(b"pending", b"not committed")
        view = str(tmp_path / "views" / "v3")
        store.export_view(view)
        store.commit()  # the view must not change with later commits
    reader = rocksdict.Rdict(view, rocksdict.Options(raw_mode=True),
                             access_type=rocksdict.AccessType.read_only(False))
    try:
        assert list(reader.items()) == sorted(history[3].items())
        assert reader.get(b"pending") is None
    finally:
        reader.close()

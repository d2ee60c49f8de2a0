"""An epoch's pending writes past ``memory.spillThreshold`` spill to local disk
(:mod:`spark_state.engine.spill`), and the store behaves exactly as if they had stayed in memory:
every read path (get, multi_get, contains, ordered scans, prefix scans), the commit (state, exact
key count, the changelog's rows), abort, and a restore from checkpoint storage. Independent model:
a dict, and a store with no limit fed the same operations."""

from __future__ import annotations

import os
import random

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.checkpoint import changelog
from spark_state.keys.system import SYSTEM_PREFIX

BACKENDS = ["rocksdb", "hashmap"]


def _key(rng: random.Random) -> bytes:
    return rng.randrange(3000).to_bytes(2, "big") + bytes(rng.randrange(3))


def _changelog_rows(store: VersionedStore) -> list:
    ref = store.manifest.changelog
    return list(changelog.decode(store.storage.read_bytes(ref.path), ref.path, ref.version))


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_store_that_spills_behaves_like_one_that_does_not(tmp_path, backend):
    spilling_config = EngineConfig(backend=backend, local_dir=str(tmp_path / "local"), spill_threshold_bytes=20_000)
    plain_config = EngineConfig(backend=backend, local_dir=str(tmp_path / "local"))
    rng = random.Random(5)
    model: dict[bytes, bytes] = {}
    with VersionedStore(str(tmp_path / "spilling"), spilling_config) as spilling, \
            VersionedStore(str(tmp_path / "plain"), plain_config) as plain:
        stores = (spilling, plain)
        for s in stores:
            s.load(0)
        version = 0
        for epoch in range(6):
            pending = dict(model)
            for step in range(4000):
                roll = rng.random()
                key = _key(rng)
                if roll < 0.5:
                    value = rng.randbytes(rng.randrange(1, 30))
                    for s in stores:
                        s.put(key, value)
                    pending[key] = value
                elif roll < 0.62:
                    for s in stores:
                        s.delete(key)
                    pending.pop(key, None)
                elif roll < 0.65:
                    keys = [_key(rng) for _ in range(20)]
                    values = [rng.randbytes(5) for _ in keys]
                    for s in stores:
                        s.put_many(keys, values)
                    pending.update(zip(keys, values))
                elif roll < 0.67:
                    keys = [_key(rng) for _ in range(10)]
                    for s in stores:
                        s.delete_many(keys)
                    for k in keys:
                        pending.pop(k, None)
                elif roll < 0.67 + 0.3:
                    assert spilling.get(key) == plain.get(key) == pending.get(key), (epoch, step)
                else:
                    keys = [_key(rng) for _ in range(8)]
                    assert spilling.multi_get(keys) == plain.multi_get(keys) == [pending.get(k) for k in keys]
                if step % 1000 == 999:
                    lo, hi = sorted([_key(rng), _key(rng)])
                    want = sorted((k, v) for k, v in pending.items() if lo <= k < hi)
                    assert list(spilling.iterate(lo, hi)) == list(plain.iterate(lo, hi)) == want
                    prefix = key[:1]
                    assert list(spilling.prefix_scan(prefix)) == \
                        sorted((k, v) for k, v in pending.items() if k.startswith(prefix))
            assert spilling._overlay.spill is not None and spilling._overlay.spill.runs > 2, "the epoch spilled"
            spill_dir = spilling._overlay.spill.directory
            if epoch == 3:  # a failed task: nothing of the epoch is committed, the runs go
                for s in stores:
                    s.abort()
                assert not os.path.exists(spill_dir)
                assert dict(spilling.iterate()) == model
                continue
            for s in stores:
                assert s.commit() == version + 1
            version += 1
            model = pending
            assert not os.path.exists(spill_dir)
            assert dict(spilling.iterate()) == dict(plain.iterate()) == model
            assert spilling.num_keys() == plain.num_keys() == len(model)
            assert _changelog_rows(spilling) == sorted(_changelog_rows(plain))
            assert (spilling.last_commit.num_updates, spilling.last_commit.num_deletes) == \
                (plain.last_commit.num_updates, plain.last_commit.num_deletes)
    with VersionedStore(str(tmp_path / "spilling"), spilling_config) as restored:
        restored.load(version)
        assert restored.last_restore.mode == "restore"
        assert dict(restored.iterate()) == model and restored.num_keys() == len(model)


def test_system_keys_spilled_with_user_keys_are_not_counted(tmp_path):
    config = EngineConfig(local_dir=str(tmp_path / "local"), spill_threshold_bytes=4_000)
    with VersionedStore(str(tmp_path / "ckpt"), config) as store:
        store.load(0)
        for i in range(500):
            store.put(b"user-%04d" % i, b"v")
            store.put(SYSTEM_PREFIX + b"index-%04d" % i, b"")
        assert store._overlay.spill is not None
        assert store.commit() == 1
        assert store.num_keys() == 500
        assert len(list(store.iterate(None, SYSTEM_PREFIX))) == 500


def test_a_large_changelog_goes_through_local_disk_and_reads_back(tmp_path, monkeypatch):
    """A changelog past the spool's memory (lowered here from 32 MB to 64 KB) is written through a
    local file, which is gone afterwards; its size and CRC in the manifest are those of the bytes stored."""
    from spark_state.checkpoint.checksum import crc32_bytes
    from spark_state.storage import spool

    monkeypatch.setattr(spool, "DEFAULT_MEMORY_BYTES", 64 * 1024)
    spooled = []
    original = spool.SpooledUpload._spool
    monkeypatch.setattr(spool.SpooledUpload, "_spool", lambda self: (spooled.append(1), original(self)))
    config = EngineConfig(local_dir=str(tmp_path / "local"))
    with VersionedStore(str(tmp_path / "ckpt"), config) as store:
        store.load(0)
        for i in range(20_000):
            store.put(b"k%06d" % i, b"value-%06d" % i)
        store.commit()
        ref = store.manifest.changelog
        data = store.storage.read_bytes(ref.path)
        assert spooled and ref.size == len(data) > 64 * 1024 and ref.crc32 == crc32_bytes(data)
        assert len(list(changelog.decode(data, ref.path, 1))) == 20_000
        assert not [f for _, _, files in os.walk(tmp_path / "local") for f in files if f.startswith("spool-")]


def test_a_large_epoch_is_snapshotted_by_its_own_commit(tmp_path, monkeypatch):
    """A restore replays at most about constants.SNAPSHOT_REPLAY_BYTES of changelogs: once the
    chain since the last snapshot passes it (here lowered to 64 KB), the commit whose changelog
    brought it there snapshots, long before the interval (100 commits) would, so that a restart
    never replays the large epoch."""
    from spark_state import constants as C

    monkeypatch.setattr(C, "SNAPSHOT_REPLAY_BYTES", 64 * 1024)
    config = EngineConfig(local_dir=str(tmp_path / "local"), snapshot_interval=100)
    with VersionedStore(str(tmp_path / "ckpt"), config) as store:
        store.load(0)
        store.put(b"small", b"1")
        store.commit()
        assert not store.last_commit.snapshot_taken
        for i in range(5000):  # a changelog of ~100 KB
            store.put(b"k%06d" % i, b"value-%012d" % i)
        store.commit()
        assert store.last_commit.snapshot_taken
        assert not store.manifest.replay  # restores start from this snapshot
        store.put(b"after", b"1")
        store.commit()
        assert not store.last_commit.snapshot_taken and len(store.manifest.replay) == 1

"""How a restore brings a snapshot in, and what it reports: SSTs of a checkpoint on the same file
system are hard-linked (no bytes copied), the rest is downloaded and counted; corrupt files are
refused either way; the figures (files, bytes, changelog bytes replayed, phase times) describe
what the load did."""

from __future__ import annotations

import os

import pytest

from spark_state import EngineConfig, VersionedStore
from spark_state.engine.metrics import describe_restore
from spark_state.errors import CheckpointCorruptError
from spark_state.storage import open_storage
from support import run_epochs


def _filled(tmp_path, snapshot_interval: int = 3, epochs: int = 5) -> tuple[str, EngineConfig, dict]:
    ckpt = str(tmp_path / "ckpt")
    config = EngineConfig(backend="rocksdb", snapshot_interval=snapshot_interval, local_dir=str(tmp_path / "writer"))
    with VersionedStore(ckpt, config) as s:
        history = run_epochs(s, epochs)
    return ckpt, config, history


def test_a_restore_links_the_snapshot_ssts_of_a_local_checkpoint_and_reports_what_it_did(tmp_path):
    ckpt, config, history = _filled(tmp_path)
    with VersionedStore(ckpt, config.replace(local_dir=str(tmp_path / "new"))) as fresh:
        fresh.load(5)
        assert sorted(fresh.iterate()) == sorted(history[5].items())
        m = fresh.last_restore
        manifest = fresh.manifest
        assert manifest is not None and manifest.base_snapshot is not None
        assert m.mode == "restore" and m.snapshot_files_linked >= 1
        # the snapshot's own files (MANIFEST, OPTIONS, CURRENT) are copied, its SSTs linked
        storage = open_storage(ckpt, {})
        linked = [n for n in os.listdir(ckpt + "/shared") if os.stat(os.path.join(ckpt, "shared", n)).st_nlink > 1]
        assert len(linked) == m.snapshot_files_linked
        assert m.snapshot_files_downloaded >= 1 and m.snapshot_bytes_downloaded > 0
        assert m.changelogs_replayed == len(manifest.replay) >= 1
        assert m.changelog_bytes_replayed == sum(storage.size(r.path) for r in manifest.replay) > 0
        assert m.snapshot_ms >= 0 and m.replay_ms >= 0 and m.duration_ms >= m.snapshot_ms
        line = describe_restore(m)
        assert "version 5 restored from checkpoint storage: its base snapshot in" in line
        assert f"{m.snapshot_files_linked} linked" in line and f"{m.changelogs_replayed} changelogs" in line
        # the working copy's writes never reach the checkpoint's files through the links
        fresh.put(b"new", b"value")
        fresh.commit()
    with VersionedStore(ckpt, config.replace(local_dir=str(tmp_path / "third"))) as again:
        again.load(5)
        assert sorted(again.iterate()) == sorted(history[5].items())


def test_a_corrupt_sst_is_refused_linked_or_not(tmp_path):
    ckpt, config, _ = _filled(tmp_path)
    shared = os.path.join(ckpt, "shared")
    victim = os.path.join(shared, sorted(os.listdir(shared))[0])
    with open(victim, "r+b") as f:
        f.seek(os.path.getsize(victim) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with VersionedStore(ckpt, config.replace(local_dir=str(tmp_path / "new"))) as fresh:
        with pytest.raises(CheckpointCorruptError, match="CRC-32"):
            fresh.load(5)


def test_a_replay_on_the_local_copy_counts_only_the_changelogs(tmp_path):
    ckpt, config, history = _filled(tmp_path, snapshot_interval=0, epochs=3)
    with VersionedStore(ckpt, config) as s:
        s.load(3)
        s.put(b"k", b"v")
        s.commit()
    with VersionedStore(ckpt, config.replace(local_dir=str(tmp_path / "follower"))) as follower:
        follower.load(3)
        assert follower.last_restore.mode == "restore" and follower.last_restore.snapshot_files_linked == 0
        follower.load(4)
        m = follower.last_restore
        assert (m.mode, m.changelogs_replayed, m.snapshot_files_downloaded) == ("replay", 1, 0)
        assert "brought up to date: 1 changelogs" in describe_restore(m)


@pytest.mark.parametrize("backend", ["rocksdb", "hashmap"])
def test_sorted_changes_are_applied_whole_and_unsorted_ones_are_refused_before_anything_changes(tmp_path, backend):
    from spark_state.backends import backend_factory
    from spark_state.backends.base import UnsortedChangesError

    db = backend_factory(backend, EngineConfig(backend=backend)).create_empty(str(tmp_path / "db"))
    try:
        db.apply([(b"a", b"old"), (b"c", b"old"), (b"z", b"old")])
        # two batches in key order across both, a delete among the puts
        db.apply_sorted([([b"a", b"b"], [b"1", b"2"]), ([b"c", b"d"], [None, b"4"])], str(tmp_path / "scratch"))
        assert list(db.iterate()) == [(b"a", b"1"), (b"b", b"2"), (b"d", b"4"), (b"z", b"old")]
        if backend == "rocksdb":
            with pytest.raises(UnsortedChangesError, match="ascending"):
                db.apply_sorted([([b"m", b"e"], [b"x", b"y"])], str(tmp_path / "scratch"))
            assert list(db.iterate()) == [(b"a", b"1"), (b"b", b"2"), (b"d", b"4"), (b"z", b"old")]
            assert os.listdir(tmp_path / "scratch") == [], "no file is left behind"
    finally:
        db.close()


def test_changelogs_in_any_key_order_replay_to_the_same_state(tmp_path):
    """The engine API's commits write a changelog in the order of the epoch's writes: replayed a
    batch at a time; the provider's are sorted: ingested as one SST file. Both restore the same."""
    ckpt = str(tmp_path / "ckpt")
    config = EngineConfig(backend="rocksdb", snapshot_interval=0, local_dir=str(tmp_path / "w"))
    with VersionedStore(ckpt, config) as s:
        s.load(0)
        for k in (b"m", b"b", b"x", b"a"):  # not in key order
            s.put(k, k + b"1")
        s.commit()
        s.put(b"b", b"b2")  # in key order, a delete among the puts
        s.put(b"c", b"c2")
        s.delete(b"x")
        s.put(b"y", b"y2")
        s.commit()
        expected = list(s.iterate())
    with VersionedStore(ckpt, config.replace(local_dir=str(tmp_path / "r"))) as restored:
        restored.load(2)
        assert list(restored.iterate()) == expected
        assert restored.last_restore.changelogs_replayed == 2
        # the first changelog went through the memtable, the second was ingested as a file (which
        # flushed the memtable first: its keys overlap): two files in level 0, an empty memtable
        db = restored._backend._db  # noqa: SLF001 - RocksDB's own counters show which path ran
        assert db.property_int_value("rocksdb.num-files-at-level0") == 2
        assert db.property_int_value("rocksdb.num-entries-active-mem-table") == 0

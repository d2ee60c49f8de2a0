"""Local disk faults on a real tiny file system (tmpfs): a full disk and a disk turning read-only
under checkpoint storage and under a store's working directory, and a permission error
half-way; plus deterministic faults of checkpoint writes through a storage wrapper. Every
failure names the store, the path and the cause; the next load restores from checkpoint
storage (never trusting a half-applied local copy); no partial version is ever loaded."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from faults.faulty_storage import FaultyStorage
from faults.tinyfs import needs_mount
from spark_state import EngineConfig, VersionedStore
from spark_state.errors import LocalDiskError, StorageError
from spark_state.storage import LocalStorage
from support import restored_state, run_epochs

MiB = 1 << 20


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# ------------------------------------------------------------------ checkpoint storage on local disk
@needs_mount
def test_full_checkpoint_disk_fails_the_commit_and_the_last_good_version_stays(tinyfs_factory, tmp_path) -> None:
    disk = tinyfs_factory("ckpt-disk", 4 * MiB)
    ckpt = Path(disk.path) / "ckpt"
    cfg = EngineConfig(backend="rocksdb", snapshot_interval=2, local_dir=str(tmp_path / "local"))
    with VersionedStore(str(ckpt), cfg) as store:
        history = run_epochs(store, 3, keys=100, writes_per_epoch=40)
        before = _files(ckpt)
        disk.fill()
        store.put(b"k-new", b"4")
        with pytest.raises(LocalDiskError) as info:
            store.commit()
        err = info.value
        assert err.errno == errno.ENOSPC
        message = str(err)
        for part in (f"store {ckpt}", f"write {ckpt}/changelogs/4-", "No space left on device", f"on {disk.path}",
                     "checkpoint storage on local disk", "free space on that disk"):
            assert part in message, message
        assert _files(ckpt) == before  # no temp file, nothing of version 4
        assert restored_state(str(ckpt), cfg, 3) == sorted(history[3].items())

        disk.free()
        store.load(3)
        assert store.last_restore.mode == "restore"  # the failed commit had applied locally
        store.put(b"k-new", b"4")
        assert store.commit() == 4
    assert restored_state(str(ckpt), cfg, 4) == sorted({**history[3], b"k-new": b"4"}.items())


@needs_mount
def test_checkpoint_disk_turning_read_only_half_way(tinyfs_factory, tmp_path) -> None:
    disk = tinyfs_factory("ckpt-disk", 4 * MiB)
    ckpt = str(Path(disk.path) / "ckpt")
    cfg = EngineConfig(backend="hashmap", snapshot_interval=2, local_dir=str(tmp_path / "local"))
    with VersionedStore(ckpt, cfg) as store:
        history = run_epochs(store, 3, keys=80, writes_per_epoch=30)
        disk.remount_ro()
        try:
            store.put(b"k", b"v")
            with pytest.raises(LocalDiskError, match="Read-only file system") as info:
                store.commit()
            assert info.value.errno == errno.EROFS
            assert f"store {ckpt}" in str(info.value) and "remount it read-write" in str(info.value)
            assert restored_state(ckpt, cfg, 3) == sorted(history[3].items())  # reads still work
        finally:
            disk.remount_rw()
        store.load(3)
        store.put(b"k", b"v")
        assert store.commit() == 4


# ------------------------------------------------------------------ the working directory (localDir)
@needs_mount
@pytest.mark.parametrize("backend", ["rocksdb", "hashmap"])
def test_full_local_dir_fails_the_snapshot_and_the_next_load_restores(tinyfs_factory, tmp_path, backend) -> None:
    disk = tinyfs_factory("local-disk", 8 * MiB)
    ckpt = str(tmp_path / "ckpt")
    cfg = EngineConfig(backend=backend, snapshot_interval=2, local_dir=disk.path)
    fresh = cfg.replace(local_dir=str(tmp_path / "fresh"))
    with VersionedStore(ckpt, cfg) as store:
        history = run_epochs(store, 3, keys=120, writes_per_epoch=50)
        disk.fill()
        # Version 4 takes a snapshot, written to the working directory first: the full disk
        # fails it after the epoch was applied to the local copy (half of a commit).
        store.put(b"k-new", b"4")
        with pytest.raises(LocalDiskError) as info:
            store.commit()
        message = str(info.value)
        for part in (f"store {ckpt}", "committing version 4", "No space left on device", f"on {disk.path}",
                     "local working directory", "spark.sql.streaming.stateStore.sparkState.localDir"):
            assert part in message, message
        assert VersionedStore(ckpt, fresh).versions() == [1, 2, 3]

        # With the disk still full, a restore cannot even start: the same clear error.
        with pytest.raises(LocalDiskError, match="No space left on device"):
            store.load(3)

        disk.free()
        store.load(3)
        assert store.last_restore.mode == "restore"  # never the half-applied local copy
        assert dict(store.iterate()) == history[3]
        store.put(b"k-new", b"4")
        assert store.commit() == 4
    assert restored_state(ckpt, fresh, 4) == sorted({**history[3], b"k-new": b"4"}.items())


@needs_mount
def test_restoring_into_a_full_local_dir_names_the_file_being_downloaded(tinyfs_factory, tmp_path) -> None:
    ckpt = str(tmp_path / "ckpt")
    cfg = EngineConfig(backend="rocksdb", snapshot_interval=1, local_dir=str(tmp_path / "local"))
    with VersionedStore(ckpt, cfg) as store:
        store.load(0)
        store.put_many([b"k%05d" % i for i in range(20_000)], [os.urandom(64) for _ in range(20_000)])
        store.commit()
    disk = tinyfs_factory("local-disk", 1 * MiB)  # smaller than the snapshot
    with VersionedStore(ckpt, cfg.replace(local_dir=disk.path)) as store:
        with pytest.raises(LocalDiskError) as info:
            store.load(1)
    message = str(info.value)
    for part in (f"store {ckpt}", "downloading", f"{ckpt}/shared/", "No space left on device", disk.path):
        assert part in message, message


# ------------------------------------------------------------------ a permission error half-way
_CHILD = r"""
import json, os, sys
sys.path.insert(0, sys.argv[3])
from spark_state import EngineConfig, VersionedStore
from support import run_epochs
ckpt, out = sys.argv[1], sys.argv[2]
cfg = EngineConfig(backend="hashmap", snapshot_interval=0, local_dir=os.path.join(os.path.dirname(ckpt), "local"))
store = VersionedStore(ckpt, cfg)
history = run_epochs(store, 2, keys=50, writes_per_epoch=20)
print("committed", flush=True)
sys.stdin.readline()  # the parent revokes write permission meanwhile
store.put(b"k", b"v")
try:
    store.commit()
    result = {"error": None}
except Exception as e:
    result = {"error": type(e).__name__, "message": str(e), "errno": getattr(e, "errno", None)}
result["expected"] = {k.hex(): v.hex() for k, v in history[2].items()}
json.dump(result, open(out, "w"))
"""


def _without_permission_override() -> list[str]:
    """A command prefix that runs a process subject to file permissions. Root bypasses them
    (CAP_DAC_OVERRIDE); setpriv drops that capability, or, without setpriv, a new user
    namespace leaves the process no capability over this namespace's files."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv"):
        return ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
    if shutil.which("unshare"):
        return ["unshare", "--user"]
    pytest.skip("running as root without setpriv or unshare: cannot make a process subject to permissions")


def test_permission_denied_half_way_through_a_run(tmp_path) -> None:
    """A real EACCES: the store runs in a child process that is subject to file permissions;
    after two commits its checkpoint directories are made read-only to it."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    tests_dir = str(Path(__file__).resolve().parents[1])
    child = subprocess.Popen(
        _without_permission_override() + [sys.executable, "-c", _CHILD, str(ckpt), str(tmp_path / "out.json"),
                                          tests_dir],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert child.stdout.readline().strip() == "committed"
        for sub in ("changelogs", "manifests"):
            os.chmod(ckpt / sub, 0o555)
        child.stdin.write("go\n")
        child.stdin.close()
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
        for sub in ("changelogs", "manifests"):
            os.chmod(ckpt / sub, 0o755)
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["error"] == "LocalDiskError" and result["errno"] == errno.EACCES, result
    for part in (f"store {ckpt}", f"write {ckpt}/changelogs/3-", "Permission denied",
                 "give this process write permission"):
        assert part in result["message"], result["message"]
    expected = sorted((bytes.fromhex(k), bytes.fromhex(v)) for k, v in result["expected"].items())
    cfg = EngineConfig(backend="hashmap", local_dir=str(tmp_path / "check"))
    assert VersionedStore(str(ckpt), cfg).versions() == [1, 2]
    assert restored_state(str(ckpt), cfg, 2) == expected


# ------------------------------------------------------------------ deterministic faults (wrapper)
def _denied(url: str) -> BaseException:
    return StorageError(f"checkpoint storage: write {url} was denied (injected)")


def test_a_commit_failing_after_the_local_apply_restores_on_the_next_load(tmp_path) -> None:
    storage = FaultyStorage(LocalStorage(str(tmp_path / "ckpt")))
    cfg = EngineConfig(backend="rocksdb", snapshot_interval=0, local_dir=str(tmp_path / "local"))
    with VersionedStore(storage, cfg) as store:
        history = run_epochs(store, 3, keys=50, writes_per_epoch=20)
        storage.fail("write_bytes", r"^manifests/4\.json$", _denied)
        store.put(b"k", b"4")
        with pytest.raises(StorageError, match="manifests/4.json"):
            store.commit()
        store.load(3)
        assert store.last_restore.mode == "restore"
        assert dict(store.iterate()) == history[3]
        store.put(b"k", b"4")
        assert store.commit() == 4


def test_a_manifest_write_applied_but_reported_failed_exposes_a_whole_version_or_none(tmp_path) -> None:
    """The ambiguous case at the commit point: the manifest is stored but the commit raises.
    Readers then see version 4 whole; the task retry re-commits it (an idempotent overwrite)."""
    storage = FaultyStorage(LocalStorage(str(tmp_path / "ckpt")))
    cfg = EngineConfig(backend="hashmap", snapshot_interval=2, local_dir=str(tmp_path / "local"))
    with VersionedStore(storage, cfg) as store:
        history = run_epochs(store, 3, keys=50, writes_per_epoch=20)
        storage.fail("write_bytes", r"^manifests/4\.json$", _denied, after=True)
        store.put(b"k", b"4")
        with pytest.raises(StorageError):
            store.commit()
        expected = {**history[3], b"k": b"4"}
        assert restored_state(str(tmp_path / "ckpt"), cfg, 4) == sorted(expected.items())
        store.load(3)  # Spark's retry of the task
        store.put(b"k", b"4")
        assert store.commit() == 4
    assert restored_state(str(tmp_path / "ckpt"), cfg, 4) == sorted(expected.items())

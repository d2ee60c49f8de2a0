"""Checkpoint format: incremental snapshots, retention, and clear errors for bad files."""

from __future__ import annotations

import json
import os
import re

import pytest

from spark_state import (
    CheckpointCorruptError,
    CheckpointFileMissingError,
    ConfigError,
    EngineConfig,
    IncompatibleFormatError,
    VersionedStore,
)
from support import restored_state, run_epochs


def _files(root: str) -> set[str]:
    found = set()
    for directory, _, names in os.walk(root):
        for name in names:
            found.add(os.path.relpath(os.path.join(directory, name), root))
    return found


def test_snapshot_after_small_change_uploads_only_new_files(tmp_path):
    ckpt = str(tmp_path / "ckpt")
    cfg = EngineConfig(backend="rocksdb", snapshot_interval=1, local_dir=str(tmp_path / "l"))
    with VersionedStore(ckpt, cfg) as store:
        store.load(0)
        for i in range(20_000):
            store.put(b"key-%06d" % i, b"v" * 50)
        store.commit()
        first = store.last_commit
        shared_before = set(os.listdir(os.path.join(ckpt, "shared")))
        assert first.snapshot_taken and len(shared_before) >= 1
        store.put(b"key-000001", b"changed")
        store.commit()
        second = store.last_commit
        shared_after = set(os.listdir(os.path.join(ckpt, "shared")))
    # Exactly one new SST (the flushed small change) went up; every earlier SST was reused.
    assert len(shared_after - shared_before) == 1
    assert second.snapshot_files_reused == len(shared_before)
    private = [f for f in os.listdir(os.path.join(ckpt, "snapshots"))
               if f.startswith("2-") and not re.fullmatch(r"2-[0-9a-f]+\.json", f)]
    assert second.snapshot_files_uploaded == 1 + len(private)
    assert second.snapshot_bytes_uploaded < first.snapshot_bytes_uploaded / 10


def _needed_by_retained(ckpt: str, retained: list[int]) -> set[str]:
    """Files the retained versions reference, read straight from the JSON documents."""
    needed = set()
    for v in retained:
        needed.add(f"manifests/{v}.json")
        doc = json.load(open(os.path.join(ckpt, "manifests", f"{v}.json")))
        needed.add(doc["changelog"]["path"])
        needed.update(c["path"] for c in doc["replay"])
        if doc["base_snapshot"]:
            path = doc["base_snapshot"]["path"]
            needed.add(path)
            needed.update(f["path"] for f in json.load(open(os.path.join(ckpt, path)))["files"])
    return needed


@pytest.mark.parametrize("backend", ["rocksdb", "hashmap"])
def test_cleanup_keeps_exactly_what_retained_versions_need(tmp_path, backend):
    ckpt = str(tmp_path / "ckpt")
    cfg = EngineConfig(backend=backend, snapshot_interval=3, retained_versions=4, local_dir=str(tmp_path / "l"))
    with VersionedStore(ckpt, cfg) as store:
        history = run_epochs(store, 14, keys=60, writes_per_epoch=30)
        result = store.cleanup()
    retained = [11, 12, 13, 14]
    assert result.retained_versions == retained
    remaining = _files(ckpt)
    assert remaining == _needed_by_retained(ckpt, retained)
    for version in retained:
        assert restored_state(ckpt, cfg, version) == sorted(history[version].items())
    # Needed for restore: without any one remaining file, some retained version breaks --
    # except the own changelog of a version that is a snapshot, kept so that the changes of
    # every retained version stay readable.
    own_changelogs_of_snapshots = {
        json.load(open(os.path.join(ckpt, "manifests", f"{v}.json")))["changelog"]["path"]
        for v in retained if v % 3 == 0
    }
    assert len(own_changelogs_of_snapshots) == 1
    for rel in sorted(remaining - own_changelogs_of_snapshots):
        path = os.path.join(ckpt, rel)
        saved = open(path, "rb").read()
        os.remove(path)
        broken = 0
        for version in retained:
            try:
                restored_state(ckpt, cfg, version)
            except Exception:
                broken += 1
        open(path, "wb").write(saved)
        assert broken, f"{rel} is kept although no retained version needs it"


def test_cleanup_removes_temp_files_a_crash_left_once_their_version_is_past_retention(tmp_path):
    """A write killed midway leaves ``.<name>.<token>.tmp`` (listings skip it): retention must
    delete it by the version of its target, or every such crash would leave a file for good."""
    ckpt = str(tmp_path / "ckpt")
    cfg = EngineConfig(backend="rocksdb", snapshot_interval=3, retained_versions=4, local_dir=str(tmp_path / "l"))
    left = {"changelogs/.2-00ff00ff00ff00ff.arrow.0123456789abcdef.tmp": True,
            "shared/.3-aaaaaaaaaaaaaaaa-000009.sst.fedcba9876543210.tmp": True,
            "manifests/.4.r1.json.00000000000000aa.tmp": True,
            "changelogs/.12-00ff00ff00ff00ff.arrow.0123456789abcdef.tmp": False,  # retained: may be in flight
            "snapshots/.not-versioned.0123456789abcdef.tmp": False}
    with VersionedStore(ckpt, cfg) as store:
        run_epochs(store, 5, keys=30, writes_per_epoch=10)
        for rel in left:
            with open(os.path.join(ckpt, rel), "w") as f:
                f.write("cut short")
        _more_epochs(store, 9)  # versions 6..14: 11..14 retained
        store.cleanup()
    remaining = _files(ckpt)
    for rel, doomed in left.items():
        assert (rel not in remaining) == doomed, rel


def _more_epochs(store, n: int) -> None:
    for i in range(n):
        store.put(f"x{i}".encode(), b"v")
        store.commit()


@pytest.fixture
def committed(tmp_path):
    """A rocksdb checkpoint whose version 5 is a snapshot at 3 plus changelogs 4 and 5."""
    ckpt = str(tmp_path / "ckpt")
    cfg = EngineConfig(backend="rocksdb", snapshot_interval=3, retained_versions=10, local_dir=str(tmp_path / "l"))
    with VersionedStore(ckpt, cfg) as store:
        run_epochs(store, 5, keys=50, writes_per_epoch=40)
    manifest = json.load(open(os.path.join(ckpt, "manifests", "5.json")))
    assert manifest["base_snapshot"]["version"] == 3 and len(manifest["replay"]) == 2
    return ckpt, cfg, manifest


def _load(ckpt, cfg, version=5):
    with VersionedStore(ckpt, cfg) as s:
        s.load(version)


def test_missing_changelog_is_named(committed):
    ckpt, cfg, manifest = committed
    path = manifest["replay"][-1]["path"]
    os.remove(os.path.join(ckpt, path))
    with pytest.raises(CheckpointFileMissingError) as err:
        _load(ckpt, cfg)
    assert path in str(err.value) and "manifests/5.json" in str(err.value)


def test_corrupt_changelog_is_named(committed):
    ckpt, cfg, manifest = committed
    path = manifest["replay"][0]["path"]
    full = os.path.join(ckpt, path)
    data = bytearray(open(full, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(full, "wb").write(bytes(data))
    with pytest.raises(CheckpointCorruptError, match="CRC-32") as err:
        _load(ckpt, cfg)
    assert path in str(err.value)


def test_truncated_changelog_is_named(committed):
    ckpt, cfg, manifest = committed
    path = manifest["replay"][0]["path"]
    full = os.path.join(ckpt, path)
    data = open(full, "rb").read()
    open(full, "wb").write(data[:-20])
    with pytest.raises(CheckpointCorruptError, match="size is") as err:
        _load(ckpt, cfg)
    assert path in str(err.value)


def _snapshot_files(ckpt, manifest):
    return json.load(open(os.path.join(ckpt, manifest["base_snapshot"]["path"])))["files"]


def test_missing_sst_is_named(committed):
    ckpt, cfg, manifest = committed
    sst = next(f for f in _snapshot_files(ckpt, manifest) if f["name"].endswith(".sst"))
    os.remove(os.path.join(ckpt, sst["path"]))
    with pytest.raises(CheckpointFileMissingError) as err:
        _load(ckpt, cfg)
    assert sst["path"] in str(err.value)


def test_corrupt_sst_is_named(committed):
    ckpt, cfg, manifest = committed
    sst = next(f for f in _snapshot_files(ckpt, manifest) if f["name"].endswith(".sst"))
    full = os.path.join(ckpt, sst["path"])
    data = bytearray(open(full, "rb").read())
    data[10] ^= 0x01
    open(full, "wb").write(bytes(data))
    with pytest.raises(CheckpointCorruptError, match="CRC-32") as err:
        _load(ckpt, cfg)
    assert sst["path"] in str(err.value)


def test_missing_snapshot_descriptor_is_named(committed):
    ckpt, cfg, manifest = committed
    path = manifest["base_snapshot"]["path"]
    os.remove(os.path.join(ckpt, path))
    with pytest.raises(CheckpointFileMissingError) as err:
        _load(ckpt, cfg)
    assert path in str(err.value)


def test_unparsable_manifest_is_named(committed):
    ckpt, cfg, _ = committed
    open(os.path.join(ckpt, "manifests", "5.json"), "wb").write(b"{not json")
    with pytest.raises(CheckpointCorruptError, match="not valid JSON") as err:
        _load(ckpt, cfg)
    assert "manifests/5.json" in str(err.value)


@pytest.mark.parametrize("document", ["manifest", "snapshot"])
def test_incompatible_format_version_is_rejected(committed, document):
    ckpt, cfg, manifest = committed
    rel = "manifests/5.json" if document == "manifest" else manifest["base_snapshot"]["path"]
    full = os.path.join(ckpt, rel)
    doc = json.load(open(full))
    doc["format_version"] = 99
    json.dump(doc, open(full, "w"))
    with pytest.raises(IncompatibleFormatError) as err:
        _load(ckpt, cfg)
    assert "format version 99" in str(err.value) and rel in str(err.value)
    assert "reads format versions [1]" in str(err.value)


def test_unknown_backend_and_options_are_rejected():
    with pytest.raises(ConfigError, match="option 'backend' must be one of rocksdb, hashmap, got 'leveldb'"):
        EngineConfig(backend="leveldb")
    with pytest.raises(ConfigError, match="unknown spark-state option 'x.snapshotIntervl'"):
        EngineConfig.from_options({"x.snapshotIntervl": "3"}, prefix="x.")
    with pytest.raises(ConfigError, match="must be an integer, got 'ten'"):
        EngineConfig.from_options({"snapshotInterval": "ten"})
    with pytest.raises(ConfigError, match="'retainedVersions' must be >= 1, got 0"):
        EngineConfig(retained_versions=0)
    with pytest.raises(ConfigError, match="must not exceed"):
        EngineConfig(block_cache_mb=64, write_buffer_mb=128)
    cfg = EngineConfig.from_options(
        {"p.backend": "hashmap", "p.snapshotInterval": "5", "p.rocksdb.writeAheadLog": "true",
         "p.storage.s3.endpoint_url": "http://127.0.0.1:1", "other.key": "ignored"}, prefix="p.")
    assert (cfg.backend, cfg.snapshot_interval, cfg.rocksdb_wal) == ("hashmap", 5, True)
    assert cfg.storage_options == {"s3.endpoint_url": "http://127.0.0.1:1"}

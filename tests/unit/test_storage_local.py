"""LocalStorage: the checkpoint storage contract on local disk."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from spark_state.errors import CheckpointFileMissingError, ConfigError, StorageError
from spark_state.storage import CheckpointStorage, LocalStorage, open_storage


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(str(tmp_path / "ckpt"))


def all_files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_open_storage_resolves_paths_and_file_urls(tmp_path: Path) -> None:
    plain = open_storage(str(tmp_path))
    url = open_storage(f"file://{tmp_path}/")
    assert isinstance(plain, LocalStorage) and isinstance(url, LocalStorage)
    assert isinstance(plain, CheckpointStorage)
    assert plain.url == str(tmp_path)
    assert url.url == f"file://{tmp_path}"
    url.write_bytes("x", b"1")
    assert plain.read_bytes("x") == b"1"
    assert url.full_url("a/b") == f"file://{tmp_path}/a/b"


def test_file_urls_are_uris_whose_escapes_name_the_directory(tmp_path: Path) -> None:
    """A URL's path is escaped: ``%23`` is a '#' of the directory's name (Spark's shim hands paths
    over that way), and the storage's own URL parses back to the same root. A raw '#' or '?'
    would end the path (everything after it silently dropped): refused, naming the fix."""
    odd = tmp_path / "ck#1 50%?"
    storage = open_storage("file://" + str(tmp_path) + "/ck%231%2050%25%3F")
    assert storage.root == str(odd)
    storage.write_bytes("x", b"1")
    assert (odd / "x").read_bytes() == b"1"
    assert open_storage(storage.url).root == str(odd)
    assert open_storage(str(odd)).root == str(odd)  # a plain path is taken as it is
    for url in (f"file://{tmp_path}/ck#1", f"file://{tmp_path}/ck?x=1", "s3://bucket/ck#1"):
        with pytest.raises(ConfigError, match=r"'\?' or '#'.*%23"):
            open_storage(url)


def test_file_url_with_remote_host_is_rejected() -> None:
    with pytest.raises(ConfigError, match="host"):
        open_storage("file://otherhost/tmp/x")


def test_round_trip_creates_parent_directories(storage: LocalStorage, tmp_path: Path) -> None:
    storage.write_bytes("0/1.changelog", b"\x00\x01payload")
    assert storage.read_bytes("0/1.changelog") == b"\x00\x01payload"
    assert (tmp_path / "ckpt" / "0" / "1.changelog").read_bytes() == b"\x00\x01payload"
    storage.write_bytes("empty", b"")
    assert storage.read_bytes("empty") == b""


def test_overwrite_replaces_whole_file_and_leaves_no_temp_files(storage: LocalStorage, tmp_path: Path) -> None:
    storage.write_bytes("m/manifest", b"old" * 1000)
    storage.write_bytes("m/manifest", b"new")
    assert storage.read_bytes("m/manifest") == b"new"
    assert all_files(tmp_path / "ckpt") == ["m/manifest"]


def test_overwrite_is_atomic_for_concurrent_readers(storage: LocalStorage) -> None:
    """A reader racing with rewrites only ever sees one complete version."""
    versions = [bytes([i]) * 200_000 for i in range(1, 6)]
    storage.write_bytes("f", versions[0])
    seen: set[bytes] = set()
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.add(storage.read_bytes("f"))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for _ in range(5):
            for v in versions:
                storage.write_bytes("f", v)
    finally:
        stop.set()
        t.join()
    assert seen <= set(versions)


def test_failed_write_keeps_old_file_and_removes_temp(storage: LocalStorage, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    storage.write_bytes("f", b"old")

    def boom(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(StorageError, match="No space left") as info:
        storage.write_bytes("f", b"new")
    assert "f" in str(info.value)  # the StorageError names the file
    monkeypatch.undo()
    assert storage.read_bytes("f") == b"old"
    assert all_files(tmp_path / "ckpt") == ["f"]


def test_create_if_absent(storage: LocalStorage, tmp_path: Path) -> None:
    storage.write_bytes("commit/5", b"first", overwrite=False)
    with pytest.raises(FileExistsError, match="commit/5"):
        storage.write_bytes("commit/5", b"second", overwrite=False)
    assert storage.read_bytes("commit/5") == b"first"
    assert all_files(tmp_path / "ckpt") == ["commit/5"]


def test_create_if_absent_has_exactly_one_winner(storage: LocalStorage) -> None:
    results: list[str] = []
    barrier = threading.Barrier(8)

    def attempt(i: int) -> None:
        barrier.wait()
        try:
            storage.write_bytes("marker", f"writer {i}".encode(), overwrite=False)
            results.append("won")
        except FileExistsError:
            results.append("lost")

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["lost"] * 7 + ["won"]
    assert storage.list_dir() == ["marker"]


def test_upload_and_download(storage: LocalStorage, tmp_path: Path) -> None:
    src = tmp_path / "src.sst"
    payload = os.urandom(3 * 1024 * 1024 + 17)
    src.write_bytes(payload)
    storage.upload_file(str(src), "sst/000001.sst")
    assert storage.size("sst/000001.sst") == len(payload)
    dst = tmp_path / "restore" / "deep" / "000001.sst"
    storage.download_file("sst/000001.sst", str(dst))
    assert dst.read_bytes() == payload
    assert sorted(os.listdir(dst.parent)) == ["000001.sst"]  # no temp file left behind


def test_upload_of_missing_local_file_is_a_plain_file_not_found(storage: LocalStorage, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        storage.upload_file(str(tmp_path / "nope"), "x")
    assert not storage.exists("x")


def test_download_of_missing_file_names_it_and_creates_nothing(storage: LocalStorage, tmp_path: Path) -> None:
    dst = tmp_path / "out.sst"
    with pytest.raises(CheckpointFileMissingError) as info:
        storage.download_file("sst/9.sst", str(dst))
    assert storage.full_url("sst/9.sst") in str(info.value)
    assert not dst.exists()


def test_missing_file_errors_name_the_file(storage: LocalStorage, tmp_path: Path) -> None:
    with pytest.raises(CheckpointFileMissingError) as info:
        storage.read_bytes("0/7.changelog")
    assert info.value.path == str(tmp_path / "ckpt" / "0" / "7.changelog")
    assert str(tmp_path / "ckpt" / "0" / "7.changelog") in str(info.value)
    with pytest.raises(CheckpointFileMissingError):
        storage.size("0/7.changelog")


def test_list_exists_size_delete(storage: LocalStorage) -> None:
    assert storage.list_dir() == []
    assert storage.list_dir("nowhere") == []
    for name in ["b", "a", "c"]:
        storage.write_bytes(f"d/{name}", name.encode() * 3)
    storage.write_bytes("d/sub/x", b"x")
    assert storage.list_dir("d") == ["a", "b", "c"]  # files only, sorted
    assert storage.list_dir("d/") == ["a", "b", "c"]
    assert storage.list_dir() == []  # "d" is a directory, not a file
    assert storage.exists("d/a") and not storage.exists("d/zz")
    assert not storage.exists("d")  # directories are not files
    assert storage.size("d/b") == 3
    storage.delete("d/a")
    storage.delete("d/a")  # missing: not an error
    storage.delete("nowhere/at/all")
    assert storage.list_dir("d") == ["b", "c"]
    storage.delete_many(["d/b", "d/c", "d/missing"])
    assert storage.list_dir("d") == []
    assert storage.list_dir("d/sub") == ["x"]


def test_list_dir_hides_temp_files(storage: LocalStorage, tmp_path: Path) -> None:
    storage.write_bytes("d/real", b"1")
    (tmp_path / "ckpt" / "d" / ".real.0123456789abcdef.tmp").write_bytes(b"orphan of a crash")
    assert storage.list_dir("d") == ["real"]


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", "a//b", "./a", "", "a\\b", "s3://b/k"])
def test_paths_escaping_the_root_are_rejected(storage: LocalStorage, bad: str) -> None:
    with pytest.raises(ValueError):
        storage.write_bytes(bad, b"x")
    with pytest.raises(ValueError):
        storage.read_bytes(bad)
    with pytest.raises(ValueError):
        storage.delete(bad)
    if bad:
        with pytest.raises(ValueError):
            storage.list_dir(bad)
        with pytest.raises(ValueError):
            storage.child(bad)


def test_child_is_rooted_below_parent(storage: LocalStorage, tmp_path: Path) -> None:
    part = storage.child("state/0")
    assert part.url == str(tmp_path / "ckpt" / "state" / "0")
    part.write_bytes("1.changelog", b"c")
    assert storage.read_bytes("state/0/1.changelog") == b"c"
    assert part.list_dir() == ["1.changelog"]
    assert part.child("").url == part.url
    with pytest.raises(ValueError):
        part.read_bytes("../1.changelog")
    part.close()  # no-op; parent keeps working
    assert storage.exists("state/0/1.changelog")


def test_file_in_the_way_of_a_directory_is_a_storage_error(storage: LocalStorage) -> None:
    storage.write_bytes("a", b"file")
    with pytest.raises(StorageError) as info:
        storage.write_bytes("a/b", b"x")
    assert "a/b" in str(info.value)


"""S3 storage against a real S3 server (moto, in its own process, over HTTP on loopback)."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

import boto3
import pytest

from spark_state.errors import CheckpointFileMissingError, StorageError, StorageUnavailableError
from spark_state.storage import FsspecStorage, open_storage

pytestmark = pytest.mark.s3

S3Location = tuple[str, dict[str, str]]


@pytest.fixture
def storage(s3_location: S3Location) -> Iterator[FsspecStorage]:
    url, options = s3_location
    st = open_storage(url, options)
    assert isinstance(st, FsspecStorage)
    yield st
    st.close()


def boto(storage: FsspecStorage) -> tuple[object, str, str]:
    """A plain boto3 client (not the code under test), the bucket and the key prefix."""
    bucket, _, prefix = storage.root.partition("/")
    client = boto3.client(
        "s3", endpoint_url=storage.fs.endpoint_url, aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
    )
    return client, bucket, prefix


def raw_keys(storage: FsspecStorage) -> list[str]:
    """Every object under the root, straight from the server."""
    client, bucket, prefix = boto(storage)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", []))


def test_url_resolves_to_s3fs(storage: FsspecStorage, s3_location: S3Location) -> None:
    import s3fs

    assert isinstance(storage.fs, s3fs.S3FileSystem)
    assert storage.url == s3_location[0]
    assert storage.full_url("0/1.changelog") == f"{s3_location[0]}/0/1.changelog"


def test_round_trip_and_overwrite(storage: FsspecStorage) -> None:
    storage.write_bytes("0/1.changelog", b"\x00v1")
    assert storage.read_bytes("0/1.changelog") == b"\x00v1"
    storage.write_bytes("0/1.changelog", b"version two")
    assert storage.read_bytes("0/1.changelog") == b"version two"
    storage.write_bytes("empty", b"")
    assert storage.read_bytes("empty") == b""
    assert raw_keys(storage) == ["0/1.changelog", "empty"]  # written in place: no temp objects


def test_create_if_absent_is_enforced_by_the_server(storage: FsspecStorage) -> None:
    storage.write_bytes("commit/5", b"first", overwrite=False)
    with pytest.raises(FileExistsError, match="commit/5"):
        storage.write_bytes("commit/5", b"second", overwrite=False)
    assert storage.read_bytes("commit/5") == b"first"


def test_create_if_absent_has_exactly_one_winner(s3_location: S3Location) -> None:
    url, options = s3_location
    results: list[str] = []
    barrier = threading.Barrier(6)

    def attempt(i: int) -> None:
        st = open_storage(url, options)  # separate clients, as separate executors would have
        barrier.wait()
        try:
            st.write_bytes("marker", f"writer {i}".encode(), overwrite=False)
            results.append("won")
        except FileExistsError:
            results.append("lost")
        finally:
            st.close()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["lost"] * 5 + ["won"]


def test_s3a_is_an_alias(s3_location: S3Location) -> None:
    url, options = s3_location
    s3a_url = "s3a://" + url[len("s3://"):]
    with open_storage(s3a_url, options) as s3a, open_storage(url, options) as s3:
        assert s3a.url == s3a_url
        s3a.write_bytes("via-s3a", b"same bucket")
        assert s3.read_bytes("via-s3a") == b"same bucket"
        with pytest.raises(CheckpointFileMissingError, match=f"{s3a_url}/nope"):
            s3a.read_bytes("nope")


def test_list_exists_size_delete(storage: FsspecStorage) -> None:
    assert storage.list_dir() == []
    assert storage.list_dir("nowhere") == []
    for name in ["b", "a", "c"]:
        storage.write_bytes(f"d/{name}", name.encode() * 3)
    storage.write_bytes("d/sub/x", b"x")
    assert storage.list_dir("d") == ["a", "b", "c"]
    assert storage.list_dir("d/") == ["a", "b", "c"]
    assert storage.list_dir() == []
    assert storage.list_dir("d/a") == []  # a file is not a directory
    assert storage.exists("d/a") and not storage.exists("d/zz")
    assert not storage.exists("d")  # a prefix is not a file
    assert storage.size("d/b") == 3
    storage.delete("d/a")
    storage.delete("d/a")
    storage.delete("nowhere/at/all")
    assert storage.list_dir("d") == ["b", "c"]
    storage.delete_many(["d/b", "d/c", "d/missing"])
    storage.delete_many([])
    assert storage.list_dir("d") == []
    assert storage.list_dir("d/sub") == ["x"]


def test_delete_many_batches_past_the_1000_key_limit(storage: FsspecStorage) -> None:
    names = [f"old/{i:05d}" for i in range(1005)]
    client, bucket, prefix = boto(storage)
    for name in names:  # seeded with boto3 directly: faster than 1005 atomic writes
        client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=b"")
    storage.write_bytes("old/keep-me-not-listed/x", b"1")
    assert len(storage.list_dir("old")) == 1005
    storage.delete_many(names)
    assert storage.list_dir("old") == []
    assert raw_keys(storage) == ["old/keep-me-not-listed/x"]


def test_missing_file_errors_name_the_file(storage: FsspecStorage, tmp_path: Path) -> None:
    for call in (lambda: storage.read_bytes("0/7.changelog"), lambda: storage.size("0/7.changelog"),
                 lambda: storage.download_file("0/7.changelog", str(tmp_path / "out"))):
        with pytest.raises(CheckpointFileMissingError) as info:
            call()
        assert info.value.path == storage.full_url("0/7.changelog")
        assert storage.full_url("0/7.changelog") in str(info.value)
    assert not (tmp_path / "out").exists()


def test_multi_mib_upload_and_download(storage: FsspecStorage, tmp_path: Path) -> None:
    payload = os.urandom(20 * 1024 * 1024 + 12345)  # > 2 parts: goes up as a multipart upload
    src = tmp_path / "000042.sst"
    src.write_bytes(payload)
    storage.upload_file(str(src), "sst/000042.sst")
    assert storage.size("sst/000042.sst") == len(payload)
    client, bucket, prefix = boto(storage)
    etag = client.head_object(Bucket=bucket, Key=f"{prefix}/sst/000042.sst")["ETag"]  # type: ignore[attr-defined]
    assert etag.strip('"').endswith("-3")  # a multipart object, completed from 3 parts
    dst = tmp_path / "restore" / "000042.sst"
    storage.download_file("sst/000042.sst", str(dst))
    assert dst.read_bytes() == payload
    assert os.listdir(dst.parent) == ["000042.sst"]
    small = tmp_path / "small"
    small.write_bytes(b"tiny")
    storage.upload_file(str(small), "sst/000042.sst")  # replaces
    assert storage.read_bytes("sst/000042.sst") == b"tiny"
    assert raw_keys(storage) == ["sst/000042.sst"]


def test_child_shares_the_connection(storage: FsspecStorage) -> None:
    part = storage.child("state/0")
    assert part.fs is storage.fs
    assert part.url == storage.full_url("state/0")
    part.write_bytes("1.changelog", b"c")
    assert storage.read_bytes("state/0/1.changelog") == b"c"
    assert part.list_dir() == ["1.changelog"]
    part.close()  # the child does not own the connection
    assert storage.exists("state/0/1.changelog")


@pytest.mark.parametrize("bad", ["../x", "a/../../x", "/etc/passwd", "a//b", ""])
def test_paths_escaping_the_root_are_rejected(storage: FsspecStorage, bad: str) -> None:
    with pytest.raises(ValueError):
        storage.write_bytes(bad, b"x")
    with pytest.raises(ValueError):
        storage.read_bytes(bad)
    with pytest.raises(ValueError):
        storage.delete_many(["fine", bad])


def test_missing_bucket_is_a_storage_error_on_write(s3_location: S3Location) -> None:
    _, options = s3_location
    st = open_storage("s3://no-such-bucket-here/state", options)
    with pytest.raises(StorageError, match="s3://no-such-bucket-here/state/f") as info:
        st.write_bytes("f", b"1")
    assert not isinstance(info.value, StorageUnavailableError)
    assert st.list_dir() == []


def test_unreachable_endpoint_fails_fast_with_unavailable_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"http://127.0.0.1:{port}"
    st = open_storage("s3://bucket/state", {"s3.endpoint_url": endpoint, "s3.access_key_id": "k",
                                             "s3.secret_access_key": "s", "s3.region": "us-east-1"})
    for call in (lambda: st.read_bytes("0/1.changelog"), lambda: st.write_bytes("0/1.changelog", b"x"),
                 lambda: st.list_dir("0")):
        start = time.monotonic()
        with pytest.raises(StorageUnavailableError) as info:
            call()
        elapsed = time.monotonic() - start
        assert elapsed < 15, f"took {elapsed:.1f} s"
        message = str(info.value)
        assert "s3://bucket/state" in message and endpoint in message and "s3.endpoint_url" in message

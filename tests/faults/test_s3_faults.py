"""S3 checkpoint storage against the moto server behind the fault proxy: every kind of
transient fault is retried to success, persistent ones fail at once with a clear message,
create-if-absent survives a lost answer, and cut multipart uploads leave nothing partial."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from spark_state.errors import StorageError, StorageRetriesExhaustedError
from spark_state.storage import open_storage

pytestmark = pytest.mark.s3

TRANSIENT = ["slowdown", "internal", "drop", "lose-reply", "cut-body"]


@pytest.mark.parametrize("kind", TRANSIENT)
def test_transient_faults_on_every_operation_are_retried(proxied_s3, tmp_path: Path, kind: str) -> None:
    st = open_storage(proxied_s3.url, proxied_s3.options)
    proxy = proxied_s3.proxy
    # Three faults in a row on each kind of request: one more than botocore's 3 attempts of a
    # request absorb, so the storage layer's own retries must do part of the work.
    ops = ["PutObject", "GetObject", "HeadObject", "ListObjectsV2", "DeleteObjects"]
    for op in ops:
        proxy.add(kind, ops={op}, limit=3)
    payload = os.urandom(3000)
    st.write_bytes("a/1", payload)
    st.write_bytes("a/2", b"two")
    assert st.read_bytes("a/1") == payload
    assert st.exists("a/1") and st.size("a/1") == 3000
    assert st.list_dir("a") == ["1", "2"]
    st.download_file("a/1", str(tmp_path / "copy"))
    assert (tmp_path / "copy").read_bytes() == payload
    st.delete_many(["a/2"])
    assert st.list_dir("a") == ["1"]
    faulted = {op for op in ops if proxy.injected(kind, op) == 3}
    # cut-body needs an answer with a body: PUT and HEAD answers have none
    assert faulted == set(ops) - ({"HeadObject", "PutObject"} if kind == "cut-body" else set()), proxy.records
    assert st.stats.retries >= 1  # not all absorbed by botocore
    assert proxied_s3.keys() == ["state/a/1"]
    st.close()


def test_a_reply_delayed_past_the_read_timeout_is_retried(proxied_s3) -> None:
    options = dict(proxied_s3.options, **{"s3.read_timeout": "0.5"})
    st = open_storage(proxied_s3.url, options)
    rule = proxied_s3.proxy.add("delay", delay_s=1.5, ops={"PutObject", "GetObject"}, limit=2)
    started = time.monotonic()
    st.write_bytes("slow", b"late but whole")   # applied late by the server, answer lost
    assert st.read_bytes("slow") == b"late but whole"
    assert rule.injected == 2  # (the records of delayed requests come in late)
    assert time.monotonic() - started < 10


def test_create_if_absent_whose_answer_was_lost_succeeds_once(proxied_s3) -> None:
    """The conditional PUT is applied, its answer lost; the resend meets HTTP 412 against our
    own object. That is a success; a different writer still loses."""
    st = open_storage(proxied_s3.url, proxied_s3.options)
    proxied_s3.proxy.add("lose-reply", ops={"PutObject"}, limit=1)
    st.write_bytes("commit/7", b"attempt A", overwrite=False)
    assert proxied_s3.proxy.injected("lose-reply") == 1
    assert st.stats.create_conflicts_resolved == 1
    with pytest.raises(FileExistsError, match="commit/7"):
        st.write_bytes("commit/7", b"attempt B", overwrite=False)
    assert st.read_bytes("commit/7") == b"attempt A"


def test_throttling_that_never_ends_exhausts_the_budget_with_a_clear_message(proxied_s3) -> None:
    options = dict(proxied_s3.options, **{"retry.attempts": "3"})
    st = open_storage(proxied_s3.url, options)
    st.write_bytes("manifests/4.json", b"{}")
    proxied_s3.proxy.add("slowdown", ops={"GetObject"})
    started = time.monotonic()
    with pytest.raises(StorageRetriesExhaustedError) as info:
        st.read_bytes("manifests/4.json")
    elapsed = time.monotonic() - started
    err = info.value
    assert err.attempts == 3 and elapsed < 20
    message = str(err)
    for part in (proxied_s3.url, f"{proxied_s3.url}/manifests/4.json", "SlowDown (HTTP 503)",
                 "after 3 attempts", "storage.retry", proxied_s3.proxy.endpoint):
        assert part in message
    # 3 attempts of ours x 3 of botocore, no more (s3fs's own loop is off)
    assert proxied_s3.proxy.injected("slowdown") == 9


def test_access_denied_fails_at_once_naming_store_file_and_cause(proxied_s3) -> None:
    st = open_storage(proxied_s3.url, proxied_s3.options)
    proxied_s3.proxy.add("deny", ops={"PutObject"})
    with pytest.raises(StorageError) as info:
        st.write_bytes("changelogs/3-abc.arrow", b"x")
    message = str(info.value)
    assert not isinstance(info.value, StorageRetriesExhaustedError)
    for part in (f"S3 checkpoint storage {proxied_s3.url}", f"{proxied_s3.url}/changelogs/3-abc.arrow",
                 "AccessDenied (HTTP 403)", "credentials"):
        assert part in message
    assert proxied_s3.proxy.injected("deny") == 1  # not retried by anyone


def _big_file(tmp_path: Path) -> tuple[Path, bytes]:
    payload = os.urandom(17 * 1024 * 1024 + 99)  # > 2 parts of 8 MiB: a multipart upload of 3 parts
    path = tmp_path / "000123.sst"
    path.write_bytes(payload)
    return path, payload


def test_cut_multipart_uploads_are_retried_and_never_visible_half_done(proxied_s3, tmp_path: Path) -> None:
    st = open_storage(proxied_s3.url, proxied_s3.options)
    src, payload = _big_file(tmp_path)
    proxy = proxied_s3.proxy
    # A part dropped three times (more than botocore retries), then the completion applied
    # with its answer lost: botocore's resend gets NoSuchUpload, the whole upload is redone.
    proxy.add("drop", ops={"UploadPart"}, limit=3)
    proxy.add("lose-reply", ops={"CompleteMultipartUpload"}, limit=1)
    st.upload_file(str(src), "shared/000123.sst")
    assert proxy.injected("drop", "UploadPart") == 3
    assert proxy.injected("lose-reply", "CompleteMultipartUpload") == 1
    assert st.read_bytes("shared/000123.sst") == payload
    assert proxied_s3.open_uploads() == []


def test_a_persistently_failing_multipart_upload_leaves_no_object_and_no_open_upload(proxied_s3,
                                                                                      tmp_path: Path) -> None:
    st = open_storage(proxied_s3.url, dict(proxied_s3.options, **{"retry.attempts": "2"}))
    src, _ = _big_file(tmp_path)
    proxy = proxied_s3.proxy
    proxy.add("deny", ops={"CompleteMultipartUpload"})
    proxy.add("internal", ops={"AbortMultipartUpload"}, limit=3)  # s3fs's own abort fails (x3 by botocore)
    with pytest.raises(StorageError, match="AccessDenied") as info:
        st.upload_file(str(src), "shared/000124.sst")
    assert f"{proxied_s3.url}/shared/000124.sst" in str(info.value)
    assert proxied_s3.keys("state/shared") == []
    assert proxied_s3.open_uploads() == []  # aborted by the storage layer after s3fs's abort failed
    assert proxy.injected("internal", "AbortMultipartUpload") == 3

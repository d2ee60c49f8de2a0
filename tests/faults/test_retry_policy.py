"""The retry policy and the S3 error classification, without a server: backoff bounds, the
attempt and time budgets, options, and which failures count as transient."""

from __future__ import annotations

import errno

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectTimeoutError,
    ConnectionClosedError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from spark_state import EngineConfig
from spark_state.errors import ConfigError, LocalDiskError
from spark_state.storage import open_storage
from spark_state.storage.localdisk import disk_errno, local_disk_error
from spark_state.storage.retry import RetryBudget, RetryPolicy
from spark_state.storage.s3_faults import describe, error_code, is_transient


def test_full_jitter_backoff_doubles_up_to_the_cap() -> None:
    policy = RetryPolicy(base_delay_ms=100, max_delay_ms=1000)
    assert [policy.backoff_s(n, rand=lambda: 1.0) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert policy.backoff_s(3, rand=lambda: 0.0) == 0.0  # full jitter: anywhere from 0
    assert policy.backoff_s(3, rand=lambda: 0.5) == pytest.approx(0.2)
    assert policy.backoff_s(10_000, rand=lambda: 1.0) == 1.0  # no overflow for huge retry numbers


def test_budget_stops_at_the_attempt_limit() -> None:
    budget = RetryBudget(RetryPolicy(attempts=4, base_delay_ms=10), clock=lambda: 0.0, rand=lambda: 1.0)
    delays = []
    while (d := budget.next_delay()) is not None:
        delays.append(d)
    assert delays == [0.01, 0.02, 0.04] and budget.attempts == 4


def test_budget_stops_at_the_deadline_and_cuts_the_last_wait() -> None:
    now = [0.0]
    budget = RetryBudget(RetryPolicy(attempts=100, base_delay_ms=1000, max_delay_ms=1000, timeout_ms=2500),
                         clock=lambda: now[0], rand=lambda: 1.0)
    assert budget.next_delay() == 1.0
    now[0] = 2.0
    assert budget.next_delay() == pytest.approx(0.5)  # cut to end at the deadline
    now[0] = 2.5
    assert budget.next_delay() is None


def test_one_attempt_means_no_retries() -> None:
    assert RetryBudget(RetryPolicy(attempts=1)).next_delay() is None


def test_retry_options_are_parsed_and_checked() -> None:
    assert RetryPolicy.from_options({"retry.attempts": "3", "retry.timeoutMs": " 500 ", "s3.region": "x"}) == \
        RetryPolicy(attempts=3, timeout_ms=500)
    with pytest.raises(ConfigError, match="retry.attempts"):
        RetryPolicy.from_options({"retry.attempts": "0"})
    with pytest.raises(ConfigError, match="retry.maxDelayMs='soon'"):
        RetryPolicy.from_options({"retry.maxDelayMs": "soon"})
    with pytest.raises(ConfigError, match="'retry.attemps'"):
        open_storage("/tmp/x", {"retry.attemps": "3"})
    with pytest.raises(ConfigError, match="s3.read_timeout"):
        open_storage("s3://b/x", {"s3.read_timeout": "-1"})


def test_retry_options_flow_from_engine_confs_to_storage(tmp_path) -> None:
    prefix = "spark.sql.streaming.stateStore.sparkState."
    config = EngineConfig.from_options({prefix + "storage.retry.attempts": "3",
                                        prefix + "storage.s3.endpoint_url": "http://127.0.0.1:1"}, prefix=prefix)
    assert config.storage_options == {"retry.attempts": "3", "s3.endpoint_url": "http://127.0.0.1:1"}
    storage = open_storage("s3://bucket/x", dict(config.storage_options, **{"s3.access_key_id": "k",
                                                                            "s3.secret_access_key": "s"}))
    assert storage.retry.attempts == 3  # type: ignore[attr-defined]
    assert storage.fs.retries == 1  # type: ignore[attr-defined]  # s3fs's own loop is off


def _client_error(code: str, status: int, op: str = "PutObject") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}, op)


def _s3fs_style(error: BaseException, wrapped: type = OSError) -> BaseException:
    """s3fs translates botocore errors and keeps the original as the cause."""
    out = wrapped(errno.EIO, "translated") if wrapped is OSError else wrapped("translated")
    out.__cause__ = error
    return out


@pytest.mark.parametrize(("code", "status"), [
    ("SlowDown", 503), ("InternalError", 500), ("ServiceUnavailable", 503), ("RequestTimeout", 400),
    ("503", 503), ("Throttling", 400), ("NoSuchUpload", 404), ("OperationAborted", 409), ("x", 429),
])
def test_transient_s3_answers(code: str, status: int) -> None:
    assert is_transient(_s3fs_style(_client_error(code, status)))


@pytest.mark.parametrize(("code", "status"), [
    ("AccessDenied", 403), ("NoSuchBucket", 404), ("NoSuchKey", 404), ("InvalidArgument", 400),
    ("PreconditionFailed", 412), ("InvalidAccessKeyId", 403),
])
def test_persistent_s3_answers(code: str, status: int) -> None:
    assert not is_transient(_s3fs_style(_client_error(code, status)))


def test_transport_failures() -> None:
    import aiohttp

    url = "http://127.0.0.1:1"
    reset = EndpointConnectionError(endpoint_url=url, error=aiohttp.ClientOSError(errno.ECONNRESET, "reset"))
    refused = EndpointConnectionError(
        endpoint_url=url, error=aiohttp.ClientConnectorError(None, OSError(errno.ECONNREFUSED, "refused")))
    assert is_transient(ConnectionClosedError(endpoint_url=url))
    assert is_transient(ReadTimeoutError(endpoint_url=url))
    assert is_transient(ConnectTimeoutError(endpoint_url=url))
    assert is_transient(reset)                 # a reset mid-request: retry
    assert not is_transient(refused)           # nothing listens there: fail fast
    assert is_transient(aiohttp.ClientPayloadError("cut"))
    assert not is_transient(ValueError("a bug"))


def test_hdfs_retries_only_connections_lost_mid_call() -> None:
    from spark_state.storage.hdfs import HdfsBackend

    backend = HdfsBackend("nn:8020", "2")
    assert backend.is_transient(OSError("Connection reset by peer (os error 104)"))
    assert backend.is_transient(RuntimeError("RPC listener disconnected"))
    assert not backend.is_transient(OSError("Connection refused (os error 111)"))  # stays a fast failure
    assert not backend.is_transient(PermissionError("AccessControlException"))


def test_descriptions_carry_code_and_status() -> None:
    exc = _s3fs_style(_client_error("AccessDenied", 403), PermissionError)
    assert error_code(exc) == ("AccessDenied", 403)
    assert describe(exc) == "PermissionError: AccessDenied (HTTP 403): translated"


def test_local_disk_errors_name_store_path_cause_and_fix(tmp_path) -> None:
    assert disk_errno(OSError(errno.ENOSPC, "No space left on device")) == errno.ENOSPC
    assert disk_errno(Exception("IO error: No space left on device: While appending to file: /x/1.sst")) \
        == errno.ENOSPC
    assert disk_errno(Exception("IO error: Read-only file system")) == errno.EROFS
    assert disk_errno(Exception("No space left on device (os error 28)")) == errno.ENOSPC  # rocksdict's Rust side
    assert disk_errno(OSError(errno.ENOENT, "gone")) is None
    assert disk_errno(ValueError("No space left on device")) is None  # not an I/O failure
    err = local_disk_error(OSError(errno.ENOSPC, "No space left on device"), store="s3://b/s/0",
                           path=str(tmp_path / "store-1"), doing="committing version 3")
    assert isinstance(err, LocalDiskError) and err.errno == errno.ENOSPC
    message = str(err)
    for part in ("s3://b/s/0", str(tmp_path / "store-1"), "committing version 3", "No space left on device",
                 "free space", "spark.sql.streaming.stateStore.sparkState.localDir"):
        assert part in message


def test_a_download_cut_by_throttling_stays_transient(tmp_path) -> None:
    """A read failing mid-copy reaches the retry loop with its S3 error code (the copy's own
    error mapping must not cut the cause chain: SlowDown on a changelog download is retried)."""
    from spark_state.storage.local import atomic_local_copy

    reads = iter([b"first chunk"])

    def read(_size: int) -> bytes:
        for chunk in reads:
            return chunk
        raise _s3fs_style(_client_error("SlowDown", 503), OSError)

    target = tmp_path / "copy"
    with pytest.raises(OSError) as caught:
        atomic_local_copy(read, str(target), store="s3://b/s", source="s3://b/s/changelogs/7.arrow")
    assert not isinstance(caught.value, LocalDiskError)
    assert is_transient(caught.value)
    assert not target.exists()

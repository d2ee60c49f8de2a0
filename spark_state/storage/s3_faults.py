"""Which S3 failures are transient, and how to describe them.

Four layers may repeat an S3 request (measured and documented in the README, "Storage faults"):

1. **aiohttp** resends a request once, silently, when a *reused* keep-alive connection turns
   out to be closed (RFC 9112 section 9.3.1); it counts PUT as idempotent, so this includes
   conditional PUTs.
2. **botocore** (standard mode, :data:`~spark_state.storage.factory.S3_CLIENT_CONFIG`): up to
   3 attempts of each HTTP request on 5xx, throttling codes (``SlowDown``, ...),
   ``RequestTimeout`` and connection errors, waiting ``rand * 2^(n-1)`` seconds (up to 1 s,
   then up to 2 s; botocore 1.43's formula unless ``AWS_NEW_RETRIES_2026`` is set). It retries
   a single request, e.g. one part of a multipart upload.
3. **s3fs**: its own loop (``S3FileSystem.retries``) is switched off (1 try), because the
   layer below covers the same errors for the whole operation, with a bounded budget.
4. **spark-state** (:mod:`.retry`): up to ``retry.attempts`` attempts of the whole operation
   (a read, a PUT, a whole multipart upload), full-jitter backoff, ``retry.timeoutMs`` budget.

So one operation makes at most ``3 * retry.attempts`` HTTP attempts (24 by default), plus
aiohttp's silent resends on stale connections.

Because layers 1 and 2 resend requests that may already have been applied (the answer was
lost) without telling the caller, a create-if-absent write (``If-None-Match: *``) can meet
*its own* object as a conflict, and the storage layer cannot observe whether that happened.
:meth:`~spark_state.storage.remote.FsspecStorage.write_bytes` therefore resolves every such
conflict by reading the object back (see there).

Connection *refused* and unresolvable hosts are persistent on purpose: they mean a wrong or
dead endpoint (:class:`~spark_state.errors.StorageUnavailableError`, reported within seconds),
not a passing glitch; botocore has already tried 3 times.
"""

from __future__ import annotations

import http.client
import importlib
import socket
from types import ModuleType
from typing import Any, Iterator, Optional

__all__ = ["describe", "error_code", "is_transient"]

#: Error codes S3 (and S3-compatible servers) use for conditions that pass.
TRANSIENT_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "ThrottledException", "RequestThrottled",
    "RequestThrottledException", "TooManyRequestsException", "RequestLimitExceeded",
    "BandwidthLimitExceeded", "InternalError", "ServiceUnavailable", "RequestTimeout",
    "RequestTimeoutException", "PriorRequestNotComplete",
    # A conflicting operation (e.g. two conditional writes) is in progress; AWS says retry.
    "OperationAborted",
    # CompleteMultipartUpload retried by botocore after its response was lost: the upload is
    # already complete (or was aborted by the failure path); uploading again is the fix.
    "NoSuchUpload",
})
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, its causes and contexts, and the errors botocore wraps in ``kwargs['error']``."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        inner = getattr(e, "kwargs", None)
        if isinstance(inner, dict) and isinstance(inner.get("error"), BaseException):
            todo.append(inner["error"])
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)


def _response(exc: BaseException) -> Optional[dict[str, Any]]:
    for e in _chain(exc):
        response = getattr(e, "response", None)
        if isinstance(response, dict) and "Error" in response:
            return response
    return None


def error_code(exc: BaseException) -> tuple[Optional[str], Optional[int]]:
    """The S3 error code and HTTP status in ``exc``'s chain, e.g. ``("SlowDown", 503)``."""
    response = _response(exc)
    if response is None:
        return None, None
    code = response.get("Error", {}).get("Code")
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    return (str(code) if code is not None else None), (int(status) if status is not None else None)


def _optional_module(name: str) -> Optional[ModuleType]:
    try:
        return importlib.import_module(name)
    except ImportError:  # pragma: no cover
        return None


def _transport_kind(exc: BaseException) -> Optional[str]:
    """``"refused"`` (never connected), ``"lost"`` (sent, answer lost or cut), ``"connect-timeout"``
    or None, for the first transport error found in ``exc``'s chain."""
    try:
        from botocore import exceptions as bce
    except ImportError:  # pragma: no cover - s3fs always brings botocore
        bce = None
    aiohttp = _optional_module("aiohttp")  # s3fs always brings it
    for e in _chain(exc):
        if bce is not None:
            if isinstance(e, bce.ConnectTimeoutError):
                return "connect-timeout"
            if isinstance(e, (bce.ConnectionClosedError, bce.ReadTimeoutError, bce.ResponseStreamingError,
                              bce.IncompleteReadError)):
                return "lost"
            if isinstance(e, bce.EndpointConnectionError):
                # aiobotocore maps every aiohttp ClientConnectionError here, including a reset
                # in the middle of a request: what it wraps tells which it was.
                inner = (getattr(e, "kwargs", None) or {}).get("error")
                if inner is None or isinstance(inner, socket.gaierror) or (
                        aiohttp is not None and isinstance(inner, aiohttp.ClientConnectorError)):
                    return "refused"
                continue
            if isinstance(e, bce.ConnectionError):  # proxy, SSL: not a passing condition
                return "refused"
            if isinstance(e, bce.HTTPClientError):
                return "lost"
        if aiohttp is not None:
            if isinstance(e, aiohttp.ClientConnectorError):
                return "refused"
            if isinstance(e, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
                              aiohttp.ClientOSError, aiohttp.ServerTimeoutError)):
                return "lost"
        if isinstance(e, (http.client.IncompleteRead, ConnectionResetError, ConnectionAbortedError,
                          BrokenPipeError)):
            return "lost"
        if isinstance(e, ConnectionRefusedError):
            return "refused"
        if isinstance(e, TimeoutError) or type(e).__name__ in ("FSTimeoutError", "ResponseParserError"):
            return "lost"
    return None


def is_transient(exc: BaseException) -> bool:
    """True if retrying ``exc`` can help (see the module docstring)."""
    code, status = error_code(exc)
    if code is not None or status is not None:
        return code in TRANSIENT_CODES or status in TRANSIENT_STATUS
    return _transport_kind(exc) in ("lost", "connect-timeout")


def describe(exc: BaseException) -> str:
    """``PermissionError: AccessDenied (HTTP 403): Access Denied``-style text for messages."""
    code, status = error_code(exc)
    text = f"{type(exc).__name__}: {str(exc).rstrip('.')}"
    if code is None and status is None:
        return text
    where = f"{code} (HTTP {status})" if status is not None else str(code)
    return f"{type(exc).__name__}: {where}: {str(exc).rstrip('.')}"

"""A fault-injecting HTTP proxy in front of the moto S3 server.

Clients (s3fs in the test process, or in Spark's Python workers) use the proxy's endpoint as
``s3.endpoint_url``; the proxy forwards every request to moto unchanged (moto does not check
signatures, so the signed ``Host`` header may name the proxy) and, for requests matching a
:class:`Fault` rule, misbehaves instead:

============== ===========================================================================
kind           what the client sees
============== ===========================================================================
``slowdown``   HTTP 503 with S3's XML error ``SlowDown`` (throttling); request not forwarded
``internal``   HTTP 500 ``InternalError``; not forwarded
``deny``       HTTP 403 ``AccessDenied``; not forwarded (with ``after=N``: "a permission
               error half-way")
``drop``       the connection is reset (TCP RST) before the request reaches the server
``lose-reply`` the request **is applied** by the server, then the connection is reset: the
               client cannot know whether its write happened (the ambiguous case)
``cut-body``   the server's answer starts (headers, half the body), then the connection is
               reset (answers without a body, e.g. to PUT or HEAD, pass unharmed and do not
               count as injected)
``delay``      the answer is held back for ``delay_s`` (beyond the client's read timeout),
               then the request is applied late and answered into a closed connection
============== ===========================================================================

Besides faults, the proxy can shape every request as a remote store would (for benchmarks):
``latency_s`` is added to each request's answer, and ``bytes_per_s`` caps the bandwidth of one
link that all requests share (a request's body and answer take their turn on it).

Rules match on the S3 operation (derived from method, path and query: ``PutObject``,
``GetObject``, ``UploadPart``, ``CompleteMultipartUpload``, ...), optionally on a regex of
the object key, skip their first ``after`` matches, fire with probability ``share`` (from a
seeded generator) and at most ``limit`` times. The first rule that fires wins. Rules can be
added and cleared while clients run; every request is recorded (:attr:`FaultProxy.records`)
so tests can check what was injected.

This is test infrastructure written by the project: a small threaded proxy on
``http.server``, not a production component.
"""

from __future__ import annotations

import http.client
import random
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterable, Optional
from urllib.parse import parse_qs, urlsplit

KINDS = ("slowdown", "internal", "deny", "drop", "lose-reply", "cut-body", "delay")

_ERRORS = {
    "slowdown": (503, "SlowDown", "Please reduce your request rate."),
    "internal": (500, "InternalError", "We encountered an internal error. Please try again."),
    "deny": (403, "AccessDenied", "Access Denied"),
}

# Hop-by-hop headers are the proxy's own business; the rest are forwarded untouched.
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
        "expect", "content-length"}


def s3_operation(method: str, path: str, query: dict[str, list[str]], headers) -> str:
    """The S3 API operation a request is (path-style addressing, as with moto)."""
    bucket, _, key = path.lstrip("/").partition("/")
    has_key = bool(key)
    if method == "PUT":
        if "partNumber" in query and "uploadId" in query:
            return "UploadPart"
        if has_key:
            return "CopyObject" if headers.get("x-amz-copy-source") else "PutObject"
        return "CreateBucket"
    if method == "POST":
        if "uploads" in query:
            return "CreateMultipartUpload"
        if "uploadId" in query:
            return "CompleteMultipartUpload"
        if "delete" in query:
            return "DeleteObjects"
        return "PostObject"
    if method == "DELETE":
        if "uploadId" in query:
            return "AbortMultipartUpload"
        return "DeleteObject" if has_key else "DeleteBucket"
    if method == "HEAD":
        return "HeadObject" if has_key else "HeadBucket"
    if method == "GET":
        if not has_key:
            if "uploads" in query:
                return "ListMultipartUploads"
            return "ListObjectsV2" if query.get("list-type") == ["2"] else "ListObjects"
        return "ListParts" if "uploadId" in query else "GetObject"
    return method


@dataclass
class Fault:
    """One rule (see the module docstring). ``injected`` and ``matched`` count what it did."""

    kind: str
    share: float = 1.0
    ops: Optional[Iterable[str]] = None
    key: Optional[str] = None
    after: int = 0
    limit: Optional[int] = None
    delay_s: float = 0.0
    matched: int = 0
    injected: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; one of {KINDS}")
        self.ops = frozenset(self.ops) if self.ops is not None else None
        self._key_re = re.compile(self.key) if self.key else None

    def matches(self, op: str, key: str) -> bool:
        return (self.ops is None or op in self.ops) and (self._key_re is None or bool(self._key_re.search(key)))


@dataclass(frozen=True)
class Record:
    """One request the proxy handled."""

    op: str
    method: str
    key: str
    fault: Optional[str]
    status: Optional[int]  # what the client got (None: connection reset)


@dataclass
class FaultProxy:
    """The proxy; use as a context manager or call :meth:`start` / :meth:`stop`."""

    upstream: str
    seed: int = 0
    records: list[Record] = field(default_factory=list)
    #: added to every request (seconds)
    latency_s: float = 0.0
    #: the shared link's bandwidth (bytes per second; None: unlimited)
    bytes_per_s: Optional[float] = None
    #: bytes that crossed the proxy (request bodies and answers)
    bytes_moved: int = 0

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        self._up_host, self._up_port = parts.hostname, parts.port
        self._rules: list[Fault] = []
        self._lock = threading.Lock()
        self._rng = random.Random(self.seed)
        self._link_free_at = 0.0
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None

    # ---- control ------------------------------------------------------------------------
    def add(self, kind: str, **kwargs) -> Fault:
        """Add a rule (``Fault(kind, **kwargs)``) and return it."""
        rule = Fault(kind, **kwargs)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        """Remove every rule: from now on the proxy forwards faithfully."""
        with self._lock:
            self._rules = []

    def injected(self, kind: Optional[str] = None, op: Optional[str] = None) -> int:
        with self._lock:
            return sum(1 for r in self.records if r.fault and (kind is None or r.fault == kind)
                       and (op is None or r.op == op))

    def ops_seen(self) -> set[str]:
        with self._lock:
            return {r.op for r in self.records}

    def faulted_ops(self) -> set[str]:
        with self._lock:
            return {r.op for r in self.records if r.fault}

    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() the proxy first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FaultProxy":
        proxy = self

        class Handler(_Handler):
            owner = proxy

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        server.handle_error = lambda request, address: None  # resets are the point, not news
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- used by the handler --------------------------------------------------------------
    def _decide(self, op: str, key: str) -> Optional[Fault]:
        with self._lock:
            for rule in self._rules:
                if not rule.matches(op, key):
                    continue
                rule.matched += 1
                if rule.matched <= rule.after:
                    continue
                if rule.limit is not None and rule.injected >= rule.limit:
                    continue
                if rule.share < 1.0 and self._rng.random() >= rule.share:
                    continue
                rule.injected += 1
                return rule
        return None

    def _shape(self, nbytes: int) -> None:
        """Hold a request for the latency and for its turn on the shared link."""
        with self._lock:
            self.bytes_moved += nbytes
            now = time.monotonic()
            done = now
            if self.bytes_per_s:
                start = max(now, self._link_free_at)
                done = start + nbytes / self.bytes_per_s
                self._link_free_at = done
        wait = done - time.monotonic() + self.latency_s
        if wait > 0:
            time.sleep(wait)

    def _undo(self, rule: Fault) -> None:
        with self._lock:
            rule.injected -= 1

    def _record(self, record: Record) -> None:
        with self._lock:
            self.records.append(record)


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"  # keep-alive, as real S3: resets hit pooled connections too
    disable_nagle_algorithm = True  # headers and body go out as separate writes

    def log_message(self, format, *args) -> None:  # noqa: A002 - http.server's signature
        pass

    def do_GET(self) -> None:
        self._serve()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except (OSError, ValueError):  # the socket was reset on purpose, or by the client
            self.close_connection = True

    def finish(self) -> None:
        try:
            super().finish()
        except OSError:
            pass

    def _serve(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query, keep_blank_values=True)
        op = s3_operation(self.command, parts.path, query, self.headers)
        key = parts.path.lstrip("/")
        body = self._read_body()
        fault = self.owner._decide(op, key)
        kind = fault.kind if fault else None
        if kind == "drop":
            self.owner._record(Record(op, self.command, key, kind, None))
            return self._reset()
        if kind in _ERRORS:
            status, code, message = _ERRORS[kind]
            self.owner._record(Record(op, self.command, key, kind, status))
            return self._send_error(status, code, message, key)
        if kind == "delay":
            time.sleep(fault.delay_s)
        status, headers, data = self._forward(body)
        if self.owner.latency_s or self.owner.bytes_per_s:
            self.owner._shape(len(body) + len(data))
        if kind == "lose-reply":
            self.owner._record(Record(op, self.command, key, kind, None))
            return self._reset()
        if kind == "cut-body" and (self.command == "HEAD" or len(data) < 2):
            self.owner._undo(fault)  # an answer without a body cannot be cut half-way
            kind = None
        self.owner._record(Record(op, self.command, key, kind, status))
        self._send(status, headers, data, cut=(kind == "cut-body"))

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(self.owner._up_host, self.owner._up_port, timeout=120)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, resp.getheaders(), data
        finally:
            conn.close()

    def _send(self, status: int, headers: list[tuple[str, str]], data: bytes, cut: bool = False) -> None:
        self.send_response_only(status)
        length = None
        for name, value in headers:
            low = name.lower()
            if low == "content-length":
                length = value
            if low in _HOP:
                continue
            self.send_header(name, value)
        if self.command == "HEAD":
            self.send_header("Content-Length", length or "0")
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if cut and len(data) > 1:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            return self._reset()
        self.wfile.write(data)

    def _send_error(self, status: int, code: str, message: str, key: str) -> None:
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
                f'</Message><Resource>/{key}</Resource><RequestId>FAULT{int(time.time() * 1e6)}</RequestId>'
                "</Error>").encode()
        self.send_response_only(status)
        self.send_header("Content-Type", "application/xml")
        if self.command == "HEAD":  # S3 answers HEAD errors without a body
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _reset(self) -> None:
        """Close the connection with a TCP RST (SO_LINGER 0), as a dropped connection looks."""
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.close_connection = True
        try:
            self.connection.close()
        except OSError:
            pass

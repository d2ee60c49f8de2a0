"""Open checkpoint storage from a URL and string options.

Supported locations:

* a local path (``/tmp/ckpt``, ``ckpt``) or ``file:///tmp/ckpt`` -> :class:`LocalStorage`
* ``s3://bucket/prefix`` (``s3a://`` is accepted as an alias, as in Hadoop) -> S3 through s3fs
* ``hdfs://namenode:8020/path`` and ``viewfs://cluster/path`` -> HDFS through hdfs-native

Options are strings, as in Spark options: ``s3.*`` (endpoint, credentials, region, anonymous
access, timeouts), ``retry.*`` (:mod:`.retry`; local storage accepts and ignores them: a full or
read-only disk does not pass by waiting) and ``hdfs.<hadoop key>`` (hdfs-native's configuration,
``hdfs.`` stripped, over the ``HADOOP_CONF_DIR`` files). The option registry
(:mod:`spark_state.options`) names them all, and docs/configuration.md lists them.

Fail-fast defaults: with its own defaults hdfs-native retries an unreachable NameNode
forever, which would hang a streaming query instead of failing it. Unless overridden by
``hdfs.`` options, spark-state caps connection attempts (:data:`HDFS_DEFAULTS`), so a
dead NameNode is reported within about a second, and it probes the NameNode when the
storage is opened (bounded by :data:`~spark_state.storage.remote.PROBE_TIMEOUT_S`). The
price is that an HA failover taking longer than that fails the operation instead of
waiting; raise ``hdfs.dfs.client.failover.max.attempts`` where that matters more.
(hdfs-native 0.14 reads no ``ipc.client.*`` retry settings; its retry knobs are the
``dfs.client.failover.*`` ones below.) Likewise S3 requests get botocore's "standard"
retry mode with 3 attempts in total and a 5 s connect timeout (:data:`S3_CLIENT_CONFIG`).
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Optional
from urllib.parse import unquote, urlsplit

from ..errors import ConfigError
from ..options import parse_bool, storage_options
from .base import CheckpointStorage
from .local import LocalStorage
from .hdfs import HdfsBackend
from .remote import FsspecStorage
from .s3 import S3Backend
from .retry import RETRY_OPTIONS, RetryPolicy

__all__ = ["HDFS_DEFAULTS", "RETRY_OPTIONS", "S3_CLIENT_CONFIG", "S3_OPTIONS", "SUPPORTED_SCHEMES", "check_options",
           "open_storage"]

SUPPORTED_SCHEMES = ("file", "s3", "s3a", "hdfs", "viewfs")

#: S3 option -> meaning; the table with defaults is :data:`spark_state.options.OPTIONS`.
S3_OPTIONS = storage_options("s3.")

HDFS_PREFIX = "hdfs."

HDFS_DEFAULTS = {
    # Allows one failover (from a standby to the active NameNode of an HA pair) or retry.
    "dfs.client.failover.max.attempts": "2",
    # Hadoop's defaults (500 ms base, 15 s max) would stretch those attempts to seconds.
    "dfs.client.failover.sleep.base.millis": "200",
    "dfs.client.failover.sleep.max.millis": "1000",
}
"""hdfs-native settings that make an unreachable NameNode fail within ~1 s (measured here:
0.6-1.0 s for a refused connection or an unresolvable host). Any ``hdfs.<key>`` option
overrides them."""

S3_CLIENT_CONFIG: dict[str, Any] = {
    "retries": {"total_max_attempts": 3, "mode": "standard"},
    "connect_timeout": 5,
    "read_timeout": 60,
}
"""botocore client config: bounded retries and connect timeout so that a dead endpoint fails
in 1-3 s (botocore's defaults, "legacy" mode with 5 attempts and a 60 s connect timeout,
took 5-9 s for a refused connection here and would take minutes for a silent one).
Throttling (SlowDown) and 5xx answers are still retried, with backoff, by the standard mode."""

S3FS_RETRIES = 1
"""s3fs's own retry loop (default 5 tries, for transport errors such as a body cut off
mid-read and for SlowDown) is switched off: the storage layer's retries (:mod:`.retry`) cover
the same errors for the whole operation, with a bounded budget, and two nested loops would
multiply the attempts (5 x 3 x 8 HTTP requests) and the time to report a real outage."""

_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")


def open_storage(url: str, options: Optional[Mapping[str, str]] = None) -> CheckpointStorage:
    """Return the checkpoint storage for *url* configured with *options* (see module doc).

    For HDFS the NameNode is contacted before this returns.

    Raises:
        ConfigError: unknown scheme or option, a bad option value, or the client library
            for the scheme is not installed.
        StorageUnavailableError: (HDFS) the NameNode could not be reached.
    """
    opts = _check_options(options or {})
    retry = RetryPolicy.from_options(opts)
    match = _SCHEME_RE.match(url)
    scheme = match.group(1).lower() if match else ""
    # A one-letter "scheme" is a Windows drive letter (C:\ckpt), i.e. a local path.
    if not scheme or len(scheme) == 1:
        return LocalStorage(url)
    _check_no_fragment(url)
    if scheme == "file":
        return LocalStorage(url)
    if scheme in ("s3", "s3a"):
        return _open_s3(url, opts, retry)
    if scheme in ("hdfs", "viewfs"):
        return _open_hdfs(url, scheme, opts, retry)
    raise ConfigError(
        f"unsupported checkpoint location scheme {scheme!r} in {url!r}; supported: a local path, "
        "file://, s3:// (s3a:// is an alias), hdfs://, viewfs://"
    )


def _check_no_fragment(url: str) -> None:
    """A location given as a URL is a URI: its path ends at a ``?`` or ``#``. Refuse one that has
    a query or fragment rather than silently store under the shorter path (Spark itself hands
    such a directory over escaped, ``%23`` / ``%3F``, as the JVM shim does)."""
    parts = urlsplit(url)
    if parts.fragment or parts.query or url.endswith(("#", "?")):
        raise ConfigError(
            f"checkpoint location {url!r} has a '?' or '#', which ends the path of a URL; escape them in "
            "a URL (%3F, %23) or give a local directory as a plain path"
        )


def _check_options(options: Mapping[str, Any]) -> dict[str, str]:
    valid = ", ".join(sorted(S3_OPTIONS) + sorted(RETRY_OPTIONS)) + f", or {HDFS_PREFIX}<hadoop configuration key>"
    checked: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str):
            raise ConfigError(f"storage option keys must be strings, got {key!r}")
        if key.startswith("s3.") and key not in S3_OPTIONS:
            raise ConfigError(f"unknown storage option {key!r}; valid options: {valid}")
        if key.startswith("retry.") and key not in RETRY_OPTIONS:
            raise ConfigError(f"unknown storage option {key!r}; valid options: {valid}")
        if key.startswith(HDFS_PREFIX) and len(key) == len(HDFS_PREFIX):
            raise ConfigError(f"storage option {key!r} names no Hadoop configuration key")
        if not key.startswith(("s3.", "retry.", HDFS_PREFIX)):
            raise ConfigError(f"unknown storage option {key!r}; valid options: {valid}")
        if value is None:
            raise ConfigError(f"storage option {key!r} has no value")
        # Spark passes strings; accept ints/bools from Python callers too.
        if isinstance(value, bool):
            value = "true" if value else "false"
        checked[key] = str(value)
    return checked


def _normalize_url(url: str) -> str:
    """Drop trailing slashes, except from a bare ``scheme://`` or ``scheme:///``."""
    stripped = url.rstrip("/")
    return url if stripped.endswith(":") else stripped


def _parse_bool(key: str, value: str) -> bool:
    parsed = parse_bool(value)
    if parsed is None:
        raise ConfigError(f"storage option {key}={value!r} is not a boolean; use true or false")
    return parsed


def _parse_seconds(key: str, value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise ConfigError(f"storage option {key}={value!r} must be a number of seconds") from None
    if not seconds > 0:
        raise ConfigError(f"storage option {key}={value!r} must be a positive number of seconds")
    return seconds


def check_options(options: Mapping[str, Any], *, together: bool = True) -> dict[str, str]:
    """Check storage options as :func:`open_storage` does, without opening anything: names, the
    ``retry.*`` values and every ``s3.*`` value (booleans, timeouts, the endpoint URL) and, with
    ``together``, the rules across options (S3 credentials given in pairs, not with anonymous
    access). ``configure()`` and the engine's config call it, so that a bad option fails before any
    query starts. Returns the options as strings.

    Raises:
        ConfigError: naming the option and what is wrong with it.
    """
    opts = _check_options(options)
    RetryPolicy.from_options(opts)
    if any(k.startswith("s3.") for k in opts):
        _s3_client_kwargs(opts, together=together)
    return opts


def _s3_client_kwargs(opts: Mapping[str, str], *, together: bool = True) -> dict[str, Any]:
    """s3fs's keyword arguments from the ``s3.*`` options, each value checked (and, with
    ``together``, the rules across options)."""
    anonymous = _parse_bool("s3.anonymous", opts.get("s3.anonymous", "false"))
    key, secret = opts.get("s3.access_key_id"), opts.get("s3.secret_access_key")
    if together and (key is None) != (secret is None):
        raise ConfigError("set both s3.access_key_id and s3.secret_access_key, or neither")
    if together and anonymous and key is not None:
        raise ConfigError("s3.anonymous=true cannot be combined with s3.access_key_id/s3.secret_access_key")
    endpoint = opts.get("s3.endpoint_url")
    if endpoint is not None and not re.match(r"^https?://[^/]", endpoint):
        raise ConfigError(f"s3.endpoint_url={endpoint!r} must be an http:// or https:// URL")

    config = {k: (dict(v) if isinstance(v, dict) else v) for k, v in S3_CLIENT_CONFIG.items()}
    if "s3.connect_timeout" in opts:
        config["connect_timeout"] = _parse_seconds("s3.connect_timeout", opts["s3.connect_timeout"])
    if "s3.read_timeout" in opts:
        config["read_timeout"] = _parse_seconds("s3.read_timeout", opts["s3.read_timeout"])
    kwargs: dict[str, Any] = {
        "anon": anonymous,
        # Our own instance: close() must not break other users of a shared cached one.
        "skip_instance_cache": True,
        # Another process writes the checkpoint too; cached listings would go stale.
        "use_listings_cache": False,
        "config_kwargs": config,
    }
    if endpoint is not None:
        kwargs["endpoint_url"] = endpoint
    if key is not None:
        kwargs.update(key=key, secret=secret)
    if "s3.session_token" in opts:
        kwargs["token"] = opts["s3.session_token"]
    if "s3.region" in opts:
        kwargs["client_kwargs"] = {"region_name": opts["s3.region"]}
    return kwargs


def _open_s3(url: str, opts: dict[str, str], retry: RetryPolicy) -> FsspecStorage:
    parts = urlsplit(url)
    bucket, prefix = parts.netloc, unquote(parts.path).strip("/")
    if not bucket:
        raise ConfigError(f"S3 location {url!r} has no bucket; expected s3://bucket/prefix")
    try:
        import s3fs
    except ImportError as e:
        raise ConfigError(
            f"checkpoint location {url!r} is on S3, which needs spark-state's s3 extra: pip install 'spark-state[s3]' "
            f"(the s3fs package; {e})"
        ) from e

    kwargs = _s3_client_kwargs(opts)
    fs = s3fs.S3FileSystem(**kwargs)
    fs.retries = S3FS_RETRIES
    root = f"{bucket}/{prefix}" if prefix else bucket
    return FsspecStorage(fs, _normalize_url(url), root, S3Backend(kwargs.get("endpoint_url")), retry=retry)


def _open_hdfs(url: str, scheme: str, opts: dict[str, str], retry: RetryPolicy) -> FsspecStorage:
    try:
        from hdfs_native.fsspec import HdfsFileSystem, ViewfsFileSystem
    except ImportError as e:
        raise ConfigError(
            f"checkpoint location {url!r} is on HDFS, which needs spark-state's hdfs extra: pip install "
            f"'spark-state[hdfs]' (the hdfs-native package; {e})"
        ) from e

    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"HDFS location {url!r} has an invalid port") from e
    config = dict(HDFS_DEFAULTS)
    config.update({k[len(HDFS_PREFIX):]: v for k, v in opts.items() if k.startswith(HDFS_PREFIX)})
    fs_class = HdfsFileSystem if scheme == "hdfs" else ViewfsFileSystem
    try:
        # Keyword arguments other than host/port become hdfs-native's Client config.
        fs = fs_class(host=parts.hostname, port=port, skip_instance_cache=True, **config)
    except Exception as e:  # hdfs-native validates the URL and config here, without I/O
        raise ConfigError(f"cannot set up an HDFS client for {url!r}: {type(e).__name__}: {e}") from e

    path = unquote(parts.path).rstrip("/") or "/"
    namenode = parts.netloc or "named by fs.defaultFS in the Hadoop configuration"
    backend = HdfsBackend(namenode, config["dfs.client.failover.max.attempts"])
    storage = FsspecStorage(fs, _normalize_url(url), path, backend, retry=retry)
    storage.probe()
    return storage

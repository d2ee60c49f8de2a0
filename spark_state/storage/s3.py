"""S3 through s3fs: a PUT is atomic, ``If-None-Match: *`` gives create-if-absent.

See :mod:`spark_state.storage.remote` for how :class:`S3Backend` meets the storage contract.
"""

from __future__ import annotations

import logging
from contextlib import suppress
from typing import Any, Optional

from . import s3_faults
from .fs_backend import Backend

_LOG = logging.getLogger(__name__)

__all__ = ["S3Backend", "S3_UPLOAD_PART", "S3_UPLOAD_CONCURRENCY", "S3_DELETE_BATCH"]

S3_UPLOAD_PART = 8 << 20
"""Multipart part size. Files below 2 parts go up in one PUT; s3fs holds at most
``S3_UPLOAD_PART * S3_UPLOAD_CONCURRENCY`` bytes of a file in memory at a time."""

S3_UPLOAD_CONCURRENCY = 4

S3_DELETE_BATCH = 1000
"""S3 DeleteObjects accepts at most 1000 keys per request."""


class S3Backend(Backend):
    """S3 through s3fs: direct PUTs (atomic by nature), conditional PUT for create-if-absent."""

    name = "S3"

    def __init__(self, endpoint_url: Optional[str]) -> None:
        where = f"the S3 endpoint {endpoint_url}" if endpoint_url else "the AWS S3 endpoint of the bucket's region"
        super().__init__(
            f"that {where} is up and reachable from this host (option s3.endpoint_url), "
            "and any proxy (HTTPS_PROXY) or firewall in between"
        )

    def is_unavailable(self, exc: BaseException) -> bool:
        if super().is_unavailable(exc):
            return True
        try:
            from botocore import exceptions as bce
        except ImportError:  # pragma: no cover - s3fs always brings botocore
            return False
        return isinstance(
            exc,
            (bce.EndpointConnectionError, bce.ConnectTimeoutError, bce.ProxyConnectionError,
             bce.ConnectionClosedError, bce.ReadTimeoutError),
        ) or type(exc).__name__ in ("FSTimeoutError", "ClientConnectorError")

    def hint(self, exc: BaseException) -> str:
        if type(exc).__name__ in ("NoCredentialsError", "PartialCredentialsError"):
            return (" (no S3 credentials: set s3.access_key_id and s3.secret_access_key, the AWS_* "
                    "environment variables or an AWS profile, or s3.anonymous=true for public buckets)")
        if isinstance(exc, FileNotFoundError):
            return " (does the bucket exist?)"
        return ""

    def is_transient(self, exc: BaseException) -> bool:
        return s3_faults.is_transient(exc)

    def describe(self, exc: BaseException) -> str:
        return s3_faults.describe(exc)

    def put(self, fs: Any, path: str, data: bytes, overwrite: bool) -> None:
        # mode="create" adds If-None-Match: * (also on multipart completion).
        fs.pipe_file(path, data, mode="overwrite" if overwrite else "create")

    def upload(self, fs: Any, local_path: str, path: str) -> None:
        fs.put_file(local_path, path, chunksize=S3_UPLOAD_PART, max_concurrency=S3_UPLOAD_CONCURRENCY)

    def after_failed_upload(self, fs: Any, path: str) -> None:
        """Abort multipart uploads still open on *path*'s key.

        s3fs aborts its upload when a part or the completion fails, but that abort is one more
        request that can fail too; an open upload is invisible to readers but its parts are
        billed until aborted. Only uploads of this exact key are aborted: the engine never
        uploads the same key from two writers at once (file names carry random ids).
        """
        bucket, key, _ = fs.split_path(path)
        try:
            listing = fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=key)
            for upload in listing.get("Uploads") or []:
                if upload.get("Key") == key:
                    fs.call_s3("abort_multipart_upload", Bucket=bucket, Key=key, UploadId=upload["UploadId"])
                    _LOG.info("aborted an open multipart upload of %s/%s after a failed upload", bucket, key)
        except Exception as exc:  # best effort: the next failed or retried upload tries again
            _LOG.debug("could not list or abort open multipart uploads of %s/%s: %s", bucket, key, exc)

    def delete_many(self, fs: Any, paths: list[str]) -> None:
        by_bucket: dict[str, list[str]] = {}
        for path in paths:
            bucket, key, _ = fs.split_path(path)
            by_bucket.setdefault(bucket, []).append(key)
        for bucket, keys in by_bucket.items():
            for i in range(0, len(keys), S3_DELETE_BATCH):
                batch = keys[i : i + S3_DELETE_BATCH]
                out = fs.call_s3(
                    "delete_objects",
                    Bucket=bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
                # Absent keys count as deleted; Errors are real failures (e.g. AccessDenied).
                failed = out.get("Errors") or []
                if failed:
                    first = failed[0]
                    raise OSError(
                        f"{len(failed)} of {len(batch)} deletes failed; first: "
                        f"{bucket}/{first.get('Key')}: {first.get('Code')} {first.get('Message')}"
                    )
        fs.invalidate_cache()

    def close(self, fs: Any) -> None:
        # s3fs otherwise closes its aiohttp session only when the object is garbage collected.
        creator = getattr(fs, "_s3creator", None)
        if getattr(fs, "_s3", None) is not None and creator is not None:
            with suppress(Exception):
                type(fs).close_session(fs.loop, creator)
            fs._s3 = None


# hdfs-native raises plain OSError("Connection refused (os error 111)") and the like for
# transport failures, so they are recognised by message.

    def upload_may_leave_parts(self, size: int) -> bool:
        return size >= 2 * S3_UPLOAD_PART  # goes up as a multipart upload

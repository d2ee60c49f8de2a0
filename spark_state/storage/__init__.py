"""Checkpoint storage: where the state engine keeps changelogs, manifests and SST files.

One interface, :class:`CheckpointStorage`, with atomic and durable writes; open one for a
URL with :func:`open_storage`::

    storage = open_storage("s3://bucket/ckpt/state", {"s3.region": "eu-west-1"})
    storage.write_bytes("0/1.changelog", data)

Backends: :class:`LocalStorage` (local disk, ``file://``) and :class:`FsspecStorage`
(``s3://``/``s3a://`` via s3fs, ``hdfs://``/``viewfs://`` via hdfs-native).

Remote operations are retried after transient failures (:mod:`.retry`, :mod:`.s3_faults`);
local disk failures become :class:`~spark_state.errors.LocalDiskError` (:mod:`.localdisk`).
"""

from spark_state.storage.base import CheckpointStorage
from spark_state.storage.factory import open_storage
from spark_state.storage.local import LocalStorage
from spark_state.storage.remote import FsspecStorage

__all__ = ["CheckpointStorage", "FsspecStorage", "LocalStorage", "open_storage"]

"""Changelog codec: the writes of one epoch as an Arrow IPC *file* (not stream).

Schema (one row per changed key, the last write of the epoch wins)::

    op     int8     0 = put, 1 = delete            (constants.OP_PUT / OP_DELETE)
    key    binary   the stored key (with its key-group prefix, when the caller uses one)
    value  binary   the new value; null for deletes

Schema metadata: ``spark_state.format_version`` and ``spark_state.version`` (the version
this changelog produces). The IPC file format ends with a footer, so a truncated file
fails to open instead of silently yielding fewer rows; the manifest's CRC-32 catches
any other damage.
"""

from __future__ import annotations

from typing import Iterator, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc

from .. import constants as C
from ..errors import CheckpointCorruptError, IncompatibleFormatError

SCHEMA = pa.schema([("op", pa.int8()), ("key", pa.binary()), ("value", pa.binary())])
_META_FORMAT = b"spark_state.format_version"
_META_VERSION = b"spark_state.version"
_PUT = pa.scalar(C.OP_PUT, pa.int8())
_DELETE = pa.scalar(C.OP_DELETE, pa.int8())


def encode(version: int, changes: Mapping[bytes, Optional[bytes]]) -> bytes:
    """Serialise ``{key: value or None}`` as the changelog of ``version``."""
    schema = SCHEMA.with_metadata({_META_FORMAT: str(C.FORMAT_VERSION), _META_VERSION: str(version)})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        keys = list(changes.keys())
        values = list(changes.values())
        step = C.ARROW_BATCH_ROWS
        for i in range(0, len(keys), step):
            chunk_values = pa.array(values[i:i + step], pa.binary())
            ops = pc.if_else(chunk_values.is_null(), _DELETE, _PUT)
            writer.write_batch(
                pa.record_batch([ops, pa.array(keys[i:i + step], pa.binary()), chunk_values], schema=schema)
            )
    return sink.getvalue().to_pybytes()


def decode(data: bytes, path: str, expected_version: int) -> Iterator[tuple[bytes, Optional[bytes]]]:
    """Yield ``(key, value or None)`` in file order. ``path`` names the file in errors."""
    try:
        reader = pa.ipc.open_file(pa.py_buffer(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CheckpointCorruptError(path, f"not a readable Arrow IPC file ({exc})") from None
    meta = reader.schema.metadata or {}
    found = meta.get(_META_FORMAT, b"?").decode()
    if not found.isdigit() or int(found) not in C.SUPPORTED_FORMAT_VERSIONS:
        raise IncompatibleFormatError(path, found, C.SUPPORTED_FORMAT_VERSIONS)
    if meta.get(_META_VERSION) != str(expected_version).encode():
        raise CheckpointCorruptError(
            path, f"holds version {meta.get(_META_VERSION, b'?').decode()}, expected {expected_version}"
        )
    if reader.schema.remove_metadata() != SCHEMA:
        raise CheckpointCorruptError(path, f"unexpected schema {reader.schema.remove_metadata()}")
    for i in range(reader.num_record_batches):
        batch = reader.get_batch(i)
        ops = batch.column(0).to_pylist()
        keys = batch.column(1).to_pylist()
        values = batch.column(2).to_pylist()
        for op, key, value in zip(ops, keys, values):
            yield key, (None if op == C.OP_DELETE else value)

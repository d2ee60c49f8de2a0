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


def encode(version: int, changes: Mapping[bytes, Optional[bytes]]) -> bytes:
    """Serialise ``{key: value or None}`` as the changelog of ``version``."""
    keys, values = list(changes.keys()), list(changes.values())
    step = C.ARROW_BATCH_ROWS  # chunks of bounded size: one binary array holds at most 2 GiB

    def column(items: list) -> pa.ChunkedArray:
        return pa.chunked_array([pa.array(items[i:i + step], pa.binary()) for i in range(0, len(items), step)],
                                pa.binary())

    return encode_columns(version, column(keys), column(values))


def encode_columns(version: int, keys: pa.ChunkedArray, values: pa.ChunkedArray) -> bytes:
    """Serialise ``keys[i] -> values[i]`` (null: delete; one row per key) as the changelog of
    ``version``, in record batches of at most ``constants.ARROW_BATCH_ROWS`` rows."""
    schema = SCHEMA.with_metadata({_META_FORMAT: str(C.FORMAT_VERSION), _META_VERSION: str(version)})
    # Scalars made here, not at import: pyarrow's first conversion of a Python object imports
    # pandas, which importing this module must not do (see spark_state.provider.no_pandas).
    ops = pc.if_else(pc.is_null(values), pa.scalar(C.OP_DELETE, pa.int8()), pa.scalar(C.OP_PUT, pa.int8()))
    table = pa.Table.from_arrays([ops, keys.cast(pa.binary()), values.cast(pa.binary())], schema=schema)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, schema) as writer:
        writer.write_table(table, max_chunksize=C.ARROW_BATCH_ROWS)
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

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

from typing import Any, Iterable, Iterator, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc

from .. import constants as C
from ..arrow_chunks import batch_entries, chunks
from ..errors import CheckpointCorruptError, IncompatibleFormatError

SCHEMA = pa.schema([("op", pa.int8()), ("key", pa.binary()), ("value", pa.binary())])
_META_FORMAT = b"spark_state.format_version"
_META_VERSION = b"spark_state.version"


def encode(version: int, changes: Mapping[bytes, Optional[bytes]]) -> bytes:
    """Serialise ``{key: value or None}`` as the changelog of ``version``."""
    sink = pa.BufferOutputStream()
    write(version, batches_of(changes), sink)
    return sink.getvalue().to_pybytes()


def batches_of(changes: Mapping[bytes, Optional[bytes]]) -> Iterator[tuple[pa.Array, pa.Array]]:
    """``{key: value or None}`` as the ``(keys, values)`` record batches :func:`write` takes."""
    # chunks of bounded size: one binary array holds at most 2 GiB; two lists sliced in step
    # (no Python step per change: a commit's changelog may hold millions)
    keys, values = list(changes.keys()), list(changes.values())
    for ks, vs in zip(chunks(keys, C.ARROW_BATCH_ROWS), chunks(values, C.ARROW_BATCH_ROWS)):
        yield pa.array(ks, pa.binary()), pa.array(vs, pa.binary())


def encode_columns(version: int, keys: pa.ChunkedArray, values: pa.ChunkedArray) -> bytes:
    """Serialise ``keys[i] -> values[i]`` (null: delete; one row per key) as the changelog of
    ``version``."""
    table = pa.Table.from_arrays([keys.cast(pa.binary()), values.cast(pa.binary())], names=["key", "value"])
    sink = pa.BufferOutputStream()
    write(version, ((b.column(0), b.column(1)) for b in table.to_batches(max_chunksize=C.ARROW_BATCH_ROWS)), sink)
    return sink.getvalue().to_pybytes()


def write(version: int, batches: Iterable[tuple[pa.Array, pa.Array]], sink: Any) -> int:
    """Write the changelog of ``version`` to ``sink`` (a pyarrow output stream or a writable binary
    file object), one record batch per ``(keys, values)`` pair given (values null: delete; one row
    per key over the whole changelog): memory follows one batch, not the epoch. Returns the rows
    written."""
    schema = SCHEMA.with_metadata({_META_FORMAT: str(C.FORMAT_VERSION), _META_VERSION: str(version)})
    rows = 0
    # Scalars made here, not at import: pyarrow's first conversion of a Python object imports
    # pandas, which importing this module must not do (see spark_state.provider.no_pandas).
    delete = pa.scalar(C.OP_DELETE, pa.int8())
    put = pa.scalar(C.OP_PUT, pa.int8())
    with pa.ipc.new_file(sink, schema) as writer:
        for keys, values in batches:
            ops = pc.if_else(pc.is_null(values), delete, put)
            writer.write_batch(pa.record_batch([ops, keys.cast(pa.binary()), values.cast(pa.binary())], schema=schema))
            rows += len(keys)
    return rows


def decode(data: bytes, path: str, expected_version: int) -> Iterator[tuple[bytes, Optional[bytes]]]:
    """Yield ``(key, value or None)`` in file order. ``path`` names the file in errors."""
    try:
        reader = pa.ipc.open_file(pa.py_buffer(data))
    except (pa.ArrowInvalid, OSError) as exc:
        raise CheckpointCorruptError(path, f"not a readable Arrow IPC file ({exc})") from None
    for keys, values in _batches(reader, path, expected_version):
        yield from batch_entries(keys, values)


def read_file(local_path: str, where: str, expected_version: int) -> Iterator[tuple[pa.Array, pa.Array]]:
    """The ``(keys, values)`` (values null for deletes) of each record batch of the changelog in
    the local file ``local_path``, read memory-mapped: memory follows one batch, whatever the
    epoch's size. ``where`` names the file in errors."""
    with pa.memory_map(local_path) as source:
        try:
            reader = pa.ipc.open_file(source)
        except (pa.ArrowInvalid, OSError) as exc:
            raise CheckpointCorruptError(where, f"not a readable Arrow IPC file ({exc})") from None
        yield from _batches(reader, where, expected_version)


def _batches(reader: pa.ipc.RecordBatchFileReader, path: str,
             expected_version: int) -> Iterator[tuple[pa.Array, pa.Array]]:
    """Check a changelog's format, version and schema, then yield each batch's keys and values
    (null where the row is a delete)."""
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
    delete, null = pa.scalar(C.OP_DELETE, pa.int8()), pa.scalar(None, pa.binary())
    for i in range(reader.num_record_batches):
        batch = reader.get_batch(i)
        yield batch.column(1), pc.if_else(pc.equal(batch.column(0), delete), null, batch.column(2))

"""Rows in bounded chunks, and ``(key, value)`` entries as Arrow record batches: the one owner of
"at most N rows (and about M bytes) per record batch".

Every writer of Arrow files and every reader that yields record batches cuts an iterator of any
length into chunks: the engine's snapshots and spilled writes, the provider's change feed and
shipped views, savepoint state files, re-split stores, the readers of state as data. A chunk is
a Python list of at most ``rows`` items; with ``max_bytes`` it also ends at the first item whose
size (``size(item)``) brings the chunk's total to ``max_bytes`` or more, so a batch of large values
stays bounded too, and far below the 2 GiB that Arrow's 32-bit binary offsets allow.

Why a top-level module of its own (a room right after ``memory``): its users sit in rooms from
``backends`` up to ``state_data``, so it imports nothing of spark_state and every room may import
it. The batch sizes stay with their owners (``constants.ARROW_BATCH_ROWS``, the savepoint
format's ``BATCH_ROWS``/``BATCH_BYTES``, the readers' ``BATCH_ROWS``): this module only cuts.

Back the other way: :func:`batch_entries` turns a record batch's two columns into entries. And a
pass that stages writes between chunks of a key-ordered source it must not iterate while writing
(the merged view of a store) reads it chunk by chunk with :func:`resumable_chunks`, each chunk
from an iterator of its own (TTL's layout migration and full expiry, the schema migration).

Memory: one chunk (and the record batch built from it). A chunk handed out is no longer
referenced by the generator, so a caller that drops it after building its batch holds the Arrow
copy only.
"""

from __future__ import annotations

import itertools
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, TypeVar

import pyarrow as pa

__all__ = ["batch_entries", "chunks", "entry_arrays", "entry_batch", "entry_batches", "entry_size", "resumable_chunks",
           "take_rows"]

T = TypeVar("T")
V = TypeVar("V")

#: A ``(key, value)`` entry; the value is None for a delete in a change feed or changelog.
Entry = tuple[bytes, Optional[bytes]]


def chunks(items: Iterable[T], rows: int, max_bytes: Optional[int] = None,
           size: Optional[Callable[[T], int]] = None, at_least_one: bool = False) -> Iterator[list[T]]:
    """``items`` in lists of at most ``rows`` items, in order. With ``max_bytes`` (and ``size``, the
    bytes of one item) a list also ends at the first item that brings its total to ``max_bytes``
    or more. No list is empty, except the one list an empty input gives with ``at_least_one``
    (for files that must hold one record batch even when empty)."""
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    if max_bytes is not None and size is None:
        raise ValueError("max_bytes needs size, the bytes of one item")
    if isinstance(items, (list, tuple)) and max_bytes is None:
        # a list in memory already: slices, without a Python step per item (a commit's
        # changelog and a hashmap snapshot cut millions of keys this way)
        if not items and at_least_one:
            yield []
        for start in range(0, len(items), rows):
            yield list(items[start:start + rows])
        return
    chunk: list[T] = []
    total = 0
    given = False
    for item in items:
        chunk.append(item)
        if max_bytes is not None:
            total += size(item)  # type: ignore[misc]  # checked above
        del item  # the chunk holds it; the suspended generator must not
        if len(chunk) >= rows or (max_bytes is not None and total >= max_bytes):
            # handed out through a one-item list: once it is popped, the suspended generator
            # holds no reference to the chunk (the caller can drop it after use)
            out = [chunk]
            chunk, total, given = [], 0, True
            yield out.pop()
    if chunk or (at_least_one and not given):
        yield chunk


def entry_size(entry: Entry) -> int:
    """The bytes of an entry's key and value (a delete's value counts 0)."""
    key, value = entry
    return len(key) + (len(value) if value is not None else 0)


def entry_arrays(entries: Sequence[Entry]) -> tuple[pa.Array, pa.Array]:
    """A chunk of entries as its ``(keys, values)`` binary arrays (a None value: null)."""
    return (pa.array([k for k, _ in entries], pa.binary()), pa.array([v for _, v in entries], pa.binary()))


def entry_batch(entries: Sequence[Entry], schema: pa.Schema) -> pa.RecordBatch:
    """A chunk of entries as a record batch of ``schema`` (two binary columns: key, value)."""
    return pa.record_batch(list(entry_arrays(entries)), schema=schema)


def entry_batches(entries: Iterable[Entry], schema: pa.Schema, rows: int, max_bytes: Optional[int] = None,
                  at_least_one: bool = False) -> Iterator[pa.RecordBatch]:
    """``entries`` as record batches of ``schema`` (key, value binary) of at most ``rows`` rows and,
    with ``max_bytes``, about ``max_bytes`` of keys and values (see :func:`chunks`)."""
    for chunk in chunks(entries, rows, max_bytes, entry_size if max_bytes is not None else None, at_least_one):
        batch = entry_batch(chunk, schema)
        del chunk  # only the Arrow copy is held while the caller uses the batch
        yield batch


def batch_entries(keys: pa.Array, values: pa.Array) -> Iterator[tuple[Any, Any]]:
    """A record batch's ``(keys, values)`` columns back to entries, in order (a null value: None;
    the callers know their columns' types, which Arrow's ``to_pylist`` does not carry).
    Memory: the two columns as Python lists, one batch's worth."""
    return zip(keys.to_pylist(), values.to_pylist())


def resumable_chunks(entries: Callable[[Optional[bytes]], Iterator[tuple[bytes, V]]], chunk: int,
                     start: Optional[bytes] = None) -> Iterator[list[tuple[bytes, V]]]:
    """The ascending ``(key, value)`` pairs of ``entries(start)`` in lists of at most ``chunk``,
    each list taken from an iterator of its own (``entries(key)``: the pairs from ``key`` on),
    closed before the list is handed out; the next is asked for from just after the list's last
    key. Between lists the caller may stage writes of keys up to that one: a view that must not be
    written while it is iterated (the merged view of a store) is not being iterated then."""
    while True:
        rows = take_rows(entries(start), chunk)
        if rows:
            yield rows
        if len(rows) < chunk:
            return
        start = rows[-1][0] + b"\x00"  # the least key above the last one


def take_rows(rows: Iterator[tuple[bytes, V]], limit: int) -> list[tuple[bytes, V]]:
    """The first ``limit`` of ``rows``; the iterator is closed when this returns (a pass that
    stages what it read must not hold an iterator of the merged view meanwhile)."""
    try:
        return list(itertools.islice(rows, limit))
    finally:
        close = getattr(rows, "close", None)
        if close is not None:
            close()

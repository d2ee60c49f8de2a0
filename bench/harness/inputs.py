"""Parquet input for a file stream: one file per micro-batch, read in the order written.

Spark's file source with ``maxFilesPerTrigger=1`` takes files oldest first by modification time,
so each file gets a time 10 s after the previous one (a fixed base, so that reruns see the same
order) and is written under a temporary name first: a half-written file is never listed.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable

#: Modification time of batch 0's file; batch b's is 10 s per batch later.
BASE_MTIME = 1_700_000_000


def batch_mtime(b: int) -> int:
    return BASE_MTIME + 10 * b


def write_batch(path: str, table, b: int) -> str:
    """Write ``table`` (a pyarrow Table) as micro-batch ``b``'s file at ``path``."""
    import pyarrow.parquet as pq

    tmp = os.path.join(os.path.dirname(path), f".tmp-{os.path.basename(path)}")
    pq.write_table(table, tmp)
    os.utime(tmp, (batch_mtime(b), batch_mtime(b)))
    os.replace(tmp, path)
    return path


def write_batch_chunks(path: str, chunks: Iterable, schema, b: int, row_group_size: int) -> str:
    """Micro-batch ``b``'s file written a table at a time (bounded memory for large batches)."""
    import pyarrow.parquet as pq

    tmp = path + ".tmp"
    with pq.ParquetWriter(tmp, schema) as writer:
        for table in chunks:
            writer.write_table(table, row_group_size=row_group_size)
    os.utime(tmp, (batch_mtime(b), batch_mtime(b)))
    os.replace(tmp, path)
    return path


def write_batches(out: str, batches: int, table_of: Callable[[int], object],
                  name: str = "batch-{b:06d}.parquet") -> str:
    """``batches`` files under ``out``, batch b's table from ``table_of(b)``; returns ``out``."""
    os.makedirs(out, exist_ok=True)
    for b in range(batches):
        write_batch(os.path.join(out, name.format(b=b)), table_of(b), b)
    return out


def stage(input_dir: str, files: list[str]) -> None:
    """Make ``input_dir`` hold ``files`` too (hard links: the modification times come along)."""
    os.makedirs(input_dir, exist_ok=True)
    for f in files:
        target = os.path.join(input_dir, os.path.basename(f))
        if not os.path.exists(target):
            os.link(f, target)

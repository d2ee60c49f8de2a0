"""Rows staged by partition between the write tasks of a writer that cannot run a Spark job of
its own (the data source's, :mod:`..datasource.writer`) and the step that applies them.

Layout: a staging directory beside the target savepoint, ``<target>.spark-state-staging-<write id>``
(never inside it: the target holds nothing but the savepoint), holding one Arrow IPC stream file
per write task attempt and partition that received rows::

    <staging>/<partition>-<task attempt id>.arrow

A task holds one input batch in memory: each batch's rows are split by partition and appended at
once to the partition's local stream file, and the files are uploaded when the task's input
ends (:class:`StagingWriter`). The applying step reads a partition's files one record batch at
a time (:func:`staged_batches`), through a local copy, so neither side ever holds a partition.
Only the files named by the tasks that succeeded are applied; :func:`remove_staging` deletes the
directory whatever it holds (a failed attempt's files too).
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from typing import Iterable, Iterator, Mapping

import pyarrow as pa

from ...storage import open_storage

__all__ = ["StagingWriter", "remove_staging", "staged_batches", "staging_url"]


def staging_url(target_url: str, write_id: str) -> str:
    """The staging directory of write ``write_id`` into the savepoint at ``target_url``."""
    return f"{target_url.rstrip('/')}.spark-state-staging-{write_id}"


class StagingWriter:
    """One write task's staged rows (see the module docstring): ``add`` appends a partition's
    rows to its local file, ``close`` uploads the files and returns ``{partition: staged path}``."""

    def __init__(self, url: str, options: Mapping[str, str], task: str) -> None:
        self.url, self.options, self.task = url, dict(options), task
        self._local = tempfile.mkdtemp(prefix="spark-state-staging-")
        self._writers: dict[int, pa.ipc.RecordBatchStreamWriter] = {}

    def add(self, partition: int, batch: pa.RecordBatch) -> None:
        writer = self._writers.get(partition)
        if writer is None:
            writer = pa.ipc.new_stream(os.path.join(self._local, f"{partition}.arrow"), batch.schema)
            self._writers[partition] = writer
        writer.write_batch(batch)

    def close(self) -> dict[int, str]:
        try:
            for writer in self._writers.values():
                writer.close()
            staged = {}
            storage = open_storage(self.url, self.options)
            for partition in sorted(self._writers):
                path = f"{partition}-{self.task}.arrow"
                storage.upload_file(os.path.join(self._local, f"{partition}.arrow"), path)
                staged[partition] = path
            return staged
        finally:
            self.discard()

    def discard(self) -> None:
        """Remove the task's local files (after ``close``, or instead of it when the task fails)."""
        shutil.rmtree(self._local, ignore_errors=True)


def staged_batches(url: str, options: Mapping[str, str], paths: Iterable[str]) -> Iterator[pa.RecordBatch]:
    """The record batches of staged files ``paths``, one file after the other, one batch at a time
    (each file through a local copy, deleted when its batches end)."""
    storage = open_storage(url, dict(options))
    for path in paths:
        local = tempfile.mkdtemp(prefix="spark-state-staged-")
        try:
            copy = os.path.join(local, "staged.arrow")
            storage.download_file(path, copy)
            with pa.OSFile(copy, "rb") as source:
                yield from pa.ipc.open_stream(source)
        finally:
            shutil.rmtree(local, ignore_errors=True)


def remove_staging(url: str, options: Mapping[str, str]) -> None:
    """Delete the staging directory ``url`` and whatever it holds (a missing one is no error)."""
    storage = open_storage(url, dict(options))
    storage.delete_many(storage.list_dir("") + storage.list_dir("", temp_files=True))
    parent, name = posixpath.split(url.rstrip("/"))
    if parent:
        open_storage(parent, dict(options)).delete_empty_dir(name)

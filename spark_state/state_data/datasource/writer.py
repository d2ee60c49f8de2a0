"""The writer of ``df.write.format("spark-state")`` (Python Data Source API, Spark 4.0+): a
savepoint's state given the DataFrame's rows as its whole content, written as a new savepoint.

::

    (df.write.format("spark-state").mode("overwrite")
       .option("path", "/savepoints/sp1").option("stateVarName", "count")   # or operatorId / storeName
       .option("targetPath", "/savepoints/sp2").save())

Spark runs ``writer()`` and ``commit()`` in Python workers beside the driver and ``write()`` in
the tasks, none with a Spark session, so no step may start a Spark job: ``writer()`` checks
everything and plans (:func:`~..writers.staged_write.plan_write`; nothing is written when it
refuses), each task routes and stages its rows beside the target (:mod:`..writers.staging`)
and returns their paths as its commit message, and ``commit()`` applies the staged rows
partition after partition and writes the manifest last
(:func:`~..writers.staged_write.apply_staged`); the staging is removed after the commit and by
``abort()``. Spark calls ``abort()`` when a task or the commit fails.

Mode: ``overwrite`` only. The rows are the state's whole new content, keys without a row lose
it (Spark SQL's overwrite), and the source savepoint is never changed: the result is a new
savepoint in ``targetPath``, which must be new or empty. ``append`` (which would keep the
keys the rows lack) is refused before anything is written.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..read_options import SOURCE, OptionError
from ..write_options import WriteOptions
from ..writers.staged_write import Staged, apply_staged, plan_write
from ..writers.staging import StagingWriter, remove_staging, staging_url
from .options import NAME

__all__ = ["SavepointWriter", "StagedFiles", "savepoint_writer"]


@dataclass
class StagedFiles(WriterCommitMessage):
    """One task's commit message: partition -> the staged file of its rows for that partition."""

    files: dict[int, str] = field(default_factory=dict)


def savepoint_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> "SavepointWriter":
    """The writer of the data source's ``writer(schema, overwrite)``, once the options, the mode
    and the rows' schema pass every check (see the module docstring).

    :raises OptionError: a refused option or target, or mode ``append``.
    :raises StateDataError: rows that do not fit the state."""
    if not overwrite:
        raise OptionError("state", f"format('{NAME}') gives the state named by {{option}} its whole content from the "
                                   "rows (keys without a row lose it) and writes a new savepoint: use "
                                   "mode('overwrite'); append is refused", SOURCE)
    write = WriteOptions.from_source(options, NAME)
    staged = plan_write(write, schema)
    return SavepointWriter(write, staged, staging_url(write.target.rstrip("/"), uuid.uuid4().hex[:16]))


class SavepointWriter(DataSourceArrowWriter):
    """See the module docstring (pickled into the tasks and into ``commit()``'s worker)."""

    def __init__(self, options: WriteOptions, staged: Staged, staging: str) -> None:
        self.options, self.staged, self.staging = options, staged, staging

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedFiles:
        from pyspark import TaskContext

        context = TaskContext.get()
        task = str(context.taskAttemptId()) if context is not None else uuid.uuid4().hex[:16]
        stage = StagingWriter(self.staging, self.options.storage_options, task)
        try:
            for batch in iterator:
                for partition, rows in self.staged.route(batch):
                    stage.add(partition, rows)
            return StagedFiles(stage.close())
        finally:
            stage.discard()

    def commit(self, messages: Sequence[Optional[WriterCommitMessage]]) -> None:
        files: dict[int, list[str]] = {}
        for message in messages:
            if isinstance(message, StagedFiles):
                for partition, path in message.files.items():
                    files.setdefault(partition, []).append(path)
        try:
            apply_staged(self.staged, self.options, self.staging, files)
        finally:
            remove_staging(self.staging, self.options.storage_options)

    def abort(self, messages: Sequence[Optional[WriterCommitMessage]]) -> None:
        remove_staging(self.staging, self.options.storage_options)



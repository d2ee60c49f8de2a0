"""The state of Spark's built-in stateful operators as DataFrames, from checkpoints and savepoints.

::

    from spark_state.state_data import read_spark_operator_state
    read_spark_operator_state(spark, "/ckpt").show()                          # operator 0, its default store
    read_spark_operator_state(spark, "/savepoints/sp1", operator_id=1, store_name="left-keyToNumValues")

The rows are Spark's own state reader's (``spark.read.format("statestore")``): ``key`` and ``value``
structs typed by the operator's state schema, and ``partition_id``. A checkpoint is read in place
(the reader loads the checkpoint's provider: spark-state's through its shim, or Spark's own); a
savepoint is first restored into a local working directory, which lives until the Python process
exits (the DataFrame reads it lazily), and read there. Spark's reader exists from Spark 4.0 on.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from typing import Mapping, Optional

from pyspark.sql import DataFrame, SparkSession

from ...deprecation import renamed_arguments
from ...ops.restore import restore
from ...ops.savepoint_manifest import read_manifest
from ...spark.lines import running_line
from ...storage import open_storage
from ..errors import StateDataError
from ..location.savepoints import is_savepoint
from ..location.spark_stores import checkpoint_spark_stores, choose_spark_store, savepoint_spark_stores
from ..read_options import OptionError

__all__ = ["read_spark_operator_state"]


@renamed_arguments(savepoint_options="storage_options")
def read_spark_operator_state(spark: SparkSession, path: str, *, operator_id: int = 0, store_name: Optional[str] = None,
                        batch: Optional[int] = None, storage_options: Optional[Mapping[str, str]] = None,
                        work_dir: Optional[str] = None) -> DataFrame:
    """Spark's state reader's DataFrame of operator ``operator_id``'s store ``store_name`` (default:
    Spark's default store) after ``batch`` (default: the last committed), from the checkpoint or
    savepoint at ``path`` (see the module docstring). ``storage_options``: the savepoint's
    storage, as for every reader. ``work_dir``: where a savepoint is restored (default: a
    temporary directory removed when the process exits).

    :raises StateDataError: Spark 3.5 (no state reader), or ``batch`` given for a savepoint.
    :raises UnknownStateError: no Spark operator ``operator_id`` or no store ``store_name`` (the
        message lists those there are), checked before a savepoint is restored."""
    if running_line().name == "3.5":
        raise StateDataError("Spark 3.5 has no state reader (format('statestore') is Spark 4.0+): "
                             "`spark-state inspect` counts each operator's rows on 3.5")
    savepoint = is_savepoint(path, storage_options)
    _check_operator(path, savepoint, operator_id, store_name, storage_options)
    if savepoint:
        if batch is not None:
            raise OptionError("batch", f"{path} is a savepoint, which holds one batch: omit {{option}}")
        path = restored_copy(path, storage_options, work_dir)
    reader = spark.read.format("statestore").option("operatorId", operator_id)
    if store_name is not None:
        reader = reader.option("storeName", store_name)
    if batch is not None:
        reader = reader.option("batchId", batch)
    return reader.load(path)


def _check_operator(path: str, savepoint: bool, operator_id: int, store_name: Optional[str],
                    storage_options: Optional[Mapping[str, str]]) -> None:
    """Refuse an operator or store that ``path`` does not hold, naming those it holds."""
    options = dict(storage_options or {})
    stores = (savepoint_spark_stores(read_manifest(open_storage(path, options))) if savepoint
              else checkpoint_spark_stores(path, options))
    if stores is not None:
        choose_spark_store(stores, operator_id, store_name, path)


def restored_copy(savepoint: str, options: Optional[Mapping[str, str]], work_dir: Optional[str]) -> str:
    """A checkpoint restored from ``savepoint`` in a new directory (kept with the query id; its
    functions' state under ``<work_dir>/process``)."""
    if work_dir is None:
        work_dir = tempfile.mkdtemp(prefix="spark-state-operator-read-")
        atexit.register(shutil.rmtree, work_dir, True)
    target = os.path.join(work_dir, "checkpoint")
    restore(savepoint, target, keep_query_id=True, storage_options=dict(options or {}), progress=False,
            process_root=os.path.join(work_dir, "process"))
    return target

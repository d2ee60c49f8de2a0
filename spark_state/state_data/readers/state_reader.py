"""One checkpoint or savepoint, read in every way with its path and options given once.

Flink's ``SavepointReader.read(env, path)`` for spark-state: the object holds the path, the
storage options and where the functions' state is, and each method is one of the package's
readers with those arguments filled in::

    from spark_state.state_data import StateReader
    state = StateReader(spark, "/ckpt", function="Sessions")
    state.keyed_state("count").where("value > 10").show()
    state.timers(batch=12)
    state.change_feed("count", start_batch=3)
    state.metadata()                                  # plain rows, no Spark job

Nothing is read when the object is made, and nothing is cached between calls: each method
returns what its function (named in its docstring) returns, reading the last committed batch
unless given ``batch``. The data source (``spark.read.format("spark-state")``) is the same
readers behind Spark's reader API.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T

from ..read_options import ReadOptions
from .by_options import read
from .keyed_states import KeyReader, read_keyed_states
from .lookup import StateLookup
from .metadata import state_metadata
from .spark_operator_state import read_spark_operator_state

__all__ = ["StateReader"]


class StateReader:
    """The readers of :mod:`spark_state.state_data` over one path (see the module docstring).

    Args:
        spark: the session the DataFrames belong to.
        path: a query's ``checkpointLocation`` or a savepoint's directory.
        function: the function read by default (optional when there is one; each method may
            name another).
        storage_options: the storage's options (``s3.*``, ``retry.*``, ``hdfs.*``).
        process_root: where the state of a query run with ``state_root=`` is.
        process_locations: ``{function name: url}`` for functions given ``state_location=``.
        allow_pickle: decode pickled values (unpickling runs whatever the stored bytes say).
    """

    def __init__(self, spark: SparkSession, path: str, *, function: Optional[str] = None,
                 storage_options: Optional[Mapping[str, str]] = None, process_root: Optional[str] = None,
                 process_locations: Optional[Mapping[str, str]] = None, allow_pickle: bool = False) -> None:
        self.spark = spark
        #: what every read shares; each method adds what it reads (:class:`~..read_options.ReadOptions`)
        self.options = ReadOptions(path, function=function, storage_options=dict(storage_options or {}),
                                   process_root=process_root, process_locations=dict(process_locations or {}),
                                   allow_pickle=allow_pickle)

    @property
    def path(self) -> str:
        return self.options.path

    def _where(self, function: Optional[str]) -> dict[str, Any]:
        """The arguments every keyed reader shares."""
        o = self.options
        return {"function": function if function is not None else o.function,
                "storage_options": dict(o.storage_options), "process_root": o.process_root,
                "process_locations": dict(o.process_locations)}

    def _read(self, function: Optional[str], **what: Any) -> DataFrame:
        chosen = self.options.function if function is None else function
        return read(self.spark, self.options.replace(function=chosen, **what))

    def keyed_state(self, state: str, *, function: Optional[str] = None, batch: Optional[int] = None,
                    flatten_collection_types: bool = False) -> DataFrame:
        """:func:`~.keyed_state.read_keyed_state`: one keyed state of every key."""
        return self._read(function, state=state, batch=batch, flatten_collection_types=flatten_collection_types)

    def keyed_states(self, reader: KeyReader, schema: Union[T.StructType, str], *,
                     states: Optional[Sequence[str]] = None, function: Optional[str] = None,
                     batch: Optional[int] = None) -> DataFrame:
        """:func:`~.keyed_states.read_keyed_states`: every state of each key, in one pass."""
        return read_keyed_states(self.spark, self.path, reader, schema, states=states, batch=batch,
                                 allow_pickle=self.options.allow_pickle, **self._where(function))

    def timers(self, *, function: Optional[str] = None, batch: Optional[int] = None) -> DataFrame:
        """:func:`~.keyed_state.read_timers`: the registered timers of every key."""
        return self._read(function, timers=True, batch=batch)

    def change_feed(self, state: str, *, start_batch: int, end_batch: Optional[int] = None,
                    function: Optional[str] = None) -> DataFrame:
        """:func:`~.change_feed.read_change_feed`: the changes batches made to a state (a
        checkpoint only: a savepoint holds one batch)."""
        return self._read(function, state=state, change_feed=True, start_batch=start_batch, end_batch=end_batch)

    def operator_state(self, state: str, *, function: Optional[str] = None,
                       batch: Optional[int] = None) -> DataFrame:
        """:func:`~.operator_state.read_function_operator_state`: a function's list,
        union list or broadcast state, per partition."""
        return self._read(function, operator_state=state, batch=batch)

    def spark_operator_state(self, operator_id: int = 0, *, store_name: Optional[str] = None,
                             batch: Optional[int] = None, work_dir: Optional[str] = None) -> DataFrame:
        """:func:`~.spark_operator_state.read_spark_operator_state`: a Spark operator's state rows (Spark 4.0+)."""
        return read_spark_operator_state(self.spark, self.path, operator_id=operator_id, store_name=store_name,
                                   batch=batch, storage_options=dict(self.options.storage_options),
                                         work_dir=work_dir)

    def metadata(self) -> list[dict[str, Any]]:
        """:func:`~.metadata.state_metadata`: one row per state, timer service and Spark operator."""
        o = self.options
        return state_metadata(o.path, storage_options=dict(o.storage_options), process_root=o.process_root,
                              process_locations=dict(o.process_locations))

    def lookup(self, *, function: Optional[str] = None, local_dir: Optional[str] = None) -> StateLookup:
        """A :class:`~.lookup.StateLookup` of one function (close it, or use ``with``)."""
        return StateLookup(self.path, allow_pickle=self.options.allow_pickle, local_dir=local_dir,
                           **self._where(function))

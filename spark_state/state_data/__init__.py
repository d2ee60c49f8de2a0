"""State as data: a query's state read and written outside the query.

The rooms, by role (Flink's state processor API and Spark's ``v2/state`` source are the models):

* :mod:`.location`: what a path holds: a checkpoint or a savepoint, which function, which
  committed batch, the partition stores and the states' schema records;
* :mod:`.readers`: one module per thing read (keyed state and timers, every state of a key in one
  pass, a function's operator state, Spark operators' state, change feeds, point lookups, the
  metadata rows) and :class:`~.readers.state_reader.StateReader`, which holds a path and its
  options for all of them;
* :mod:`.datasource`: the same readers as ``spark.read.format("spark-state")`` (its options, its
  source classes, their registration);
* :mod:`.writers`: savepoints written by DataFrame jobs (bootstrap from history, transform,
  surgery of keyed, operator and Spark operators' state) and the erasure of keys;
* beside them, shared by readers and writers: :mod:`.read_options` (every option, spelled once
  for Python, the data source and the command line), :mod:`.partition_jobs` (one Spark task per
  partition store), :mod:`.codecs` and :mod:`.key_columns` (pure decoding), :mod:`.errors`.

"Operator state" means one thing here, as in Flink: a function's list, union list or broadcast
state. The state of Spark's own stateful operators (aggregations, joins, ...) is "Spark operator
state"::

    from spark_state.state_data import StateLookup, StateReader, erase_keys, lookup, read_keyed_state
    read_keyed_state(spark, "/ckpt", "counts").where("value > 10").show()
    StateReader(spark, "/ckpt").timers()                 # the path and options given once
    lookup("/ckpt", "counts", "alice").value
    with StateLookup("/ckpt", function="Sessions") as states:
        states.get("open", ("eu", 42))
    erase_keys("/ckpt", ["alice"])                       # a stopped query

Layering: this package sits over the operations tools (:mod:`spark_state.ops`: finding state
locations, reading committed versions) and the key layout (:mod:`spark_state.keys`); nothing
in the runtime imports it. Errors: :class:`~.errors.StateDataError` and its subclasses.
"""

from __future__ import annotations

from typing import Any, Optional

from ..deprecation import alias_modules, warn_renamed
from .datasource.register import register_data_sources
from .errors import BootstrapError, KeyMismatchError, StateDataError, UnknownStateError, UnreadableStateError
from .readers.change_feed import read_change_feed
from .readers.keyed_state import read_keyed_state, read_timers
from .readers.keyed_states import read_keyed_states
from .readers.lookup import LookupResult, StateLookup, lookup
from .readers.metadata import state_metadata
from .readers.operator_state import read_function_operator_state
from .readers.spark_operator_state import read_spark_operator_state
from .readers.state_reader import StateReader
from .writers.bootstrap import BootstrapResult, SavepointWriter, count_sources
from .writers.erase import ErasureResult, erase_keys
from .writers.transform import SavepointTransform, TransformResult

__all__ = ["BootstrapError", "BootstrapResult", "ErasureResult", "KeyMismatchError", "LookupResult",
           "SavepointTransform", "SavepointWriter", "StateDataError", "StateLookup", "StateReader", "TransformResult",
           "UnknownStateError", "UnreadableStateError",
           "count_sources", "erase_keys", "lookup", "read_change_feed", "read_function_operator_state",
           "read_keyed_state", "read_keyed_states", "read_spark_operator_state", "read_timers", "register_data_sources",
           "state_metadata"]


#: Former module names -> where each module is in the package's rooms (a former name imports the
#: module and warns, for one release).
MOVED_MODULES = {
    "savepoint_source": "location.savepoints", "source": "location.functions", "records": "location.records",
    "read": "readers.keyed_state", "key_reader": "readers.keyed_states",
    "function_operator_state": "readers.operator_state", "operators": "readers.spark_operator_state",
    "change_feed": "readers.change_feed", "lookup": "readers.lookup", "metadata": "readers.metadata",
    "state_reader": "readers.state_reader", "datasource_classes": "datasource.sources",
    "register": "datasource.register", "transform": "writers.transform",
    "transform_checks": "writers.transform_checks", "bootstrap": "writers.bootstrap",
    "bootstrap_task": "writers.bootstrap_task", "erase": "writers.erase", "surgery": "writers.keyed_state_surgery",
    "surgery_operator_state": "writers.operator_state_surgery", "surgery_spark": "writers.spark_operator_surgery",
}


def _moved_module(fullname: str) -> Optional[str]:
    sub = fullname[len(__name__) + 1:] if fullname.startswith(__name__ + ".") else None
    return f"{__name__}.{MOVED_MODULES[sub]}" if sub in MOVED_MODULES else None


alias_modules(_moved_module)

#: Former public names -> their names today (kept for one release; the old name warns).
_RENAMED = {"read_operator_state": "read_spark_operator_state"}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        warn_renamed(f"spark_state.state_data.{name}", _RENAMED[name])
        return globals()[_RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

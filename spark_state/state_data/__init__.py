"""State as data: a query's state read outside the query.

It holds: the state of keyed functions as batch DataFrames (:mod:`.read`, :mod:`.change_feed`,
:mod:`.function_operator_state`; every state of a key in one pass, :mod:`.key_reader`), the same
as a Spark data source (:mod:`.datasource`, :mod:`.register`), what state there is
(:mod:`.metadata`), point lookups
(:mod:`.lookup`, ``spark-state get``), erasure of keys from every state (:mod:`.erase`,
``spark-state erase``), bootstrap savepoints computed from history (:mod:`.bootstrap`) and
savepoints transformed by DataFrame jobs (:mod:`.transform`)::

    from spark_state.state_data import StateLookup, StateReader, erase_keys, lookup, read_keyed_state
    read_keyed_state(spark, "/ckpt", "counts").where("value > 10").show()
    StateReader(spark, "/ckpt").timers()                 # the path and options given once (:mod:`.state_reader`)
    lookup("/ckpt", "counts", "alice").value
    with StateLookup("/ckpt", function="Sessions") as states:
        states.get("open", ("eu", 42))
    erase_keys("/ckpt", ["alice"])                       # a stopped query

Layering: this package sits over the operations tools (:mod:`spark_state.ops`: finding state
locations, reading committed versions) and the key layout (:mod:`spark_state.keys`); nothing
in the runtime imports it. Errors: :class:`~.errors.StateDataError` and its subclasses.
"""

from __future__ import annotations

from .bootstrap import BootstrapResult, SavepointWriter, count_sources
from .change_feed import read_change_feed
from .erase import ErasureResult, erase_keys
from .function_operator_state import read_function_operator_state
from .errors import BootstrapError, KeyMismatchError, StateDataError, UnknownStateError, UnreadableStateError
from .key_reader import read_keyed_states
from .lookup import LookupResult, StateLookup, lookup
from .metadata import state_metadata
from .operators import read_operator_state
from .read import read_keyed_state, read_timers
from .register import register_data_sources
from .state_reader import StateReader
from .transform import SavepointTransform, TransformResult

__all__ = ["BootstrapError", "BootstrapResult", "ErasureResult", "KeyMismatchError", "LookupResult",
           "SavepointTransform", "SavepointWriter", "StateDataError", "StateLookup", "StateReader", "TransformResult",
           "UnknownStateError", "UnreadableStateError",
           "count_sources", "erase_keys", "lookup", "read_change_feed", "read_function_operator_state",
           "read_keyed_state", "read_keyed_states", "read_operator_state", "read_timers", "register_data_sources",
           "state_metadata"]

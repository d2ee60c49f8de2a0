"""State as data: a query's state read outside the query.

Today: the state of keyed functions as batch DataFrames (:mod:`.read`), point lookups
(:mod:`.lookup`, ``spark-state get``) and erasure of keys from every state (:mod:`.erase`,
``spark-state erase``)::

    from spark_state.processor import StateLookup, erase_keys, lookup, read_keyed_state, read_timers
    read_keyed_state(spark, "/ckpt", "counts").where("value > 10").show()
    lookup("/ckpt", "counts", "alice").value
    with StateLookup("/ckpt", function="Sessions") as states:
        states.get("open", ("eu", 42))
    erase_keys("/ckpt", ["alice"])                       # a stopped query

Layering: this package sits over the operations tools (:mod:`spark_state.ops`: finding state
locations, reading committed versions) and the key layout (:mod:`spark_state.keys`); nothing
in the runtime imports it. Errors: :class:`~.errors.StateDataError` and its subclasses.
"""

from __future__ import annotations

from .erase import ErasureResult, erase_keys
from .errors import KeyMismatchError, StateDataError, UnknownStateError, UnreadableStateError
from .lookup import LookupResult, StateLookup, lookup
from .read import read_keyed_state, read_timers

__all__ = ["ErasureResult", "KeyMismatchError", "LookupResult", "StateDataError", "StateLookup", "UnknownStateError",
           "UnreadableStateError", "erase_keys", "lookup", "read_keyed_state", "read_timers"]

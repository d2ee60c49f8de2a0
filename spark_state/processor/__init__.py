"""State as data: a query's state read outside the query.

Today: point lookups of keyed-function state (:mod:`.lookup`), from Python and the command
line (``spark-state get``)::

    from spark_state.processor import StateLookup, lookup
    lookup("/ckpt", "counts", "alice").value
    with StateLookup("/ckpt", function="Sessions") as states:
        states.get("open", ("eu", 42))

Layering: this package sits over the operations tools (:mod:`spark_state.ops`: finding state
locations, reading committed versions) and the key layout (:mod:`spark_state.keys`); nothing
in the runtime imports it. Errors: :class:`~.errors.StateDataError` and its subclasses.
"""

from __future__ import annotations

from .errors import KeyMismatchError, StateDataError, UnknownStateError, UnreadableStateError
from .lookup import LookupResult, StateLookup, lookup

__all__ = ["KeyMismatchError", "LookupResult", "StateDataError", "StateLookup", "UnknownStateError",
           "UnreadableStateError", "lookup"]

"""Flink-style keyed state on the spark-state engine.

* :mod:`.descriptors` -- ``ValueStateDescriptor`` ... ``AggregatingStateDescriptor``, ``AggregateFunction``.
* :mod:`.serializers` -- typed value codecs; ``PickleSerializer`` only by explicit opt-in.
* :mod:`.keyed_states` -- the state types, scoped to the current key.
* :mod:`.key_context` -- :class:`~.key_context.KeyContext`: the current key, its encoded parts,
  the write-back queue; read by the states and the timer service.
* :mod:`.backend` -- :class:`KeyedStateBackend`: state objects (registered with a key context), TTL cleanup.
* :mod:`.rescale` -- moving key groups (key layouts: :mod:`spark_state.keys.keyed`);
  :mod:`.regroup` -- a rescaled partition's keyed state from the old partitions.
* :mod:`.timers` -- timers of keyed functions, stored per key group under a reserved name.
* :mod:`.schema` -- each state's schema record (pure codec); :mod:`.compatibility` -- the
  verdicts (compatible as is / after migration / incompatible); :mod:`.evolution` -- checking
  and migrating at registration, merging records on rescale; :mod:`.errors` -- their errors.
"""

from __future__ import annotations

from .backend import KeyedStateBackend
from .descriptors import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from .keyed_states import AggregatingState, KeyedState, ListState, MapState, ReducingState, ValueState
from .errors import StateDecodeError, StateSchemaConflictError, StateSchemaError, StateSchemaIncompatibleError
from .rescale import copy_key_groups
from .serializers import PickleSerializer, Serializer, serializer_for

__all__ = [
    "KeyedStateBackend", "StateDescriptor", "ValueStateDescriptor", "ListStateDescriptor",
    "MapStateDescriptor", "ReducingStateDescriptor", "AggregatingStateDescriptor", "AggregateFunction",
    "KeyedState", "ValueState", "ListState", "MapState", "ReducingState", "AggregatingState",
    "copy_key_groups", "Serializer", "PickleSerializer", "serializer_for",
    "StateSchemaError", "StateSchemaIncompatibleError", "StateSchemaConflictError", "StateDecodeError",
]

"""State descriptors: what a piece of state is called, what it holds, and its TTL.

As in Flink, a function declares its state with descriptors and asks the runtime context
for the state objects (``ctx.get_state(ValueStateDescriptor("count", int))``). The name
identifies the state in checkpoints, so keep it stable across restarts; the type decides
the serializer (see :mod:`.serializers`); an optional :class:`~spark_state.ttl.TtlConfig`
makes values (and list elements and map entries, each on its own) expire.

A state's kind, serializer and TTL are recorded with the state the first time it is
registered; a later run whose descriptor differs is judged compatible, migrated, or
refused (see :mod:`.compatibility`). Descriptors pickle (serializers pickle as their
canonical type), so a function may build them in ``__init__`` or as class attributes.
"""

from __future__ import annotations

import abc
from typing import Any, Callable, Generic, Optional, TypeVar

from ..ttl.config import TtlConfig, ttl_or_none
from .serializers import Serializer, describe_type, serializer_for

IN = TypeVar("IN")
ACC = TypeVar("ACC")
OUT = TypeVar("OUT")

#: Longest state name, in UTF-8 bytes (the name is stored in every key with a 1-byte length).
MAX_NAME_BYTES = 255


class AggregateFunction(abc.ABC, Generic[IN, ACC, OUT]):
    """Flink's ``AggregateFunction``: folds inputs into an accumulator.

    ``merge`` combines two accumulators (e.g. partial aggregates); implement it for
    functions whose state may be merged.
    """

    @abc.abstractmethod
    def create_accumulator(self) -> ACC: ...

    @abc.abstractmethod
    def add(self, value: IN, accumulator: ACC) -> ACC: ...

    @abc.abstractmethod
    def get_result(self, accumulator: ACC) -> OUT: ...

    def merge(self, a: ACC, b: ACC) -> ACC:
        raise NotImplementedError(f"{type(self).__name__} does not implement merge()")


class StateDescriptor:
    """Base of all descriptors: a name, a serializer, an optional TTL."""

    kind = "state"

    def __init__(self, name: str, serializer: Serializer, ttl: Optional[TtlConfig] = None) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a state name must be a non-empty string, got {name!r}")
        self.name = name
        self.name_bytes = name.encode("utf-8")
        if len(self.name_bytes) > MAX_NAME_BYTES:
            raise ValueError(f"state name {name!r} is longer than {MAX_NAME_BYTES} bytes")
        self.serializer = serializer
        #: The value type as declared (for messages; compatibility compares serializers).
        self.declared_type = describe_type(serializer)
        self.ttl: Optional[TtlConfig] = None
        if ttl is not None:
            self.enable_time_to_live(ttl)

    def enable_time_to_live(self, ttl: TtlConfig) -> "StateDescriptor":
        """Give this state a TTL (Flink's ``enableTimeToLive``); returns the descriptor."""
        if not isinstance(ttl, TtlConfig):
            raise TypeError(f"expected a TtlConfig (TtlConfig.builder(...).build()), got {ttl!r}")
        self.ttl = ttl_or_none(ttl)
        return self

    def __repr__(self) -> str:
        ttl = f", {self.ttl.describe()}" if self.ttl else ""
        return f"{type(self).__name__}({self.name!r}{ttl})"


class ValueStateDescriptor(StateDescriptor):
    """A single value per key. ``default`` is returned while no value is set."""

    kind = "value"

    def __init__(self, name: str, value_type: Any, default: Any = None, ttl: Optional[TtlConfig] = None) -> None:
        super().__init__(name, serializer_for(value_type), ttl)
        self.declared_type = describe_type(value_type)
        self.default = default


class ListStateDescriptor(StateDescriptor):
    """A list of elements per key; with TTL every element expires on its own."""

    kind = "list"

    def __init__(self, name: str, element_type: Any, ttl: Optional[TtlConfig] = None) -> None:
        super().__init__(name, serializer_for(element_type), ttl)
        self.declared_type = describe_type(element_type)


class MapStateDescriptor(StateDescriptor):
    """A map per key; with TTL every entry expires on its own. Iteration is in the order
    of the serialized map keys (numeric for non-negative integers, lexicographic for strings)."""

    kind = "map"

    def __init__(self, name: str, key_type: Any, value_type: Any, ttl: Optional[TtlConfig] = None) -> None:
        super().__init__(name, serializer_for(value_type), ttl)
        self.declared_type = describe_type(value_type)
        self.key_serializer = serializer_for(key_type)
        self.declared_key_type = describe_type(key_type)


class ReducingStateDescriptor(StateDescriptor):
    """A value per key that ``add`` folds new values into with ``reduce_function(old, new)``."""

    kind = "reducing"

    def __init__(self, name: str, reduce_function: Callable[[Any, Any], Any], value_type: Any,
                 ttl: Optional[TtlConfig] = None) -> None:
        if not callable(reduce_function):
            raise TypeError(f"reduce_function must be callable, got {reduce_function!r}")
        super().__init__(name, serializer_for(value_type), ttl)
        self.declared_type = describe_type(value_type)
        self.reduce_function = reduce_function


class AggregatingStateDescriptor(StateDescriptor):
    """An accumulator per key, driven by an :class:`AggregateFunction`; the stored type is
    the accumulator's."""

    kind = "aggregating"

    def __init__(self, name: str, aggregate_function: AggregateFunction, accumulator_type: Any,
                 ttl: Optional[TtlConfig] = None) -> None:
        if not isinstance(aggregate_function, AggregateFunction):
            raise TypeError(f"aggregate_function must be an AggregateFunction, got {aggregate_function!r}")
        super().__init__(name, serializer_for(accumulator_type), ttl)
        self.declared_type = describe_type(accumulator_type)
        self.aggregate_function = aggregate_function

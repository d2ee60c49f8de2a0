"""A keyed state's descriptor rebuilt from its schema record (:mod:`spark_state.state.schema`), for
a writer that is given no Python descriptor (the data source's, :mod:`..datasource.writer`).

The record holds what a replacement needs: the kind, the value type (and a map's key type) as
the serializer's canonical Spark type, and the TTL. The descriptor built from it writes the same
bytes and the same record (up to the declared type's spelling, which is for messages), so the
restoring query's own descriptor is compatible with what is written exactly when it is
compatible with the source savepoint. A replacement never folds values: after ``clear`` a
reducing state's ``add`` and an aggregating state's ``merge_accumulator`` store the value as
given, so their functions are placeholders that refuse to be called. States of a pickle or
custom serializer are not rebuilt (the record names the serializer, it does not hold it).
"""

from __future__ import annotations

from typing import Any, Optional

from ...state import (
    AggregateFunction,
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from ...state.descriptors import StateDescriptor
from ...state.schema import StateSchema, describe_snapshot
from ...ttl import TtlConfig
from ..errors import StateDataError

__all__ = ["descriptor_of_record"]


def descriptor_of_record(name: str, record: StateSchema) -> StateDescriptor:
    """The descriptor of keyed state ``name`` that ``record`` describes (see the module docstring).

    :raises StateDataError: values (or map keys) of a pickle or custom serializer, or a kind that
        is not a keyed state's."""
    value = _spark_type(name, record.value)
    ttl = TtlConfig.builder(record.ttl_ms).build() if record.ttl_ms is not None else None
    if record.kind == "value":
        return ValueStateDescriptor(name, value, ttl=ttl)
    if record.kind == "list":
        return ListStateDescriptor(name, value, ttl=ttl)
    if record.kind == "map":
        key = _spark_type(name, record.key or {})
        return MapStateDescriptor(name, key, value, ttl=ttl)
    if record.kind == "reducing":
        return ReducingStateDescriptor(name, _not_folded, value, ttl=ttl)
    if record.kind == "aggregating":
        return AggregatingStateDescriptor(name, _NotAggregated(), value, ttl=ttl)
    raise StateDataError(f"state {name!r} is recorded as {record.describe()}, not a keyed state")


def _spark_type(name: str, snapshot: dict) -> str:
    """The canonical Spark type of a serializer snapshot of the ``spark`` codec."""
    found: Optional[str] = snapshot.get("type") if snapshot.get("codec") == "spark" else None
    if not found:
        raise StateDataError(
            f"state {name!r} holds {describe_snapshot(snapshot)}: its descriptor cannot be rebuilt from the "
            "savepoint's schema record; replace it with SavepointTransform.replace_keyed_state and the descriptor")
    return found


def _not_folded(a: Any, b: Any) -> Any:
    raise StateDataError("a replacement stores each value as given: the reduce function is not called")


class _NotAggregated(AggregateFunction):
    """The aggregate function of a rebuilt aggregating descriptor: a replacement merges each
    accumulator into a cleared state, which stores it as given, so no method is called."""

    def create_accumulator(self) -> Any:
        raise StateDataError("a replacement stores each accumulator as given: the aggregate function is not called")

    def add(self, value: Any, accumulator: Any) -> Any:
        return self.create_accumulator()

    def get_result(self, accumulator: Any) -> Any:
        return self.create_accumulator()

"""The user-facing function classes and the contexts the runtime hands them.

Keyed::

    class CountWords(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        def process_element(self, row, ctx):
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            yield (ctx.current_key, n)

Non-keyed, with operator state::

    class Buffering(CheckpointedFunction):
        def initialize_state(self, ctx):
            self.buffer = ctx.get_list_state(ListStateDescriptor("buffer", StringType()))
        def process_element(self, row, ctx):
            self.buffer.add(row.word)
            return ()
        def snapshot_state(self, ctx):
            pass  # self.buffer is written back after this call

Lifecycle, per partition and micro-batch (one Spark task): the function object is
deserialized, ``open(ctx)`` (keyed) or ``initialize_state(ctx)`` then ``open(ctx)``
(checkpointed) runs, then ``process_element`` for every row of the partition, then
``snapshot_state(ctx)`` (checkpointed), ``close()``, and the state is committed.
Instance attributes therefore last one batch; everything that must survive goes in state.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from ..state import (
    AggregatingState,
    AggregatingStateDescriptor,
    KeyedStateBackend,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from .operator_state import BroadcastState, OperatorListState, OperatorStateStore


class KeyedProcessFunction:
    """A function over a keyed stream, with keyed state (Flink's ``KeyedProcessFunction``).

    Override :meth:`process_element`; :meth:`open` is the place to create state objects.
    """

    def open(self, ctx: "KeyedContext") -> None:
        """Called once per partition and batch before the first element."""

    def process_element(self, row: Any, ctx: "KeyedContext") -> Optional[Iterable[Any]]:
        """Handle one input row; yield (or return an iterable of) output rows.

        ``row`` is a namedtuple of the input columns; ``ctx.current_key`` is its key and every
        state object acts on that key's state. Rows of one key arrive in input order.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement process_element(row, ctx)")

    def close(self) -> None:
        """Called after the last element of the partition's batch (before the commit)."""


class CheckpointedFunction:
    """A non-keyed function with operator state (Flink's ``CheckpointedFunction``)."""

    def initialize_state(self, ctx: "OperatorContext") -> None:
        """Register operator state: ``ctx.get_list_state``, ``get_union_list_state``,
        ``get_broadcast_state``. ``ctx.is_restored`` tells whether state existed before."""

    def open(self, ctx: "OperatorContext") -> None:
        """Called after :meth:`initialize_state`, before the first element."""

    def process_element(self, row: Any, ctx: "OperatorContext") -> Optional[Iterable[Any]]:
        """Handle one input row; yield (or return an iterable of) output rows."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_element(row, ctx)")

    def snapshot_state(self, ctx: "OperatorContext") -> None:
        """Called when the partition's batch is done, before the state is committed: bring
        the registered states up to date here. ``ctx.checkpoint_id`` is the version that
        the commit will create."""

    def close(self) -> None:
        """Called after :meth:`snapshot_state`."""


class _BaseContext:
    """What every context tells: where and when the function runs."""

    def __init__(self, batch_id: int, partition_id: int, parallelism: int, state_location: str) -> None:
        self.batch_id = batch_id
        self.partition_id = partition_id
        self.parallelism = parallelism
        self.state_location = state_location

    @property
    def checkpoint_id(self) -> int:
        """The state version this batch commits (``batch_id + 1``)."""
        return self.batch_id + 1


class KeyedContext(_BaseContext):
    """Runtime context of a :class:`KeyedProcessFunction`; state is scoped to ``current_key``."""

    def __init__(self, backend: KeyedStateBackend, batch_id: int, partition_id: int, parallelism: int,
                 max_parallelism: int, state_location: str) -> None:
        super().__init__(batch_id, partition_id, parallelism, state_location)
        self._backend = backend
        self.max_parallelism = max_parallelism
        #: The key of the element being processed (a tuple for several key columns).
        self.current_key: Any = None
        #: Its key group.
        self.current_key_group: int = -1

    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        return self._backend.get_state(descriptor)

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        return self._backend.get_list_state(descriptor)

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState:
        return self._backend.get_map_state(descriptor)

    def get_reducing_state(self, descriptor: ReducingStateDescriptor) -> ReducingState:
        return self._backend.get_reducing_state(descriptor)

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState:
        return self._backend.get_aggregating_state(descriptor)


class OperatorContext(_BaseContext):
    """Runtime context of a :class:`CheckpointedFunction` (initialization, elements, snapshot)."""

    def __init__(self, states: OperatorStateStore, batch_id: int, partition_id: int, parallelism: int,
                 is_restored: bool, state_location: str) -> None:
        super().__init__(batch_id, partition_id, parallelism, state_location)
        self._states = states
        #: True if state from an earlier batch was restored (Flink's ``isRestored()``).
        self.is_restored = is_restored

    def get_list_state(self, descriptor: ListStateDescriptor) -> OperatorListState:
        """Even-split list state: on a parallelism change its elements are dealt out evenly."""
        return self._states.get_list_state(descriptor)

    def get_union_list_state(self, descriptor: ListStateDescriptor) -> OperatorListState:
        """Union list state: on a parallelism change every partition gets all elements."""
        return self._states.get_union_list_state(descriptor)

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        """Broadcast (map) state: on a parallelism change partition i gets old i % m's copy."""
        return self._states.get_broadcast_state(descriptor)

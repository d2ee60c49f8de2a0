"""The user-facing function classes and the contexts the runtime hands them.

Keyed::

    class CountWords(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", LongType()))
        def process_element(self, row, ctx):
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            yield (ctx.current_key, n)

docs/keyed-functions.md has the other shapes (non-keyed with operator state), docs/time.md
timers, event time, two inputs and broadcast, and docs/performance-keyed.md the vectorized
``process_elements``.

Lifecycle, per partition and micro-batch (one Spark task): the function object is
deserialized; ``initialize_state(ctx)`` runs (checkpointed functions, and keyed functions that
define it), then ``open(ctx)``; due timers fire (``on_timer``); broadcast rows are processed
(``process_broadcast_element``); then ``process_element`` (or ``process_element1/2``) runs for
every row of the partition, then ``snapshot_state(ctx)`` (if defined), ``close()``, and the
state is committed. Instance attributes therefore last one batch; everything that must
survive goes in state.
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
from .errors import ProcessDefinitionError
from .operator_state import BroadcastState, OperatorListState, OperatorStateStore
from .timer_service import TimeDomain, TimerService


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
        raise NotImplementedError(
            f"{type(self).__name__} must implement process_element(row, ctx) or process_elements(rows, ctx)")

    def process_elements(self, rows: list, ctx: "KeyedContext") -> Iterable[Any]:
        """The vectorized form: handle several rows of one key at once; yield (or return an
        iterable of) output rows. Define it *instead of* :meth:`process_element`.

        ``rows`` is a non-empty list of namedtuples, all of key ``ctx.current_key``, in input
        order; state objects act on that key. A key's rows of one micro-batch usually come in
        one call, but may be split over several (the runtime groups up to ``GROUP_ROWS`` input
        rows at a time), so keep running values in state, not in the call. With event time,
        timers or operator state the keyed loop reads its input by side
        and calls this with one row at a time (``ctx.timestamp()`` is that row's).
        """
        for row in rows:
            produced = self.process_element(row, ctx)
            if produced is not None:
                yield from produced

    def on_timer(self, timestamp: int, ctx: "KeyedContext") -> Optional[Iterable[Any]]:
        """A timer of ``ctx.current_key`` fired (``ctx.time_domain()`` says which kind);
        read and write the key's state and yield output rows, as in :meth:`process_element`.
        Not defining it means the function registers no timers."""
        return None

    # Keyed functions may keep operator state too (Flink's CheckpointedFunction on a keyed
    # stream): define initialize_state(ctx) and snapshot_state(ctx) as on CheckpointedFunction;
    # ctx there is an OperatorContext.

    def close(self) -> None:
        """Called after the last element of the partition's batch (before the commit)."""


class KeyedCoProcessFunction:
    """A function over two keyed streams connected by key (Flink's ``KeyedCoProcessFunction``,
    ``a.connect(b).keyBy(...).process(...)``): both inputs share each key's state and timers.
    Run it with :func:`~spark_state.process.keyed_co_process`. Like a
    :class:`KeyedProcessFunction`, it may also define ``initialize_state(ctx)`` /
    ``snapshot_state(ctx)`` to keep operator state."""

    def open(self, ctx: "KeyedContext") -> None:
        """Called once per partition and batch before the first element."""

    def process_element1(self, row: Any, ctx: "KeyedContext") -> Optional[Iterable[Any]]:
        """Handle a row of the first (left) input."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_element1(row, ctx)")

    def process_element2(self, row: Any, ctx: "KeyedContext") -> Optional[Iterable[Any]]:
        """Handle a row of the second (right) input."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_element2(row, ctx)")

    def on_timer(self, timestamp: int, ctx: "KeyedContext") -> Optional[Iterable[Any]]:
        """A timer of ``ctx.current_key`` fired (as in :class:`KeyedProcessFunction`)."""
        return None

    def close(self) -> None:
        """Called after the last element of the partition's batch (before the commit)."""


class KeyedBroadcastProcessFunction:
    """A keyed stream connected to a broadcast stream (Flink's
    ``KeyedBroadcastProcessFunction``). Every partition receives every broadcast row, in the
    same order, before the keyed rows of the same batch. Run it with
    :func:`~spark_state.process.keyed_broadcast_process`. It may also define
    ``initialize_state(ctx)`` / ``snapshot_state(ctx)`` to keep operator state."""

    def open(self, ctx: "KeyedContext") -> None:
        """Called once per partition and batch before the first element."""

    def process_broadcast_element(self, row: Any, ctx: "BroadcastContext") -> Optional[Iterable[Any]]:
        """Handle a broadcast row: ``ctx.get_broadcast_state(descriptor)`` is writable here.
        Write the state deterministically from the row alone: every partition applies the
        same rows to its own copy."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_broadcast_element(row, ctx)")

    def process_element(self, row: Any, ctx: "KeyedContext") -> Optional[Iterable[Any]]:
        """Handle a keyed row; ``ctx.get_broadcast_state(descriptor)`` is read-only here."""
        raise NotImplementedError(f"{type(self).__name__} must implement process_element(row, ctx)")

    def on_timer(self, timestamp: int, ctx: "KeyedContext") -> Optional[Iterable[Any]]:
        """A timer of ``ctx.current_key`` fired; broadcast state is read-only."""
        return None

    def close(self) -> None:
        """Called after the last element of the partition's batch (before the commit)."""


def defines(function: Any, method: str) -> bool:
    """Whether ``function``'s class overrides ``method`` of the spark-state base class."""
    for base in (KeyedProcessFunction, KeyedCoProcessFunction, KeyedBroadcastProcessFunction):
        if isinstance(function, base):
            return getattr(type(function), method, None) is not getattr(base, method, None)
    return hasattr(type(function), method)


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
    """Runtime context of a keyed function; state and timers are scoped to ``current_key``."""

    def __init__(self, backend: KeyedStateBackend, batch_id: int, partition_id: int, parallelism: int,
                 max_parallelism: int, state_location: str, timers: Optional[TimerService] = None,
                 broadcast: Optional[dict[str, BroadcastState]] = None, function_name: str = "the function") -> None:
        super().__init__(batch_id, partition_id, parallelism, state_location)
        self._backend = backend
        self.max_parallelism = max_parallelism
        #: The key of the element (or firing timer) being processed (a tuple for several key columns).
        self.current_key: Any = None
        #: Its key group.
        self.current_key_group: int = -1
        self._timers = timers
        self._broadcast = broadcast or {}
        self._function = function_name
        self._timestamp: Optional[int] = None
        self._late = False
        self._domain: Optional[TimeDomain] = None

    # ------------------------------------------------------------------ time
    def timer_service(self) -> TimerService:
        """Register and delete the current key's timers; read the batch's watermark and
        processing time."""
        if self._timers is None:
            raise ProcessDefinitionError(
                f"{self._function} uses ctx.timer_service(), but defines no on_timer(timestamp, ctx) and its "
                "input declares no event time: define on_timer to use timers, or pass "
                "df.withWatermark(column, delay) for event time")
        return self._timers

    def timestamp(self) -> Optional[int]:
        """The current row's event time (epoch ms; None without event time or for a null
        value); in ``on_timer``, the timer's timestamp."""
        return self._timestamp

    def is_late(self) -> bool:
        """Whether the current row is late: its event time is ``<=`` the batch's watermark
        (rows are delivered late only with ``late_rows="deliver"``)."""
        return self._late

    def time_domain(self) -> Optional[TimeDomain]:
        """In ``on_timer``: the firing timer's domain; None elsewhere."""
        return self._domain

    def _timer_firing(self, domain: Optional[int], ts: Optional[int]) -> None:
        self._domain = None if domain is None else TimeDomain(domain)
        self._timestamp = ts
        self._late = False

    # ------------------------------------------------------------------ broadcast
    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> "ReadOnlyBroadcastState":
        """The broadcast state named by ``descriptor`` (read-only for keyed rows and timers)."""
        state = self._broadcast.get(descriptor.name)
        if state is None:
            raise ProcessDefinitionError(
                f"{self._function} reads broadcast state {descriptor.name!r}, which is not among the "
                f"operator's broadcast_states {sorted(self._broadcast)}")
        return ReadOnlyBroadcastState(state)

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


class ReadOnlyBroadcastState:
    """A read-only view of a :class:`BroadcastState` (keyed rows and timers may not change
    rules: every partition must hold the same copy)."""

    def __init__(self, state: BroadcastState) -> None:
        self._state = state

    @property
    def name(self) -> str:
        return self._state.name

    def get(self, key: Any) -> Any:
        return self._state.get(key)

    def contains(self, key: Any) -> bool:
        return self._state.contains(key)

    __contains__ = contains

    def items(self) -> list[tuple[Any, Any]]:
        return self._state.items()

    def keys(self) -> list[Any]:
        return self._state.keys()

    def values(self) -> list[Any]:
        return self._state.values()

    def is_empty(self) -> bool:
        return self._state.is_empty()

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise ProcessDefinitionError(
            f"broadcast state {self.name!r} is read-only in process_element and on_timer; change it in "
            "process_broadcast_element, which every partition runs with the same rows")

    put = put_all = remove = clear = _refuse


class BroadcastContext(_BaseContext):
    """Context of ``process_broadcast_element``: broadcast state is writable; no current key."""

    def __init__(self, broadcast: dict[str, BroadcastState], batch_id: int, partition_id: int,
                 parallelism: int, state_location: str, function_name: str) -> None:
        super().__init__(batch_id, partition_id, parallelism, state_location)
        self._broadcast = broadcast
        self._function = function_name
        self._timestamp: Optional[int] = None

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> BroadcastState:
        state = self._broadcast.get(descriptor.name)
        if state is None:
            raise ProcessDefinitionError(
                f"{self._function} writes broadcast state {descriptor.name!r}, which is not among the "
                f"operator's broadcast_states {sorted(self._broadcast)}")
        return state

    def timestamp(self) -> Optional[int]:
        """The broadcast row's event time, if the broadcast input declares one."""
        return self._timestamp


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

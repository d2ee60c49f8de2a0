"""Task side: the optional phases of the keyed loop (:mod:`.keyed_loop`).

Each phase is a small object whose hooks the loop calls once per task or once per input
part (one side's rows of one Arrow batch) -- never per row:

* :class:`TimePhase` -- on every plan read by side: the batch's clock (:mod:`.clock`) and the
  timer service; due timers fire after ``open`` (when the function defines ``on_timer``);
  with event time, the batch's watermark (late rows) and the largest event time per side,
  recorded before the commit;
* :class:`OperatorStatePhase` -- operator state of a keyed function (under the 0xFE keyspace)
  and the broadcast states: ``initialize_state`` before ``open``, ``snapshot_state`` before
  ``close``, the write-back after it;
* :class:`BroadcastPhase` -- broadcast rows are collected and keyed parts deferred until the
  input is read; then the broadcast rows are applied in their order and the keyed parts run.

Broadcast rows reach every partition (their rows are replicated to every route). Spark gives
a micro-batch's rows no order, so "the same order everywhere" is defined by content: rows
sort by the ``broadcast_order`` columns (None first), then by the ``repr`` of the whole row,
which is the same in every partition, attempt and re-run of the batch.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc

from ..partitioning.keygroups import KeyGroupRange
from ..state.key_context import KeyContext
from ..state.timers import EVENT_TIME, PROCESSING_TIME
from .clock import SPARK, record_max_event_time, resolve
from .functions import BroadcastContext, KeyedContext, OperatorContext
from .keycodec import key_decoder
from .keyed_input import SideLayout, side_rows
from .operator_state import KEYED_OPERATOR_PREFIX, BroadcastState, OperatorStateStore
from .observation import max_event_field
from .plan import BroadcastSpec, ProcessPlan
from .stores import PartitionStore
from .timer_service import TimerService


class TimePhase:
    """The batch's clock, the timer service and the event-time bookkeeping of one task."""

    def __init__(self, plan: ProcessPlan, task: Any, ps: PartitionStore, keys: KeyContext) -> None:
        self._plan = plan
        self._task = task
        self._delays = plan.event_delays
        self._drop_late = plan.options.late_rows == "drop"
        storage, batch_id, delays, offsets = task.storage, task.batch_id, self._delays, task.offset_log
        # A bootstrap task registers timers for the query that restores its state, which
        # defines on_timer and reads event time; it fires none itself (phases.timers is off).
        bootstrap = plan.phases.bootstrap
        self.timers = TimerService(ps.store, keys, lambda: resolve(storage, batch_id, delays, spark=offsets),
                                   event_time=bool(delays) or bootstrap, fires=plan.phases.timers or bootstrap,
                                   function_name=plan.function_name)
        #: the batch's watermark (after :meth:`start`; None without event time)
        self.watermark: Optional[int] = None
        self._maxima: dict[int, int] = {}
        #: rows dropped as late by this task
        self.late_dropped = 0
        self._next_timers: tuple[Optional[int], Optional[int]] = (None, None)

    def start(self, own: KeyGroupRange, ctx: KeyedContext) -> Iterator[Iterable[Any]]:
        """After ``open``: read the batch's watermark, fire the due timers of ``own``; yields
        what each ``on_timer`` call returned."""
        if self._delays:
            self.watermark = self.timers.current_watermark()
        if self._plan.phases.timers:
            decode = key_decoder(list(self._plan.key_fields))
            yield from self.timers.fire_due(range(own.start, own.end + 1), self._plan.function.on_timer, ctx, decode)

    def observe(self, tag: int, ts_all: Optional[pa.Array]) -> None:
        """Note the largest event time of one side's part (``ts_all``: epoch ms, or None)."""
        if ts_all is None:
            return
        if self._drop_late and self.watermark is not None:
            self.late_dropped += pc.sum(pc.less_equal(ts_all, self.watermark)).as_py() or 0
        m = pc.max(ts_all).as_py()
        if m is not None and (tag not in self._maxima or m > self._maxima[tag]):
            self._maxima[tag] = m

    def before_commit(self, own: KeyGroupRange) -> None:
        """Record the batch's largest event time per side (the next batch's watermark) and
        find the earliest pending timers of ``own`` (for the observation)."""
        task = self._task
        for tag, m in self._maxima.items():
            record_max_event_time(task.storage, task.batch_id, tag, self._plan.parallelism, task.partition, m)
        if self._plan.phases.timers:
            groups = range(own.start, own.end + 1)
            event = self.timers.earliest(groups, EVENT_TIME) if self._delays else None
            self._next_timers = (event, self.timers.earliest(groups, PROCESSING_TIME))

    def observation(self) -> dict[str, Optional[int]]:
        """This task's time figures (:mod:`.observation`): watermark, timers fired, late rows,
        the earliest pending timers, whether the batch's time was Spark's and, per event-time side,
        the largest event time so far."""
        read = self.timers.time_read
        values: dict[str, Optional[int]] = {
            "spark_time": None if read is None else read.source == SPARK,
            "watermark_ms": self.watermark, "timers_fired": self.timers.fired,
            "late_rows_dropped": self.late_dropped,
            "next_event_timer_ms": self._next_timers[0], "next_processing_timer_ms": self._next_timers[1],
        }
        if self._delays:
            so_far = self.timers.batch_time().max_event_ms
            for side in self._delays:
                seen = [v for v in (so_far.get(side), self._maxima.get(int(side))) if v is not None]
                values[max_event_field(side)] = max(seen) if seen else None
        return values


class OperatorStatePhase:
    """Operator state of a keyed function and its broadcast states, in one keyspace."""

    def __init__(self, plan: ProcessPlan, task: Any, ps: PartitionStore) -> None:
        self._plan = plan
        self.store = OperatorStateStore(ps.store, KEYED_OPERATOR_PREFIX)
        self._ctx: Optional[OperatorContext] = None
        if plan.phases.operator_state:
            self._ctx = OperatorContext(self.store, task.batch_id, task.partition, plan.parallelism,
                                        task.batch_id > 0, task.url)
        spec = plan.phases.broadcast
        #: broadcast state name -> state (registered before ``open``)
        self.broadcast: dict[str, BroadcastState] = (
            {d.name: self.store.get_broadcast_state(d) for d in spec.states} if spec is not None else {})

    def before_open(self) -> None:
        self._call("initialize_state")

    def before_close(self) -> None:
        self._call("snapshot_state")

    def _call(self, hook: str) -> None:
        """The function's ``hook(ctx)``, if it defines it: a keyed function keeps operator state
        with either hook alone (both are optional, as in Flink's ``CheckpointedFunction`` use)."""
        method = getattr(self._plan.function, hook, None)
        if self._ctx is not None and method is not None:
            method(self._ctx)

    def after_close(self) -> None:
        """Write operator and broadcast state back to the store."""
        self.store.flush()


class BroadcastPhase:
    """Broadcast rows first, in their order; keyed parts of the batch after them."""

    def __init__(self, spec: BroadcastSpec, states: dict[str, BroadcastState], plan: ProcessPlan, task: Any) -> None:
        self._order = spec.order
        self._ctx = BroadcastContext(states, task.batch_id, task.partition, plan.parallelism, task.url,
                                     plan.function_name)
        self._rows: list[tuple[Any, Any, Optional[int]]] = []
        #: keyed parts held until the broadcast rows are applied: (side, part, event times)
        self.deferred: list[tuple[int, pa.RecordBatch, Optional[pa.Array]]] = []

    def collect(self, part: pa.RecordBatch, layout: SideLayout, ts_all: Optional[pa.Array]) -> None:
        """Keep a part of broadcast rows with its sort keys."""
        rows, _ = side_rows(part, layout)
        ts = ts_all.to_pylist() if ts_all is not None else [None] * len(rows)
        positions = [layout.side.names.index(c) for c in self._order]
        into = self._rows
        for row, t in zip(rows, ts):
            key = (tuple(_sort_value(row[p]) for p in positions), repr(tuple(row)))
            into.append((key, row, t))

    def apply(self, process_broadcast_element: Any) -> Iterator[Iterable[Any]]:
        """Run ``process_broadcast_element`` over the collected rows in their order; yields
        what each call returned."""
        ctx = self._ctx
        self._rows.sort(key=lambda r: r[0])
        for _, row, ts in self._rows:
            ctx._timestamp = ts
            produced = process_broadcast_element(row, ctx)
            if produced is not None:
                yield produced


def _sort_value(v: Any) -> tuple:
    return (v is not None, v)

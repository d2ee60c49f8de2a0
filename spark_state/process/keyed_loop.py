"""Task side: the keyed loop -- one partition of one batch of a keyed operator.

One loop for every keyed entry point; the plan (:mod:`.plan`) enables its optional phases
(:mod:`.phases`), each called once per task or per input part, never per row. In order:

1. the phases' setup: operator and broadcast states are registered, ``initialize_state``
   runs (operator state); then ``open(ctx)``;
2. time: the batch's watermark is read and due timers fire (event time, then processing time);
3. the input, grouped by key (:mod:`.keyed_input`). Per key group the loop switches the
   current key once (:class:`~spark_state.state.key_context.KeyContext`) and calls
   ``process_element(row, ctx)`` per row -- or ``process_elements(rows, ctx)`` once per group.
   Without sides (one input, no phases) the input is read plainly: batches gathered up to
   ``GROUP_ROWS`` rows and grouped by an Arrow sort. Read by side, each Arrow batch is split
   by side; late rows are dropped or flagged, each row's event time is set on the context,
   the vectorized form gets one row per call (so ``ctx.timestamp()`` is that row's), and the
   second keyed input goes to ``process_element2``. With a broadcast input the broadcast rows
   are collected and the keyed parts deferred until the whole input is read; the broadcast
   rows are applied first, in their order, then the keyed parts run;
4. ``snapshot_state``, ``close``, the write-back of operator state, the write-back of value
   states and TTL cleanup (``before_commit``), the record of the batch's largest event time
   per side, the earliest pending timers, and the commit of version ``B + 1``;
5. the task's observation row (:mod:`.observation`): its store's and time figures.

Any exception discards the pending writes and closes the store before it propagates, so
Spark's retry of the task starts again from version ``B``: state is exactly-once under retries.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat
from typing import Any, Callable, Iterator, Optional

import pyarrow as pa

from ..partitioning.keygroups import KeyGroupRange
from ..state import KeyedStateBackend
from ..state.key_context import KeyContext
from ..storage import CheckpointStorage
from .arrow_io import OutputWriter
from .errors import misrouted_row
from .functions import KeyedContext, defines
from .inputs import BROADCAST_SIDE, LEFT, RIGHT
from .keycodec import key_encoder
from .keyed_input import (GROUP_ROWS, BatchLayout, SideLayout, event_millis, gathered, group_by_key, group_side_rows,
                          split_sides)
from .phases import BroadcastPhase, OperatorStatePhase, TimePhase
from .plan import ProcessPlan
from .observation import ObservationWriter
from .spark_time import SparkOffsetLog
from .stores import PartitionStore, store_observation, task_output


@dataclass
class LoopTask:
    """What the keyed loop and its phases read of a task: the batch, the partition, the state
    location (URL and storage) whose clock and event-time files the time phase reads and writes,
    and the query's offset log, where the batch's time is Spark's (:mod:`.spark_time`). A
    streaming task (:mod:`.runner`) adds its query run; an offline run (:mod:`.offline`) is
    batch 0 of a scratch location, without an offset log."""

    batch_id: int
    partition: int
    url: str
    storage: CheckpointStorage
    offset_log: Optional[SparkOffsetLog]


def keyed_loop(plan: ProcessPlan, task: LoopTask, ps: PartitionStore, own: KeyGroupRange,
               batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The keyed loop over ``batches`` (see the module docstring); ``ps`` is the partition's
    store at the batch's version, ``own`` the key groups the partition owns."""
    out = OutputWriter(plan.output_schema, plan.function_name, plan.task_schema)
    observed: dict[str, Any] = {}

    def observation() -> pa.RecordBatch:
        return ObservationWriter(plan.output_schema, plan.event_delays).batch(observed)

    return task_output(ps, out, _run(plan, task, ps, own, batches, out, observed), observation)


def _run(plan: ProcessPlan, task: Any, ps: PartitionStore, own: KeyGroupRange, batches: Iterator[pa.RecordBatch],
         out: OutputWriter, observed: dict[str, Any]) -> Iterator[pa.RecordBatch]:
    fn = plan.function
    phases = plan.phases
    by_side = bool(plan.sides)
    keys = KeyContext(write_back=True)
    backend = KeyedStateBackend(ps.store, key_context=keys)
    # A bootstrap task has the timer service also on the plain input (its rows register timers).
    time = TimePhase(plan, task, ps, keys) if by_side or phases.bootstrap else None
    opstate = OperatorStatePhase(plan, task, ps) if phases.operator_keyspace else None
    broadcast = (BroadcastPhase(phases.broadcast, opstate.broadcast, plan, task)
                 if phases.broadcast is not None and opstate is not None else None)
    ctx = KeyedContext(backend, task.batch_id, task.partition, plan.parallelism, plan.max_parallelism or 0,
                       task.url, timers=time.timers if time is not None else None,
                       broadcast=opstate.broadcast if opstate is not None else None,
                       function_name=plan.function_name)
    groups = _KeyGroups(plan, ctx, keys, own, task.partition, time)
    if opstate is not None:
        opstate.before_open()
    fn.open(ctx)
    if time is not None:
        for produced in time.start(own, ctx):
            out.rows.extend(produced)
            if out.full:
                yield out.flush()

    if not by_side:
        # the plain input: one untagged keyed input, no phases (but a bootstrap's timer service)
        if time is not None:
            time.timers.keyed = True
        layout: Optional[BatchLayout] = None
        key_names = [f.name for f in plan.key_fields]
        run = groups.run
        for chunk in gathered(batches, GROUP_ROWS):
            if layout is None:
                layout = BatchLayout(chunk[0].schema, key_names)
            run(group_by_key(chunk, layout), out.rows.extend)
            if out.full:
                yield out.flush()
        if time is not None:
            time.timers.keyed = False
    else:
        assert time is not None
        by_tag = {s.tag: s for s in plan.sides}
        layouts: dict[int, SideLayout] = {}
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for tag, part in split_sides(batch, by_tag):
                layout_s = layouts.get(tag)
                if layout_s is None:
                    layout_s = layouts[tag] = SideLayout(by_tag[tag], part.schema)
                ts_all = event_millis(part.column(layout_s.ts_idx)) if layout_s.ts_idx >= 0 else None
                time.observe(tag, ts_all)
                if broadcast is not None:
                    if tag == BROADCAST_SIDE:
                        broadcast.collect(part, layout_s, ts_all)
                    else:
                        broadcast.deferred.append((tag, part, ts_all))
                    continue
                groups.run_side(tag, part, layout_s, ts_all, out.rows.extend)
                if out.full:
                    yield out.flush()
        if broadcast is not None:
            for produced in broadcast.apply(fn.process_broadcast_element):
                out.rows.extend(produced)
                if out.full:
                    yield out.flush()
            for tag, part, ts_all in broadcast.deferred:
                groups.run_side(tag, part, layouts[tag], ts_all, out.rows.extend)
                if out.full:
                    yield out.flush()

    if opstate is not None:
        opstate.before_close()
    fn.close()
    if opstate is not None:
        opstate.after_close()
    backend.before_commit()
    if time is not None:
        time.before_commit(own)
    ps.commit()
    observed.update(store_observation(ps, task.batch_id))
    if time is not None:
        observed.update(time.observation())


class _KeyGroups:
    """Runs the function over groups of rows of one key: switches the current key once per
    group, then calls the function per row (or once per group, vectorized)."""

    def __init__(self, plan: ProcessPlan, ctx: KeyedContext, keys: KeyContext, own: KeyGroupRange, partition: int,
                 time: Optional[TimePhase]) -> None:
        fn = plan.function
        self._ctx = ctx
        self._set_key = keys.set_current_key
        self._encode = key_encoder(list(plan.key_fields))
        self._lo, self._hi = own.start, own.end
        self._partition = partition
        self._time = time
        self._late_rows = plan.options.late_rows == "deliver"
        self._vectorized = False
        self._process: Optional[Callable] = None
        #: by side, the function of each keyed side; the vectorized form one row per call
        self._handlers: dict[int, Callable]
        if plan.phases.two_inputs:
            self._handlers = {LEFT: fn.process_element1, RIGHT: fn.process_element2}
        else:
            self._vectorized = defines(fn, "process_elements")
            self._process = fn.process_elements if self._vectorized else fn.process_element
            self._handlers = {LEFT: _one_row(fn.process_elements) if self._vectorized else fn.process_element}

    def run(self, groups: list[tuple[Any, int, list]], extend: Callable[[Any], None]) -> None:
        """The plain input's groups ``(key, key group, rows)``; output goes to ``extend``."""
        ctx = self._ctx
        set_key, encode = self._set_key, self._encode
        lo, hi = self._lo, self._hi
        process, vectorized = self._process, self._vectorized
        assert process is not None  # one keyed input
        for key, kg, rows in groups:
            if not lo <= kg <= hi:
                raise misrouted_row(key, kg, self._partition, lo, hi)
            set_key(encode(key), kg)
            ctx.current_key = key
            ctx.current_key_group = kg
            if vectorized:
                produced = process(rows, ctx)
                if produced is not None:
                    extend(produced)
                continue
            for produced in map(process, rows, repeat(ctx, len(rows))):
                if produced is not None:
                    extend(produced)

    def run_side(self, tag: int, part: pa.RecordBatch, layout: SideLayout, ts_all: Optional[pa.Array],
                 extend: Callable[[Any], None]) -> None:
        """One keyed side's rows of one Arrow batch (grouped by key, input order), each row's
        event time and late flag on the context."""
        time = self._time
        assert time is not None
        groups = group_side_rows(part, layout, ts_all, time.watermark, self._late_rows)
        if not groups:
            return
        ctx = self._ctx
        set_key, encode = self._set_key, self._encode
        lo, hi = self._lo, self._hi
        process = self._handlers[tag]
        timers = time.timers
        timers.keyed = True
        try:
            for key, kg, rows, ts, late in groups:
                if not lo <= kg <= hi:
                    raise misrouted_row(key, kg, self._partition, lo, hi)
                set_key(encode(key), kg)
                ctx.current_key = key
                ctx.current_key_group = kg
                for i, row in enumerate(rows):
                    if ts is not None:
                        ctx._timestamp = ts[i]
                    if late is not None:
                        ctx._late = late[i]
                    produced = process(row, ctx)
                    if produced is not None:
                        extend(produced)
        finally:
            timers.keyed = False
            ctx._late = False
            ctx._timestamp = None


def _one_row(process_elements: Callable) -> Callable:
    """The vectorized form read by side: one row per call, so that ``ctx.timestamp()`` and
    ``ctx.is_late()`` describe the row (see ``KeyedProcessFunction.process_elements``)."""
    def process(row: Any, ctx: KeyedContext) -> Any:
        return process_elements([row], ctx)

    return process

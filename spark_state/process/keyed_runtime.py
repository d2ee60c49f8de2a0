"""Task side: the keyed loop with time, several inputs, broadcast and operator state.

``keyed_process`` without any of these runs the lean loop in :mod:`.runner`, which pays
nothing for them. Everything else runs here, for one partition of one batch, in this order:

1. the batch's time (:mod:`.clock`), when the operator has event time or timers;
2. ``initialize_state(op_ctx)`` (operator state of a keyed function, under the 0xFE keyspace)
   and the registered broadcast states, then ``open(ctx)``;
3. due timers fire (:meth:`~.timer_service.TimerService.fire_due`): event time, then
   processing time;
4. the input: rows of each Arrow batch are split by side; keyed rows of one key are grouped
   within the Arrow batch in input order; late rows (event time ``<=`` the batch's watermark)
   are dropped or delivered flagged (``late_rows``). With a broadcast input the whole
   partition input is read first; the broadcast rows are sorted (see below) and applied,
   then the keyed rows are processed;
5. ``snapshot_state``, ``close``, the write-back of operator state, TTL cleanup, the record of
   the batch's largest event time per side, and the commit.

Broadcast rows reach every partition (their rows are replicated to every route). Spark gives
a micro-batch's rows no order, so "the same order everywhere" is defined by content: rows
sort by the ``broadcast_order`` columns (None first), then by the ``repr`` of the whole row,
which is the same in every partition, attempt and re-run of the batch.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc

from ..partitioning.keygroups import KeyGroupRange
from ..state import KeyedStateBackend
from .arrow_io import OutputWriter, column_values, row_class
from .clock import record_max_event_time, resolve
from .errors import misrouted_row
from .functions import BroadcastContext, KeyedContext, OperatorContext, defines
from .inputs import BROADCAST_SIDE, HEARTBEAT, LEFT, RIGHT, InputSide
from .keycodec import key_decoder, key_encoder
from .operator_state import KEYED_OPERATOR_PREFIX, OperatorStateStore
from .routing import KEY_GROUP_COLUMN, SIDE_COLUMN
from .stores import PartitionStore
from .timer_service import TimerService

_MS_PER_UNIT = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


class _SideLayout:
    """Where one side's columns are in the Arrow input."""

    def __init__(self, side: InputSide, schema: pa.Schema) -> None:
        names = schema.names
        self.side = side
        self.idx = [names.index(a) for a in side.arrow_names]
        self.row_cls = row_class(list(side.names))
        self.key_pos = [side.names.index(k) for k in side.key_names]
        self.kg_idx = names.index(KEY_GROUP_COLUMN) if KEY_GROUP_COLUMN in names else -1
        self.ts_idx = names.index(side.arrow_name(side.event_time.column)) if side.event_time else -1


def event_millis(column: pa.Array) -> pa.Array:
    """A timestamp column as int64 epoch milliseconds (floored), nulls kept."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    unit = column.type.unit if pa.types.is_timestamp(column.type) else "us"
    mul, div = _MS_PER_UNIT[unit]
    raw = column.cast(pa.int64())
    if mul != 1:
        return pc.multiply(raw, mul)
    if div == 1:
        return raw
    # floor division, also for times before 1970
    return pc.cast(pc.floor(pc.divide(pc.cast(raw, pa.float64()), float(div))), pa.int64()) \
        if pc.any(pc.less(raw, 0)).as_py() else pc.divide(raw, div)


def run_general(plan: Any, task: Any, ps: PartitionStore, own: KeyGroupRange,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body for keyed operators with time, several inputs, broadcast or
    operator state (see the module docstring)."""
    out = OutputWriter(plan.output_schema, plan.function_name)
    try:
        yield from _run(plan, task, ps, own, batches, out)
    except BaseException:
        ps.discard()
        raise
    last = out.flush()
    if last is not None:
        yield last


def _run(plan: Any, task: Any, ps: PartitionStore, own: KeyGroupRange, batches: Iterator[pa.RecordBatch],
         out: OutputWriter) -> Iterator[pa.RecordBatch]:
    store = ps.store
    fn = plan.function
    name = plan.function_name
    sides: list[InputSide] = plan.sides
    backend = KeyedStateBackend(store, write_back=True)
    delays = {str(s.tag): s.event_time.delay_ms for s in sides if s.event_time is not None}
    timers = TimerService(store, backend, lambda: resolve(task.storage, task.batch_id, delays),
                          event_time=bool(delays), fires=plan.has_timers, function_name=name)
    op_store = (OperatorStateStore(store, KEYED_OPERATOR_PREFIX) if (plan.operator_state or plan.broadcast_states)
                else None)
    broadcast = {d.name: op_store.get_broadcast_state(d) for d in plan.broadcast_states} if op_store else {}
    ctx = KeyedContext(backend, task.batch_id, task.partition, plan.parallelism, plan.max_parallelism or 0,
                       task.url, timers=timers, broadcast=broadcast, function_name=name)
    op_ctx = None
    if plan.operator_state:
        assert op_store is not None
        op_ctx = OperatorContext(op_store, task.batch_id, task.partition, plan.parallelism, task.batch_id > 0, task.url)
        fn.initialize_state(op_ctx)
    fn.open(ctx)
    watermark = timers.current_watermark() if delays else None
    if plan.has_timers:
        decode = key_decoder(plan.key_fields)
        for produced in timers.fire_due(range(own.start, own.end + 1), fn.on_timer, ctx, decode):
            out.rows.extend(produced)
            if out.full:
                yield out.flush()

    handlers: dict[int, Callable] = {}
    if plan.variant == "co":
        handlers = {LEFT: fn.process_element1, RIGHT: fn.process_element2}
    else:
        handlers = {LEFT: _one_row(fn.process_elements) if defines(fn, "process_elements") else fn.process_element}
    by_tag = {s.tag: s for s in sides}
    layouts: dict[int, _SideLayout] = {}
    maxima: dict[int, int] = {}
    encode = key_encoder(plan.key_fields)
    deferred: list[tuple[int, pa.RecordBatch]] = []
    broadcast_rows: list[tuple[Any, Any, Optional[int]]] = []
    has_broadcast = BROADCAST_SIDE in by_tag

    for batch in batches:
        if batch.num_rows == 0:
            continue
        for tag, part in _split_sides(batch, by_tag):
            side = by_tag[tag]
            layout = layouts.get(tag)
            if layout is None:
                layout = layouts[tag] = _SideLayout(side, part.schema)
            ts_all = None
            if layout.ts_idx >= 0:
                ts_all = event_millis(part.column(layout.ts_idx))
                m = pc.max(ts_all).as_py()
                if m is not None and (tag not in maxima or m > maxima[tag]):
                    maxima[tag] = m
            if tag == BROADCAST_SIDE:
                _collect_broadcast(part, layout, ts_all, plan.broadcast_order, broadcast_rows)
                continue
            if has_broadcast:
                deferred.append((tag, part))
                continue
            for produced in _process_keyed(part, layout, ts_all, watermark, plan, handlers[tag], ctx, timers,
                                           backend, encode, own, task.partition):
                out.rows.extend(produced)
                if out.full:
                    yield out.flush()

    if has_broadcast:
        bctx = BroadcastContext(broadcast, task.batch_id, task.partition, plan.parallelism, task.url, name)
        broadcast_rows.sort(key=lambda r: r[0])
        for _, row, ts in broadcast_rows:
            bctx._timestamp = ts
            produced = fn.process_broadcast_element(row, bctx)
            if produced is not None:
                out.rows.extend(produced)
            if out.full:
                yield out.flush()
        for tag, part in deferred:
            layout = layouts[tag]
            ts_all = event_millis(part.column(layout.ts_idx)) if layout.ts_idx >= 0 else None
            for produced in _process_keyed(part, layout, ts_all, watermark, plan, handlers[tag], ctx, timers,
                                           backend, encode, own, task.partition):
                out.rows.extend(produced)
                if out.full:
                    yield out.flush()

    if op_ctx is not None:
        fn.snapshot_state(op_ctx)
    fn.close()
    if op_store is not None:
        op_store.flush()
    backend.before_commit()
    for tag, m in maxima.items():
        record_max_event_time(task.storage, task.batch_id, tag, plan.parallelism, task.partition, m)
    ps.commit()


def _split_sides(batch: pa.RecordBatch, by_tag: dict[int, InputSide]) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(side, rows of that side)`` for each side present in ``batch``, keyed sides in tag
    order; heartbeat rows are dropped."""
    names = batch.schema.names
    if SIDE_COLUMN not in names:
        yield LEFT, batch
        return
    tags = batch.column(names.index(SIDE_COLUMN))
    present = sorted(t for t in pc.unique(tags).to_pylist() if t is not None and t != HEARTBEAT)
    if len(present) == 1 and pc.all(pc.equal(tags, present[0])).as_py():
        yield present[0], batch
        return
    for t in present:
        if t in by_tag:
            yield t, batch.filter(pc.equal(tags, t))


def _sort_value(v: Any) -> tuple:
    return (v is not None, v)


def _collect_broadcast(part: pa.RecordBatch, layout: _SideLayout, ts_all: Optional[pa.Array],
                       order: tuple[str, ...], into: list) -> None:
    cols = [column_values(part.column(i)) for i in layout.idx]
    rows = list(map(layout.row_cls._make, zip(*cols)))
    ts = ts_all.to_pylist() if ts_all is not None else [None] * len(rows)
    positions = [layout.side.names.index(c) for c in order]
    for row, t in zip(rows, ts):
        key = (tuple(_sort_value(row[p]) for p in positions), repr(tuple(row)))
        into.append((key, row, t))


def _process_keyed(part: pa.RecordBatch, layout: _SideLayout, ts_all: Optional[pa.Array], watermark: Optional[int],
                   plan: Any, process: Callable, ctx: KeyedContext, timers: TimerService,
                   backend: KeyedStateBackend, encode: Callable, own: KeyGroupRange,
                   partition: int) -> Iterator[Any]:
    """Run ``process`` over one side's rows of one Arrow batch (grouped by key, input order)."""
    late: Optional[list] = None
    if ts_all is not None and watermark is not None:
        late_mask = pc.fill_null(pc.less_equal(ts_all, watermark), False)
        if plan.late_rows == "drop":
            if pc.any(late_mask).as_py():
                keep = pc.invert(late_mask)
                part = part.filter(keep)
                ts_all = ts_all.filter(keep)
                if part.num_rows == 0:
                    return
        else:
            late = late_mask.to_pylist()
    cols = [column_values(part.column(i)) for i in layout.idx]
    rows = list(map(layout.row_cls._make, zip(*cols)))
    if len(layout.key_pos) == 1:
        keys = cols[layout.key_pos[0]]
    else:
        keys = list(zip(*[cols[i] for i in layout.key_pos]))
    kgs = part.column(layout.kg_idx).to_pylist()
    ts = ts_all.to_pylist() if ts_all is not None else None
    groups: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        g = groups.get(k)
        if g is None:
            groups[k] = [i]
        else:
            g.append(i)
    lo, hi = own.start, own.end
    set_key = backend.set_current_key
    timers.keyed = True
    try:
        for key, idxs in groups.items():
            kg = kgs[idxs[0]]
            if not lo <= kg <= hi:
                raise misrouted_row(key, kg, partition, lo, hi)
            set_key(encode(key), kg)
            ctx.current_key = key
            ctx.current_key_group = kg
            for i in idxs:
                if ts is not None:
                    ctx._timestamp = ts[i]
                if late is not None:
                    ctx._late = late[i]
                produced = process(rows[i], ctx)
                if produced is not None:
                    yield produced
    finally:
        timers.keyed = False
        ctx._late = False
        ctx._timestamp = None


def _one_row(process_elements: Callable) -> Callable:
    """The vectorized form on this loop: one row per call, so that ``ctx.timestamp()`` and
    ``ctx.is_late()`` describe the row (see ``KeyedProcessFunction.process_elements``)."""
    def process(row: Any, ctx: KeyedContext) -> Any:
        return process_elements([row], ctx)

    return process

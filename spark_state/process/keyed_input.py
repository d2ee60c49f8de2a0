"""Task side: a keyed task's Arrow input as rows grouped by key.

Two readers, chosen once per task by the plan (:mod:`.plan`):

* **plain** (one untagged input, no phases): :func:`gathered` collects input batches up to
  :data:`GROUP_ROWS` rows, :func:`group_by_key` groups their rows by key -- by Arrow for one
  integer or string key column (a stable sort, then runs of equal keys), else with a dict --
  so that a key's rows of a micro-batch mostly arrive in one group;
* **by side** (tagged union, or event time): each Arrow batch is split by side
  (:func:`split_sides`), its event times read as epoch milliseconds (:func:`event_millis`),
  and :func:`group_side_rows` groups one side's rows by key in first-seen order, rows in
  input order, dropping or flagging late rows.

A group is ``(key, key group, rows)`` (rows: namedtuples of the input columns), by side with
the rows' event times and late flags (``None`` when the side has no event time / nothing is
flagged).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc

from .arrow_io import column_values, row_class
from .inputs import LEFT, TICK, InputSide
from .routing import HIDDEN_COLUMNS, KEY_GROUP_COLUMN, SIDE_COLUMN

#: Input rows grouped by key at once: ``mapInArrow`` hands the task Arrow batches of
#: ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (10,000 by default); the plain reader
#: gathers them up to this many rows, so that a key's rows of a micro-batch mostly arrive in
#: one group (one key switch, one state read per key) while the memory held stays bounded.
GROUP_ROWS = 65_536

_MS_PER_UNIT = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}


# ------------------------------------------------------------------------------ plain input
class BatchLayout:
    """Column positions of the Arrow batches a task receives (same for all its batches)."""

    def __init__(self, schema: pa.Schema, key_names: list[str]) -> None:
        names = schema.names
        self.input_idx = [i for i, n in enumerate(names) if n not in HIDDEN_COLUMNS]
        input_names = [names[i] for i in self.input_idx]
        self.row_cls = row_class(input_names)
        #: values tuple -> row, without a Python-level call per row (namedtuple's ``_make`` is one)
        self.make_row = partial(tuple.__new__, self.row_cls)
        self.key_pos = [input_names.index(k) for k in key_names]
        self.kg_idx = names.index(KEY_GROUP_COLUMN) if KEY_GROUP_COLUMN in names else -1
        #: the one key column's index if Arrow can group it (integer or string), else -1
        self.sort_key_idx = -1
        if len(key_names) == 1:
            t = schema.field(key_names[0]).type
            if pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t):
                self.sort_key_idx = names.index(key_names[0])


def gathered(batches: Iterator[pa.RecordBatch], limit: int) -> Iterator[list[pa.RecordBatch]]:
    """Non-empty input batches in runs of at least ``limit`` rows (the last run may be shorter)."""
    run: list[pa.RecordBatch] = []
    n = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        run.append(batch)
        n += batch.num_rows
        if n >= limit:
            yield run
            run, n = [], 0
    if run:
        yield run


def group_by_key(chunk: list[pa.RecordBatch], layout: BatchLayout) -> list[tuple[Any, int, list]]:
    """``(key, key group, rows)`` per key of ``chunk``: the rows (namedtuples) in input order
    within a key, keys in no particular order. One integer or string key column without
    nulls is grouped by Arrow (a stable sort, then runs of equal keys): no Python work per
    row beyond building the row; other keys are grouped with a dict."""
    data = chunk[0] if len(chunk) == 1 else pa.Table.from_batches(chunk)
    if layout.sort_key_idx >= 0:
        key_column = data.column(layout.sort_key_idx)
        if key_column.null_count == 0:
            return _group_sorted(data.take(pc.sort_indices(key_column)), layout)
    cols = [column_values(data.column(i)) for i in layout.input_idx]  # one C loop per column
    rows = map(layout.make_row, zip(*cols))
    keys: Iterable[Any]
    if len(layout.key_pos) == 1:
        keys = cols[layout.key_pos[0]]
    else:
        keys = zip(*[cols[i] for i in layout.key_pos])
    groups: dict[Any, list] = {}
    key_groups: dict[Any, int] = {}
    get = groups.get
    for k, kg, row in zip(keys, data.column(layout.kg_idx).to_pylist(), rows):
        g = get(k)
        if g is None:
            groups[k] = [row]
            key_groups[k] = kg
        else:
            g.append(row)
    return [(k, key_groups[k], rows) for k, rows in groups.items()]


def _group_sorted(data: Any, layout: BatchLayout) -> list[tuple[Any, int, list]]:
    """Groups of ``data`` (a record batch or table) already sorted by its one key column."""
    cols = [column_values(data.column(i)) for i in layout.input_idx]
    rows = list(map(layout.make_row, zip(*cols)))
    keys = cols[layout.key_pos[0]]
    kgs = data.column(layout.kg_idx).to_pylist()
    n = len(rows)
    starts = [0]
    if n > 1:
        sorted_keys = data.column(layout.sort_key_idx)
        if isinstance(sorted_keys, pa.ChunkedArray):
            sorted_keys = sorted_keys.combine_chunks()
        change = pc.not_equal(sorted_keys.slice(1), sorted_keys.slice(0, n - 1))
        starts += [i + 1 for i in pc.indices_nonzero(change).to_pylist()]
    ends = starts[1:] + [n]
    return [(keys[s], kgs[s], rows[s:e]) for s, e in zip(starts, ends)]


# ------------------------------------------------------------------------------ input by side
class SideLayout:
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


def split_sides(batch: pa.RecordBatch, by_tag: dict[int, InputSide]) -> Iterator[tuple[int, pa.RecordBatch]]:
    """``(side, rows of that side)`` for each side present in ``batch``, keyed sides in tag
    order; tick rows are dropped."""
    names = batch.schema.names
    if SIDE_COLUMN not in names:
        yield LEFT, batch
        return
    tags = batch.column(names.index(SIDE_COLUMN))
    present = sorted(t for t in pc.unique(tags).to_pylist() if t is not None and t != TICK)
    if len(present) == 1 and pc.all(pc.equal(tags, present[0])).as_py():
        yield present[0], batch
        return
    for t in present:
        if t in by_tag:
            yield t, batch.filter(pc.equal(tags, t))


def side_rows(part: pa.RecordBatch, layout: SideLayout) -> tuple[list, list]:
    """``(rows, column value lists)`` of one side's part."""
    cols = [column_values(part.column(i)) for i in layout.idx]
    return list(map(layout.row_cls._make, zip(*cols))), cols


def group_side_rows(part: pa.RecordBatch, layout: SideLayout, ts_all: Optional[pa.Array], watermark: Optional[int],
                    deliver_late: bool) -> list[tuple[Any, int, list, Optional[list], Optional[list]]]:
    """``(key, key group, rows, event times, late flags)`` per key of one side's part, keys in
    first-seen order, rows in input order. With event time (``ts_all``) and a watermark, late
    rows (event time ``<=`` watermark) are dropped, or kept and flagged with ``deliver_late``."""
    late: Optional[list] = None
    if ts_all is not None and watermark is not None:
        late_mask = pc.fill_null(pc.less_equal(ts_all, watermark), False)
        if not deliver_late:
            if pc.any(late_mask).as_py():
                keep = pc.invert(late_mask)
                part = part.filter(keep)
                ts_all = ts_all.filter(keep)
                if part.num_rows == 0:
                    return []
        else:
            late = late_mask.to_pylist()
    rows, cols = side_rows(part, layout)
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
    return [(key, kgs[idxs[0]], [rows[i] for i in idxs],
             None if ts is None else [ts[i] for i in idxs],
             None if late is None else [late[i] for i in idxs])
            for key, idxs in groups.items()]

"""Task side: what runs inside ``mapInArrow`` for one partition of one micro-batch.

Both runners follow the same protocol:

1. read ``streaming.sql.batchId`` (batch ``B``) and ``sql.streaming.queryId`` from the task's
   local properties, resolve the state location, check its ``_operator.json``;
2. :func:`~spark_state.process.stores.acquire` the partition's store at batch version ``B``
   (cached, loaded, or built by a rescale);
3. run the function over the partition's Arrow batches, emitting output batches as they fill;
   the lean keyed loop gathers input batches up to :data:`GROUP_ROWS` rows, groups their rows
   by key (by Arrow for one integer or string key column), switches the current key once per
   group and calls ``process_element(row, ctx)`` per row -- or, for a function defining the
   vectorized form, ``process_elements(rows, ctx)`` once per group;
4. when the input is exhausted: TTL cleanup (keyed) or ``snapshot_state`` plus the write-back
   of operator state, ``close()``, and the commit of version ``B + 1``.

Any exception (in the function, the input, or the commit) discards the pending writes and
closes the store before it propagates, so Spark's retry of the task starts again from
version ``B`` in checkpoint storage: state is exactly-once under retries.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from typing import Any, Iterable, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructField, StructType

from ..checkpoint.runs import RunContext
from ..config import EngineConfig
from ..partitioning.keygroups import KeyGroupRange, compute_key_group_range_for_operator_index
from ..state import KeyedStateBackend, copy_key_groups
from ..testing import crashpoints
from .arrow_io import OutputWriter, column_values, columns_as_lists, row_class
from .errors import NotInStreamingQueryError, StateLocationError, misrouted_row
from .functions import KeyedContext, OperatorContext, defines
from .gc_pacing import task_gc_pacing
from .keycodec import key_encoder
from .location import (
    BATCH_ID_PROPERTY,
    JOB_DESCRIPTION_PROPERTY,
    JOB_GROUP_PROPERTY,
    QUERY_ID_PROPERTY,
    Layout,
    LocationSpec,
    run_context,
    run_id_of_task,
    storage_for,
    verify_location,
)
from .keyed_runtime import run_general
from .operator_state import KEYED_OPERATOR_PREFIX, OperatorStateStore, redistribute
from .routing import HIDDEN_COLUMNS, KEY_GROUP_COLUMN
from .stores import PartitionStore, acquire


@dataclass
class ProcessPlan:
    """Everything a task needs; built on the driver, pickled into the ``mapInArrow`` closure."""

    kind: str  # "keyed" or "operator"
    function: Any
    function_name: str
    location: LocationSpec
    engine: EngineConfig
    parallelism: int
    output_schema: StructType
    max_parallelism: Optional[int] = None
    key_fields: list[StructField] = field(default_factory=list)
    #: keyed operators on the general loop (:mod:`.keyed_runtime`): "process", "co" or "broadcast"
    #: in ``variant``; None runs the lean loop below (no time, one input, no operator state)
    sides: Optional[list] = None
    variant: str = "process"
    has_timers: bool = False
    operator_state: bool = False
    broadcast_states: list = field(default_factory=list)
    broadcast_order: tuple = ()
    late_rows: str = "drop"


@dataclass
class _Task:
    batch_id: int
    partition: int
    url: str
    storage: Any
    runs: RunContext


def _task(plan: ProcessPlan, partition: Optional[int] = None) -> _Task:
    from pyspark import TaskContext

    tc = TaskContext.get()
    raw = tc.getLocalProperty(BATCH_ID_PROPERTY) if tc is not None else None
    if tc is None or raw is None:
        raise NotInStreamingQueryError(
            f"{plan.function_name} runs only in a streaming query (no '{BATCH_ID_PROPERTY}' "
            "task property): keyed_process/checkpointed_process need a streaming DataFrame, "
            "started with writeStream")
    url = plan.location.resolve(tc.getLocalProperty(QUERY_ID_PROPERTY))
    run_id = run_id_of_task({k: tc.getLocalProperty(k) for k in (JOB_DESCRIPTION_PROPERTY, JOB_GROUP_PROPERTY)})
    if run_id is None:
        raise NotInStreamingQueryError(
            f"{plan.function_name}: the task has no streaming query run id (local properties "
            f"'{JOB_GROUP_PROPERTY}' / '{JOB_DESCRIPTION_PROPERTY}', which Spark sets for every "
            "micro-batch); was the job group overridden?")
    crashpoints.set_role("process")  # crash tests may target the workers running process functions
    storage = storage_for(url, plan.location.storage_options)
    verify_location(storage, plan.kind, plan.max_parallelism)
    part = tc.partitionId() if partition is None else partition
    return _Task(int(raw), part, url, storage, run_context(storage, run_id))


def _check_parallelism(plan: ProcessPlan, partition: int) -> None:
    if partition >= plan.parallelism:  # pragma: no cover - repartition(n) guarantees it
        raise StateLocationError(f"partition {partition} out of range for parallelism {plan.parallelism}")


# ------------------------------------------------------------------------------------ keyed
def run_keyed(plan: ProcessPlan, batches: Iterator[pa.RecordBatch],
              partition: Optional[int] = None) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body of :func:`~spark_state.process.keyed_process`. ``partition``
    overrides the task's partition id (a carrier other than ``mapInArrow`` that groups rows by
    logical partition, as ``bench/keyed_bench.py`` measures with ``applyInPandasWithState``)."""
    task = _task(plan, partition)
    n, max_p, partition = plan.parallelism, plan.max_parallelism, task.partition
    _check_parallelism(plan, partition)
    assert max_p is not None
    own = compute_key_group_range_for_operator_index(max_p, n, partition)

    def old_range(old: Layout, j: int) -> KeyGroupRange:
        return compute_key_group_range_for_operator_index(max_p, old.parallelism, j)

    # Operator state (a keyed function's own, or broadcast state) is redistributed from every
    # old partition; keyed state and timers are copied from the overlapping ones only.
    needs_all = plan.operator_state or bool(plan.broadcast_states)

    def sources_needed(old: Layout) -> list[int]:
        if needs_all:
            return list(range(old.parallelism))
        return [j for j in range(old.parallelism) if not own.intersection(old_range(old, j)).is_empty]

    def populate(store, old: Layout, old_stores) -> None:
        for j, source in old_stores.items():
            r = own.intersection(old_range(old, j))
            if not r.is_empty:
                copy_key_groups(source, store, r.start, r.end)
        if needs_all:
            redistribute(store, partition, n, old_stores, KEYED_OPERATOR_PREFIX)

    ps = acquire(task.storage, plan.engine, n, partition, task.batch_id, sources_needed, populate, task.runs)
    if plan.sides is not None:
        return _paced(run_general(plan, task, ps, own, batches))
    return _paced(_keyed_loop(plan, task, ps, own, batches))


#: Input rows grouped by key at once: ``mapInArrow`` hands the task Arrow batches of
#: ``spark.sql.execution.arrow.maxRecordsPerBatch`` rows (10,000 by default); the lean loop
#: gathers them up to this many rows, so that a key's rows of a micro-batch mostly arrive in
#: one group (one key switch, one state read per key) while the memory held stays bounded.
GROUP_ROWS = 65_536


def _keyed_loop(plan: ProcessPlan, task: _Task, ps: PartitionStore, own: KeyGroupRange,
                batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    out = OutputWriter(plan.output_schema, plan.function_name)
    try:
        backend = KeyedStateBackend(ps.store, write_back=True)
        ctx = KeyedContext(backend, task.batch_id, task.partition, plan.parallelism,
                           plan.max_parallelism or 0, task.url, function_name=plan.function_name)
        fn = plan.function
        vectorized = defines(fn, "process_elements")
        process = fn.process_elements if vectorized else fn.process_element
        encode = key_encoder(plan.key_fields)
        set_key = backend.set_current_key
        lo, hi = own.start, own.end
        layout = None
        fn.open(ctx)
        for chunk in _gathered(batches, GROUP_ROWS):
            if layout is None:
                layout = _BatchLayout(chunk[0].schema, [f.name for f in plan.key_fields])
            extend = out.rows.extend
            for key, kg, rows in _group_by_key(chunk, layout):
                if not lo <= kg <= hi:
                    raise misrouted_row(key, kg, task.partition, lo, hi)
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
            if out.full:
                yield out.flush()
        fn.close()
        backend.before_commit()
        ps.commit()
    except BaseException:
        ps.discard()
        raise
    last = out.flush()
    if last is not None:
        yield last


def _gathered(batches: Iterator[pa.RecordBatch], limit: int) -> Iterator[list[pa.RecordBatch]]:
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


def _group_by_key(chunk: list[pa.RecordBatch], layout: "_BatchLayout") -> list[tuple[Any, int, list]]:
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


def _group_sorted(data: Any, layout: "_BatchLayout") -> list[tuple[Any, int, list]]:
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


class _BatchLayout:
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


def _paced(loop: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``loop`` with the garbage collector paced for bulk row work (:mod:`.gc_pacing`)."""
    with task_gc_pacing():
        yield from loop


# --------------------------------------------------------------------------------- operator
def run_operator(plan: ProcessPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` body of :func:`~spark_state.process.checkpointed_process`."""
    task = _task(plan)
    n, partition = plan.parallelism, task.partition
    _check_parallelism(plan, partition)

    def sources_needed(old: Layout) -> list[int]:
        return list(range(old.parallelism))

    def populate(store, old: Layout, old_stores) -> None:
        redistribute(store, partition, n, old_stores)

    ps = acquire(task.storage, plan.engine, n, partition, task.batch_id, sources_needed, populate, task.runs)
    return _paced(_operator_loop(plan, task, ps, batches))


def _operator_loop(plan: ProcessPlan, task: _Task, ps: PartitionStore,
                   batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    out = OutputWriter(plan.output_schema, plan.function_name)
    try:
        states = OperatorStateStore(ps.store)
        ctx = OperatorContext(states, task.batch_id, task.partition, plan.parallelism,
                              task.batch_id > 0, task.url)
        fn = plan.function
        process = fn.process_element
        fn.initialize_state(ctx)
        fn.open(ctx)
        layout = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if layout is None:
                layout = _BatchLayout(batch.schema, [])
            cols = columns_as_lists(batch, layout.input_idx)
            extend = out.rows.extend
            for row in map(layout.row_cls._make, zip(*cols)):
                produced = process(row, ctx)
                if produced is not None:
                    extend(produced)
            if out.full:
                yield out.flush()
        fn.snapshot_state(ctx)
        states.flush()
        fn.close()
        ps.commit()
    except BaseException:
        ps.discard()
        raise
    last = out.flush()
    if last is not None:
        yield last

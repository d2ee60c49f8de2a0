"""Driver side: ``keyed_process`` and ``checkpointed_process`` turn a streaming DataFrame into
the streaming DataFrame of the function's output.

Plan of ``keyed_process(df, key, fn, schema)``::

    df ─► + key group column  pmod(hash(key), max_parallelism)
       ─► + route column      small int whose hash lands in partition kg * n // max_parallelism
       ─► ∪ tick source (no rows)
       ─► repartition(n, route) ─► drop route ─► mapInArrow(run_keyed, schema + observation)
       ─► observe("spark_state.<name>") ─► drop the observation rows and column

With event time (``df.withWatermark``), timers (``on_timer``), operator state
(``initialize_state``), two inputs (``keyed_co_process``) or a broadcast input
(``keyed_broadcast_process``), the inputs and the tick stream are unioned and tagged by side
first (:mod:`.inputs`) and the tasks read their input by side; the plan (:mod:`.plan`) names the
phases of the keyed loop (:mod:`.keyed_loop`) in use. The tick source (:mod:`.ticks`) places
the checkpoint and makes Spark run batches for due timers; the observation (:mod:`.observation`)
puts the tasks' figures in the query's progress. The keyword options every entry point shares
are checked once, by :func:`~.options.process_options`.

``checkpointed_process`` repartitions round-robin into ``n`` partitions (Spark sorts rows
before a round-robin repartition so that retries see the same split) and runs
``mapInArrow(run_operator, schema + observation)``.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Mapping, Optional, Sequence, Union

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from ..state import MapStateDescriptor
from .errors import ProcessDefinitionError
from .event_time import EventTime, event_time_of
from .functions import (
    CheckpointedFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    defines,
)
from .inputs import BROADCAST_SIDE, LEFT, RIGHT, InputSide, check_same_key_types, renamed, union_inputs
from .keycodec import check_key_fields
from .observation import OBSERVATION_COLUMN, observed
from .options import EngineLike, ProcessOptions, process_options
from .plan import KEYED, OPERATOR, BroadcastSpec, Phases, ProcessPlan
from .recording import record
from .routing import HIDDEN_COLUMNS, KEY_GROUP_COLUMN, ROUTE_COLUMN, key_group_and_route, repartition_routed
from .runner import run_keyed, run_operator
from .ticks import tick_stream, with_tick_source


def _function_instance(function: Any, kind: type, api: str) -> Any:
    """``function`` as an instance of ``kind`` (a class is instantiated), or a clear error."""
    if isinstance(function, type) and issubclass(function, kind):
        function = function()
    if not isinstance(function, kind):
        raise ProcessDefinitionError(f"{api} needs a {kind.__name__} instance, got {type(function).__name__}")
    return function


def keyed_process(
    df: DataFrame,
    key: Union[str, Sequence[str]],
    function: KeyedProcessFunction,
    output_schema: Union[StructType, str],
    *,
    parallelism: Optional[int] = None,
    max_parallelism: Optional[int] = None,
    name: Optional[str] = None,
    state_location: Optional[str] = None,
    state_root: Optional[str] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    engine: EngineLike = None,
    late_rows: str = "drop",
    idle_heartbeat: bool = False,
) -> DataFrame:
    """Run a :class:`KeyedProcessFunction` over ``df`` keyed by ``key``; returns a streaming
    DataFrame of ``output_schema``.

    Args:
        df: a streaming DataFrame.
        key: the key column name, or several.
        function: the function instance (pickled to the executors).
        output_schema: a ``StructType`` or DDL string (``"word string, n bigint"``).
        parallelism: partitions (default ``spark.sql.shuffle.partitions``); restart with another
            value to rescale: keyed state moves by key group, with no user action.
        max_parallelism: the number of key groups, fixed for the life of the state (default
            Flink's ``compute_default_max_parallelism(parallelism)``, i.e. 128 up to 85).
        name: the operator's name in the default state location (default: the class name);
            needed when one query runs the same function class twice.
        state_location: where the state lives (local path, ``s3://``, ``hdfs://``); default
            ``<state_root>/<query id>/<name>``.
        state_root: root of the default location (default: SQL conf
            ``spark.sql.streaming.stateStore.sparkState.process.root``, else ``./spark-state``).
        storage_options: checkpoint storage options (``s3.endpoint_url``, ``hdfs.*``, ...), over the
            session's ``storage.*`` confs and ``engine=``'s, key by key.
        engine: an :class:`~spark_state.EngineConfig` (replacing the session's engine confs) or its
            string options (``backend``, ``snapshotInterval``, ...; over the session's, key by key);
            default the session's spark-state confs, else the engine defaults (RocksDB backend).
        late_rows: rows whose event time is ``<=`` the batch's watermark: ``"drop"`` (default,
            as Spark's stateful operators do) or ``"deliver"`` (``ctx.is_late()`` is True).
        idle_heartbeat: ignored with a warning (deprecated): batches run for due timers while the
            sources are idle (see docs/time.md).

    The query's progress shows the function's figures under
    ``observedMetrics["spark_state.<name>"]["figures"]`` (see :mod:`spark_state.process.observation`).
    """
    function = _function_instance(function, KeyedProcessFunction, "keyed_process")
    _check_stream(df, "keyed_process")
    keys, key_fields = key_columns(df, key, "keyed_process")
    options = process_options(
        df, function, output_schema, keyed=True, parallelism=parallelism, max_parallelism=max_parallelism, name=name,
        state_location=state_location, state_root=state_root, storage_options=storage_options, engine=engine,
        late_rows=late_rows)
    _no_heartbeat(idle_heartbeat)
    event_time = event_time_of(df, "keyed_process")
    phases = _phases(function, event_time=event_time is not None)
    ticks = tick_stream(df, options.location.name, timers=phases.timers)
    plan, routed = plan_keyed(df, keys, key_fields, function, options, phases, event_time, ticks)
    return _keyed(routed, plan)


def plan_keyed(df: DataFrame, keys: Sequence[str], key_fields: Sequence[Any], function: Any, options: ProcessOptions,
               phases: Phases, event_time: Optional[EventTime],
               ticks: Optional[DataFrame]) -> tuple[ProcessPlan, DataFrame]:
    """The plan of a one-input keyed function over ``df``, and ``df`` routed for it: the one place
    it is built, for :func:`keyed_process` and for offline runs (:mod:`.offline`).

    The plain input (no sides: a key's rows in one call, nothing paid for time) unless an input
    declares event time or a phase other than the bootstrap's needs the rows by side (then one
    tagged side, :mod:`.inputs`). ``ticks``: the tick stream unioned into the input (None in a
    batch job)."""
    n, max_p = options.parallelism, _max_p(options)
    if event_time is None and not dataclasses.replace(phases, bootstrap=False).any:
        plan = plain_keyed_plan(key_fields, function, options, phases)
        kg, route = key_group_and_route(list(keys), n, max_p)
        tagged = df.withColumn(KEY_GROUP_COLUMN, kg).withColumn(ROUTE_COLUMN, route)
        return plan, repartition_routed(tagged if ticks is None else with_tick_source(tagged, ticks), n)
    side = InputSide(LEFT, tuple(df.columns), tuple(df.columns), tuple(keys), event_time)
    plan = ProcessPlan(KEYED, function, options, tuple(key_fields), (side,), phases)
    return plan, union_inputs([(side, df)], n, max_p, ticks)


def plain_keyed_plan(key_fields: Sequence[Any], function: Any, options: ProcessOptions, phases: Phases) -> ProcessPlan:
    """The plan of a one-input keyed function read as plain input (no sides): its rows are the
    input columns plus the key group column (:data:`~.routing.KEY_GROUP_COLUMN`), already routed."""
    return ProcessPlan(KEYED, function, options, tuple(key_fields), (), phases)


def keyed_co_process(
    left: DataFrame,
    right: DataFrame,
    left_key: Union[str, Sequence[str]],
    right_key: Union[str, Sequence[str]],
    function: KeyedCoProcessFunction,
    output_schema: Union[StructType, str],
    *,
    parallelism: Optional[int] = None,
    max_parallelism: Optional[int] = None,
    name: Optional[str] = None,
    state_location: Optional[str] = None,
    state_root: Optional[str] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    engine: EngineLike = None,
    late_rows: str = "drop",
    idle_heartbeat: bool = False,
) -> DataFrame:
    """Run a :class:`KeyedCoProcessFunction` over two streams connected by key (Flink's
    ``left.connect(right).keyBy(...).process(...)``): rows of ``left`` go to
    ``process_element1``, rows of ``right`` to ``process_element2``, and both share each
    key's state and timers. The key columns must have the same types on both sides. Each
    side may declare event time with ``withWatermark``; the operator's watermark is Spark's:
    the minimum over the sides that have seen rows under Spark's default policy
    (``spark.sql.streaming.multipleWatermarkPolicy``). Other options as for
    :func:`keyed_process`."""
    function = _function_instance(function, KeyedCoProcessFunction, "keyed_co_process")
    _check_stream(left, "keyed_co_process")
    _check_stream(right, "keyed_co_process")
    lkeys, lfields = key_columns(left, left_key, "keyed_co_process (left)")
    rkeys, _ = key_columns(right, right_key, "keyed_co_process (right)")
    check_same_key_types(left, lkeys, right, rkeys)
    options = process_options(
        left, function, output_schema, keyed=True, parallelism=parallelism, max_parallelism=max_parallelism,
        name=name, state_location=state_location, state_root=state_root, storage_options=storage_options,
        engine=engine, late_rows=late_rows)
    _no_heartbeat(idle_heartbeat)
    times = (event_time_of(left, "keyed_co_process (left)"), event_time_of(right, "keyed_co_process (right)"))
    phases = _phases(function, event_time=any(t is not None for t in times), two_inputs=True)
    plan, routed = plan_co(left, right, lkeys, rkeys, lfields, function, options, phases, times,
                           tick_stream(left, options.location.name, timers=phases.timers))
    return _keyed(routed, plan)


def plan_co(left: DataFrame, right: DataFrame, left_keys: Sequence[str], right_keys: Sequence[str],
            key_fields: Sequence[Any], function: Any, options: ProcessOptions, phases: Phases,
            event_times: tuple[Optional[EventTime], Optional[EventTime]],
            ticks: Optional[DataFrame]) -> tuple[ProcessPlan, DataFrame]:
    """The plan of a two-input keyed function over ``left`` and ``right`` (``key_fields``: the
    left key's; the sides' key types are checked by the caller), and both inputs tagged by side
    and routed for it: the one place it is built, for :func:`keyed_co_process` and for offline
    runs (:mod:`.offline`). ``event_times``: each side's; ``ticks`` as for :func:`plan_keyed`."""
    sides = (
        InputSide(LEFT, tuple(left.columns), renamed(LEFT, left.columns), tuple(left_keys), event_times[0]),
        InputSide(RIGHT, tuple(right.columns), renamed(RIGHT, right.columns), tuple(right_keys), event_times[1]),
    )
    plan = ProcessPlan(KEYED, function, options, tuple(key_fields), sides, phases)
    return plan, union_inputs([(sides[0], left), (sides[1], right)], options.parallelism, _max_p(options), ticks)


def keyed_broadcast_process(
    df: DataFrame,
    key: Union[str, Sequence[str]],
    broadcast_df: DataFrame,
    function: KeyedBroadcastProcessFunction,
    output_schema: Union[StructType, str],
    *,
    broadcast_states: Sequence[MapStateDescriptor],
    broadcast_order: Union[str, Sequence[str], None] = None,
    parallelism: Optional[int] = None,
    max_parallelism: Optional[int] = None,
    name: Optional[str] = None,
    state_location: Optional[str] = None,
    state_root: Optional[str] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    engine: EngineLike = None,
    late_rows: str = "drop",
    idle_heartbeat: bool = False,
) -> DataFrame:
    """Run a :class:`KeyedBroadcastProcessFunction`: ``df`` keyed by ``key``, connected to the
    broadcast stream ``broadcast_df`` (Flink's ``keyed.connect(rules.broadcast(...))``).

    Every partition receives every row of ``broadcast_df``, before the keyed rows of the same
    batch, sorted by ``broadcast_order`` (columns of ``broadcast_df``; None first) and then by
    the whole row, so that each partition applies the same rows in the same order. Broadcast
    rows are never late. The watermark is Spark's (docs/time.md): a ``withWatermark`` on
    ``broadcast_df`` counts in it as in any query of Spark's.
    ``process_broadcast_element`` writes the broadcast states named in ``broadcast_states``
    (``MapStateDescriptor`` objects); ``process_element`` and ``on_timer`` read them. Broadcast
    state is operator state of each partition, committed with its keyed state, and on a
    rescale new partition ``i`` takes old partition ``i % m``'s copy. Other options as for
    :func:`keyed_process`.
    """
    function = _function_instance(function, KeyedBroadcastProcessFunction, "keyed_broadcast_process")
    _check_stream(df, "keyed_broadcast_process")
    _check_stream(broadcast_df, "keyed_broadcast_process (broadcast input)")
    keys, key_fields = key_columns(df, key, "keyed_broadcast_process")
    options = process_options(
        df, function, output_schema, keyed=True, parallelism=parallelism, max_parallelism=max_parallelism, name=name,
        state_location=state_location, state_root=state_root, storage_options=storage_options, engine=engine,
        late_rows=late_rows)
    _no_heartbeat(idle_heartbeat)
    descriptors = tuple(broadcast_states)
    if not descriptors or not all(isinstance(d, MapStateDescriptor) for d in descriptors):
        raise ProcessDefinitionError(
            "keyed_broadcast_process needs broadcast_states=[MapStateDescriptor(name, key_type, value_type), ...]")
    order = (broadcast_order,) if isinstance(broadcast_order, str) else tuple(broadcast_order or ())
    missing = [c for c in order if c not in broadcast_df.columns]
    if missing:
        raise ProcessDefinitionError(
            f"broadcast_order column(s) {missing} not in the broadcast input's columns {broadcast_df.columns}")
    event_time = event_time_of(df, "keyed_broadcast_process")
    phases = _phases(function, event_time=event_time is not None, broadcast=BroadcastSpec(descriptors, order))
    plan, routed = plan_broadcast(df, broadcast_df, keys, key_fields, function, options, phases, event_time,
                                  tick_stream(df, options.location.name, timers=phases.timers))
    return _keyed(routed, plan)


def plan_broadcast(df: DataFrame, broadcast_df: DataFrame, keys: Sequence[str], key_fields: Sequence[Any],
                   function: Any, options: ProcessOptions, phases: Phases, event_time: Optional[EventTime],
                   ticks: Optional[DataFrame]) -> tuple[ProcessPlan, DataFrame]:
    """The plan of a keyed function with a broadcast input (``phases.broadcast`` names its
    states), and ``df`` and ``broadcast_df`` tagged by side and routed for it (every partition
    gets every broadcast row): the one place it is built, for :func:`keyed_broadcast_process`
    and for offline runs (:mod:`.offline`). ``event_time``: the keyed input's (the broadcast
    input carries none); ``ticks`` as for :func:`plan_keyed`."""
    sides = (
        InputSide(LEFT, tuple(df.columns), renamed(LEFT, df.columns), tuple(keys), event_time),
        InputSide(BROADCAST_SIDE, tuple(broadcast_df.columns), renamed(BROADCAST_SIDE, broadcast_df.columns)),
    )
    plan = ProcessPlan(KEYED, function, options, tuple(key_fields), sides, phases)
    return plan, union_inputs([(sides[0], df), (sides[1], broadcast_df)], options.parallelism, _max_p(options),
                              ticks)


def checkpointed_process(
    df: DataFrame,
    function: CheckpointedFunction,
    output_schema: Union[StructType, str],
    *,
    parallelism: Optional[int] = None,
    name: Optional[str] = None,
    state_location: Optional[str] = None,
    state_root: Optional[str] = None,
    storage_options: Optional[Mapping[str, str]] = None,
    engine: EngineLike = None,
) -> DataFrame:
    """Run a non-keyed :class:`CheckpointedFunction` with operator state over ``df`` in
    ``parallelism`` partitions (rows dealt round-robin). Options as for :func:`keyed_process`.
    Restarting with another ``parallelism`` redistributes operator state by its mode."""
    function = _function_instance(function, CheckpointedFunction, "checkpointed_process")
    _check_stream(df, "checkpointed_process")
    options = process_options(df, function, output_schema, keyed=False, parallelism=parallelism, name=name,
                              state_location=state_location, state_root=state_root,
                              storage_options=storage_options, engine=engine)
    plan = ProcessPlan(OPERATOR, function, options)

    def operator(batches):
        return run_operator(plan, batches)

    _check_output(plan)
    record(plan)
    ticks = tick_stream(df, options.location.name, timers=False)
    out = with_tick_source(df, ticks).repartition(options.parallelism).mapInArrow(operator, plan.task_schema)
    return observed(out, options.location.name, {})


# ------------------------------------------------------------------------------- helpers
def _keyed(routed: DataFrame, plan: ProcessPlan) -> DataFrame:
    """``routed`` through the keyed loop of ``plan``."""
    def keyed(batches):
        return run_keyed(plan, batches)

    _check_output(plan)
    record(plan)
    return observed(routed.mapInArrow(keyed, plan.task_schema), plan.location.name, plan.event_delays)


def _check_output(plan: ProcessPlan) -> None:
    if OBSERVATION_COLUMN in plan.output_schema.fieldNames():
        raise ProcessDefinitionError(f"output column {OBSERVATION_COLUMN!r} is reserved by spark-state; rename it")


def _no_heartbeat(idle_heartbeat: bool) -> None:
    if idle_heartbeat:
        warnings.warn("idle_heartbeat is no longer needed and is ignored: spark-state runs a batch when a timer is "
                      "due, also while the sources are idle (docs/time.md)", FutureWarning, stacklevel=3)


def _phases(function: Any, *, event_time: bool, two_inputs: bool = False,
            broadcast: Optional[BroadcastSpec] = None) -> Phases:
    """The keyed loop's phases a function and its inputs need (see :mod:`.plan`)."""
    return Phases(timers=defines(function, "on_timer"), event_time=event_time,
                  operator_state=_has_operator_state(function), broadcast=broadcast, two_inputs=two_inputs)


def _max_p(options: ProcessOptions) -> int:
    assert options.max_parallelism is not None  # keyed options always resolve it
    return options.max_parallelism


def key_columns(df: DataFrame, key: Union[str, Sequence[str]], what: str) -> tuple[list[str], list]:
    keys = [key] if isinstance(key, str) else list(key)
    if not keys:
        raise ProcessDefinitionError(f"{what} needs at least one key column")
    fields = {f.name: f for f in df.schema.fields}
    missing = [k for k in keys if k not in fields]
    if missing:
        raise ProcessDefinitionError(
            f"key column(s) {missing} not in the DataFrame's columns {list(fields)}")
    key_fields = [fields[k] for k in keys]
    check_key_fields(key_fields)
    return keys, key_fields


def _has_operator_state(function: Any) -> bool:
    """A keyed function keeps operator state when it defines Flink's CheckpointedFunction hooks."""
    return defines(function, "initialize_state") or defines(function, "snapshot_state")


def _check_stream(df: DataFrame, what: str) -> None:
    if not df.isStreaming:
        raise ProcessDefinitionError(
            f"{what} needs a streaming DataFrame (spark.readStream...): state versions follow "
            "the micro-batch ids")
    clash = [c for c in df.columns if c in HIDDEN_COLUMNS]
    if clash:
        raise ProcessDefinitionError(f"input columns {clash} are reserved by spark-state; rename them")

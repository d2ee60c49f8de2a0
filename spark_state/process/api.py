"""Driver side: ``keyed_process`` and ``checkpointed_process`` turn a streaming DataFrame into
the streaming DataFrame of the function's output.

Plan of ``keyed_process(df, key, fn, schema)``::

    df ─► + key group column  pmod(hash(key), max_parallelism)
       ─► + route column      small int whose hash lands in partition kg * n // max_parallelism
       ─► repartition(n, route) ─► drop route ─► mapInArrow(run_keyed, schema)

With event time (``df.withWatermark``), timers (``on_timer``), operator state
(``initialize_state``), a heartbeat, two inputs (``keyed_co_process``) or a broadcast input
(``keyed_broadcast_process``), the inputs are unioned and tagged by side first
(:mod:`.inputs`) and the tasks run the general loop (:mod:`.keyed_runtime`).

``checkpointed_process`` repartitions round-robin into ``n`` partitions (Spark sorts rows
before a round-robin repartition so that retries see the same split) and runs
``mapInArrow(run_operator, schema)``.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence, Union

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from ..config import EngineConfig
from ..spark.compat import parse_ddl
from ..state import MapStateDescriptor
from ..partitioning.keygroups import (check_max_parallelism, check_parallelism_preconditions,
                                      compute_default_max_parallelism)
from .errors import ProcessDefinitionError
from .event_time import event_time_of
from .functions import (
    CheckpointedFunction,
    KeyedBroadcastProcessFunction,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    defines,
)
from .inputs import (BROADCAST_SIDE, LEFT, RIGHT, InputSide, check_same_key_types, heartbeat_stream, renamed,
                     union_inputs)
from .keycodec import check_key_fields
from .location import DEFAULT_ROOT_DIR, ROOT_CONF, LocationSpec
from .routing import (HIDDEN_COLUMNS, KEY_GROUP_COLUMN, ROUTE_COLUMN, add_routing_columns, key_group_and_route,
                      repartition_routed)
from .runner import ProcessPlan, run_keyed, run_operator

EngineLike = Union[EngineConfig, Mapping[str, str], None]


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
        storage_options: checkpoint storage options (``s3.endpoint_url``, ``hdfs.*``, ...).
        engine: an :class:`~spark_state.EngineConfig` or its string options (``backend``,
            ``snapshotInterval``, ...); default the engine defaults (RocksDB backend).
        late_rows: rows whose event time is ``<=`` the batch's watermark: ``"drop"`` (default,
            as Spark's stateful operators do) or ``"deliver"`` (``ctx.is_late()`` is True).
        idle_heartbeat: union a heartbeat (Spark's ``rate`` source, one row per second) into
            the input, so that batches run -- and timers fire -- while the sources are idle.
            Costs one batch (a commit per partition) per second while idle.
    """
    function = _function_instance(function, KeyedProcessFunction, "keyed_process")
    _check_stream(df, "keyed_process")
    keys, key_fields = _keys(df, key, "keyed_process")
    n, max_p = _parallelisms(df, parallelism, max_parallelism)
    event_time = event_time_of(df, "keyed_process")
    has_timers = defines(function, "on_timer")
    operator_state = _has_operator_state(function)
    plan = ProcessPlan(
        kind="keyed", function=function, function_name=type(function).__name__,
        location=_location(df, function, name, state_location, state_root, storage_options),
        engine=_engine(engine), parallelism=n, output_schema=_schema(df, output_schema),
        max_parallelism=max_p, key_fields=key_fields,
        has_timers=has_timers, operator_state=operator_state, late_rows=_late_rows(late_rows),
    )
    if not (event_time or has_timers or operator_state or idle_heartbeat):
        routed = add_routing_columns(df, keys, n, max_p)  # the lean loop: nothing to pay for time
    else:
        side = InputSide(LEFT, tuple(df.columns), tuple(df.columns), tuple(keys), event_time)
        plan.sides = [side]
        if idle_heartbeat:
            routed = union_inputs([(side, df)], n, max_p, heartbeat_stream(df))
        else:
            kg, route = key_group_and_route(keys, n, max_p)
            routed = repartition_routed(df.withColumn(KEY_GROUP_COLUMN, kg).withColumn(ROUTE_COLUMN, route), n)

    def keyed(batches):
        return run_keyed(plan, batches)

    return routed.mapInArrow(keyed, plan.output_schema)


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
    side may declare event time with ``withWatermark``; the operator's watermark is the
    minimum over the sides that have seen rows (Spark's default policy). Other options as
    for :func:`keyed_process`."""
    function = _function_instance(function, KeyedCoProcessFunction, "keyed_co_process")
    _check_stream(left, "keyed_co_process")
    _check_stream(right, "keyed_co_process")
    lkeys, lfields = _keys(left, left_key, "keyed_co_process (left)")
    rkeys, _ = _keys(right, right_key, "keyed_co_process (right)")
    check_same_key_types(left, lkeys, right, rkeys)
    n, max_p = _parallelisms(left, parallelism, max_parallelism)
    sides = [
        InputSide(LEFT, tuple(left.columns), renamed(LEFT, left.columns), tuple(lkeys),
                  event_time_of(left, "keyed_co_process (left)")),
        InputSide(RIGHT, tuple(right.columns), renamed(RIGHT, right.columns), tuple(rkeys),
                  event_time_of(right, "keyed_co_process (right)")),
    ]
    plan = ProcessPlan(
        kind="keyed", function=function, function_name=type(function).__name__,
        location=_location(left, function, name, state_location, state_root, storage_options),
        engine=_engine(engine), parallelism=n, output_schema=_schema(left, output_schema),
        max_parallelism=max_p, key_fields=lfields, sides=sides, variant="co",
        has_timers=defines(function, "on_timer"), operator_state=_has_operator_state(function),
        late_rows=_late_rows(late_rows),
    )
    routed = union_inputs([(sides[0], left), (sides[1], right)], n, max_p,
                          heartbeat_stream(left) if idle_heartbeat else None)

    def keyed(batches):
        return run_keyed(plan, batches)

    return routed.mapInArrow(keyed, plan.output_schema)


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
    rows are never late and carry no event time into the watermark (a ``withWatermark`` on
    ``broadcast_df`` is ignored).
    ``process_broadcast_element`` writes the broadcast states named in ``broadcast_states``
    (``MapStateDescriptor`` objects); ``process_element`` and ``on_timer`` read them. Broadcast
    state is operator state of each partition, committed with its keyed state, and on a
    rescale new partition ``i`` takes old partition ``i % m``'s copy. Other options as for
    :func:`keyed_process`.
    """
    function = _function_instance(function, KeyedBroadcastProcessFunction, "keyed_broadcast_process")
    _check_stream(df, "keyed_broadcast_process")
    _check_stream(broadcast_df, "keyed_broadcast_process (broadcast input)")
    keys, key_fields = _keys(df, key, "keyed_broadcast_process")
    n, max_p = _parallelisms(df, parallelism, max_parallelism)
    descriptors = list(broadcast_states)
    if not descriptors or not all(isinstance(d, MapStateDescriptor) for d in descriptors):
        raise ProcessDefinitionError(
            "keyed_broadcast_process needs broadcast_states=[MapStateDescriptor(name, key_type, value_type), ...]")
    order = (broadcast_order,) if isinstance(broadcast_order, str) else tuple(broadcast_order or ())
    missing = [c for c in order if c not in broadcast_df.columns]
    if missing:
        raise ProcessDefinitionError(
            f"broadcast_order column(s) {missing} not in the broadcast input's columns {broadcast_df.columns}")
    sides = [
        InputSide(LEFT, tuple(df.columns), renamed(LEFT, df.columns), tuple(keys),
                  event_time_of(df, "keyed_broadcast_process")),
        InputSide(BROADCAST_SIDE, tuple(broadcast_df.columns), renamed(BROADCAST_SIDE, broadcast_df.columns)),
    ]
    plan = ProcessPlan(
        kind="keyed", function=function, function_name=type(function).__name__,
        location=_location(df, function, name, state_location, state_root, storage_options),
        engine=_engine(engine), parallelism=n, output_schema=_schema(df, output_schema),
        max_parallelism=max_p, key_fields=key_fields, sides=sides, variant="broadcast",
        has_timers=defines(function, "on_timer"), operator_state=_has_operator_state(function),
        broadcast_states=descriptors, broadcast_order=order,
        late_rows=_late_rows(late_rows),
    )
    routed = union_inputs([(sides[0], df), (sides[1], broadcast_df)], n, max_p,
                          heartbeat_stream(df) if idle_heartbeat else None)

    def keyed(batches):
        return run_keyed(plan, batches)

    return routed.mapInArrow(keyed, plan.output_schema)


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
    n = _parallelism(df, parallelism)
    plan = ProcessPlan(
        kind="operator", function=function, function_name=type(function).__name__,
        location=_location(df, function, name, state_location, state_root, storage_options),
        engine=_engine(engine), parallelism=n, output_schema=_schema(df, output_schema),
    )

    def operator(batches):
        return run_operator(plan, batches)

    return df.repartition(n).mapInArrow(operator, plan.output_schema)


# ------------------------------------------------------------------------------- helpers
def _keys(df: DataFrame, key: Union[str, Sequence[str]], what: str) -> tuple[list[str], list]:
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


def _parallelisms(df: DataFrame, parallelism: Optional[int], max_parallelism: Optional[int]) -> tuple[int, int]:
    n = _parallelism(df, parallelism)
    max_p = compute_default_max_parallelism(n) if max_parallelism is None else max_parallelism
    check_max_parallelism(max_p)
    if max_p < n:
        raise ProcessDefinitionError(f"max_parallelism {max_p} must be at least parallelism {n}")
    return n, max_p


def _has_operator_state(function: Any) -> bool:
    """A keyed function keeps operator state when it defines Flink's CheckpointedFunction hooks."""
    return defines(function, "initialize_state") or defines(function, "snapshot_state")


def _late_rows(late_rows: str) -> str:
    if late_rows not in ("drop", "deliver"):
        raise ProcessDefinitionError(f"late_rows must be 'drop' or 'deliver', got {late_rows!r}")
    return late_rows


def _check_stream(df: DataFrame, what: str) -> None:
    if not df.isStreaming:
        raise ProcessDefinitionError(
            f"{what} needs a streaming DataFrame (spark.readStream...): state versions follow "
            "the micro-batch ids")
    clash = [c for c in df.columns if c in HIDDEN_COLUMNS]
    if clash:
        raise ProcessDefinitionError(f"input columns {clash} are reserved by spark-state; rename them")


def _parallelism(df: DataFrame, parallelism: Optional[int]) -> int:
    if parallelism is None:
        parallelism = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 200)  # 200: Spark's default
    check_parallelism_preconditions(parallelism)
    return parallelism


def _schema(df: DataFrame, output_schema: Union[StructType, str]) -> StructType:
    if isinstance(output_schema, StructType):
        return output_schema
    if isinstance(output_schema, str):
        try:
            parsed = parse_ddl(output_schema)
        except Exception as exc:
            raise ProcessDefinitionError(f"output_schema {output_schema!r} is not a valid DDL schema: {exc}") from None
        if isinstance(parsed, StructType):
            return parsed
    raise ProcessDefinitionError(
        f"output_schema must be a StructType or a DDL string such as 'word string, n bigint', got {output_schema!r}")


def _engine(engine: EngineLike) -> EngineConfig:
    if engine is None:
        return EngineConfig()
    if isinstance(engine, EngineConfig):
        return engine
    return EngineConfig.from_options({str(k): str(v) for k, v in dict(engine).items()})


def _location(df: DataFrame, function: Any, name: Optional[str], state_location: Optional[str],
              state_root: Optional[str], storage_options: Optional[Mapping[str, str]]) -> LocationSpec:
    op_name = name or type(function).__name__
    if "/" in op_name or op_name in (".", ".."):
        raise ProcessDefinitionError(f"name {op_name!r} must not contain '/'")
    root = state_root or df.sparkSession.conf.get(ROOT_CONF, None) or DEFAULT_ROOT_DIR
    if "://" not in root:
        root = os.path.abspath(root)
    return LocationSpec(explicit=state_location, root=root, name=op_name,
                        storage_options=dict(storage_options or {}))

"""Driver side: ``keyed_process`` and ``checkpointed_process`` turn a streaming DataFrame into
the streaming DataFrame of the function's output.

Plan of ``keyed_process(df, key, fn, schema)``::

    df ─► + key group column  pmod(hash(key), max_parallelism)
       ─► + route column      small int whose hash lands in partition kg * n // max_parallelism
       ─► repartition(n, route) ─► drop route ─► mapInArrow(run_keyed, schema)

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
from ..keygroups import check_max_parallelism, check_parallelism_preconditions, compute_default_max_parallelism
from .errors import ProcessDefinitionError
from .functions import CheckpointedFunction, KeyedProcessFunction
from .keycodec import check_key_fields
from .location import DEFAULT_ROOT_DIR, ROOT_CONF, LocationSpec
from .routing import HIDDEN_COLUMNS, add_routing_columns
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
    """
    function = _function_instance(function, KeyedProcessFunction, "keyed_process")
    _check_stream(df, "keyed_process")
    keys = [key] if isinstance(key, str) else list(key)
    if not keys:
        raise ProcessDefinitionError("keyed_process needs at least one key column")
    fields = {f.name: f for f in df.schema.fields}
    missing = [k for k in keys if k not in fields]
    if missing:
        raise ProcessDefinitionError(
            f"key column(s) {missing} not in the DataFrame's columns {list(fields)}")
    key_fields = [fields[k] for k in keys]
    check_key_fields(key_fields)
    n = _parallelism(df, parallelism)
    max_p = compute_default_max_parallelism(n) if max_parallelism is None else max_parallelism
    check_max_parallelism(max_p)
    if max_p < n:
        raise ProcessDefinitionError(f"max_parallelism {max_p} must be at least parallelism {n}")
    plan = ProcessPlan(
        kind="keyed", function=function, function_name=type(function).__name__,
        location=_location(df, function, name, state_location, state_root, storage_options),
        engine=_engine(engine), parallelism=n, output_schema=_schema(df, output_schema),
        max_parallelism=max_p, key_fields=key_fields,
    )
    routed = add_routing_columns(df, keys, n, max_p)

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
        parallelism = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    check_parallelism_preconditions(parallelism)
    return parallelism


def _schema(df: DataFrame, output_schema: Union[StructType, str]) -> StructType:
    if isinstance(output_schema, StructType):
        return output_schema
    if isinstance(output_schema, str):
        try:
            parsed = StructType.fromDDL(output_schema)
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

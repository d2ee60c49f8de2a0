"""Driver side: the keyword options shared by every entry point, validated once.

``keyed_process``, ``keyed_co_process``, ``keyed_broadcast_process`` and
``checkpointed_process`` take the same keyword options (``parallelism``, ``max_parallelism``,
``name``, ``state_location``, ``state_root``, ``storage_options``, ``engine``, ``late_rows``)
plus the output schema. :func:`process_options` checks them and resolves
their defaults against the session, and returns one frozen :class:`ProcessOptions` that the
plan (:mod:`.plan`) carries to the tasks. Errors are :class:`~.errors.ProcessDefinitionError`
(or the key group module's ``ValueError`` for parallelism bounds), raised on the driver before
the query starts.

Engine and storage options come from the session's spark-state confs (what
``spark_state.configure(options=...)`` set; which ones apply is :func:`spark_state.options.keyed_session_options`),
overridden key by key by ``engine=`` (a mapping; an :class:`EngineConfig` replaces the session's
engine options wholly) and, for storage, by ``storage_options=``: session ``storage.*`` <
``engine=``'s ``storage.*`` < ``storage_options=``. The result is checked once, here, by
:meth:`EngineConfig.from_options` (the owner of the rules); a bad session value names its conf.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from .. import constants as C
from .. import memory
from ..config import EngineConfig, check_storage_options
from ..errors import ConfigError
from ..options import keyed_session_options
from ..partitioning.keygroups import (check_max_parallelism, check_parallelism_preconditions,
                                      compute_default_max_parallelism)
from ..spark.compat import parse_ddl, session_confs
from .errors import ProcessDefinitionError
from .location import DEFAULT_ROOT_DIR, ROOT_CONF, LocationSpec

EngineLike = Union[EngineConfig, Mapping[str, str], None]
LATE_ROWS = ("drop", "deliver")


@dataclass(frozen=True)
class ProcessOptions:
    """The resolved options of one operator (see the module docstring)."""

    #: the function's class name (messages; default operator name)
    function_name: str
    location: LocationSpec
    engine: EngineConfig
    parallelism: int
    output_schema: StructType
    #: the number of key groups (keyed operators); None for ``checkpointed_process``
    max_parallelism: Optional[int] = None
    #: rows at or below the batch's watermark: "drop" or "deliver" (flagged ``ctx.is_late()``)
    late_rows: str = "drop"
    #: the engine options the memory budget sets, resolved in each task's process; None: ``engine``
    #: as it is (an :class:`EngineConfig` given, or a session that shows no Spark confs)
    function_memory: Optional[memory.FunctionMemory] = None

    def task_engine(self) -> EngineConfig:
        """The engine of a task: ``engine`` with the options the budget sets taken from the
        executor this process runs on (:class:`spark_state.memory.FunctionMemory`)."""
        if self.function_memory is None:
            return self.engine
        values = self.function_memory.values()
        fields = {"spill_threshold_bytes": values.get(memory.SPILL_THRESHOLD_OPTION),
                  "block_cache_mb": values.get(memory.BLOCK_CACHE_OPTION),
                  "write_buffer_mb": values.get(memory.WRITE_BUFFER_OPTION)}
        changed = {k: v for k, v in fields.items() if v is not None and getattr(self.engine, k) != v}
        return self.engine.replace(**changed) if changed else self.engine


def process_options(
    df: DataFrame,
    function: Any,
    output_schema: Union[StructType, str],
    *,
    keyed: bool,
    parallelism: Optional[int],
    max_parallelism: Optional[int] = None,
    name: Optional[str],
    state_location: Optional[str],
    state_root: Optional[str],
    storage_options: Optional[Mapping[str, str]],
    engine: EngineLike,
    late_rows: str = "drop",
) -> ProcessOptions:
    """The options of an operator on ``df`` (its first input) running ``function``, checked;
    ``keyed`` decides whether ``max_parallelism`` is resolved."""
    n = _parallelism(df, parallelism)
    max_p = _max_parallelism(n, max_parallelism) if keyed else None
    confs = session_confs(df.sparkSession, C.CONF_PREFIX)
    rule_conf = _rule_conf(df.sparkSession)
    config = _engine(confs, engine, storage_options, _memory_share(rule_conf))
    return ProcessOptions(
        function_name=type(function).__name__,
        location=_location(df, function, name, state_location, state_root, config.storage_options),
        engine=config,
        parallelism=n,
        output_schema=_schema(output_schema),
        max_parallelism=max_p,
        late_rows=_late_rows(late_rows),
        function_memory=_function_memory(rule_conf, confs, engine),
    )


def _parallelism(df: DataFrame, parallelism: Optional[int]) -> int:
    if parallelism is None:
        parallelism = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 200)  # 200: Spark's default
    check_parallelism_preconditions(parallelism)
    return parallelism


def _max_parallelism(n: int, max_parallelism: Optional[int]) -> int:
    max_p = compute_default_max_parallelism(n) if max_parallelism is None else max_parallelism
    check_max_parallelism(max_p)
    if max_p < n:
        raise ProcessDefinitionError(f"max_parallelism {max_p} must be at least parallelism {n}")
    return max_p


def _late_rows(late_rows: str) -> str:
    if late_rows not in LATE_ROWS:
        raise ProcessDefinitionError(f"late_rows must be 'drop' or 'deliver', got {late_rows!r}")
    return late_rows


def _schema(output_schema: Union[StructType, str]) -> StructType:
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


def _rule_conf(spark: Any) -> Optional[dict[str, str]]:
    """The session's confs of the budget's rule (:data:`spark_state.memory.RULE_CONFS`); None if
    the session does not serve Spark confs (some Connect servers)."""
    try:
        return {k: v for k in memory.RULE_CONFS if (v := spark.conf.get(k, None)) is not None}
    except Exception:
        return None


def _memory_share(conf: Optional[Mapping[str, str]]) -> Optional[int]:
    """The part of the executors' memory budget each of a keyed function's Python processes gets
    as the driver sees it (:func:`spark_state.memory.function_process_share`): it checks the budget
    here, and sets the definition's engine; each task sets it again from its executor's figures
    (:meth:`ProcessOptions.task_engine`)."""
    if conf is None:
        return None
    try:
        return memory.function_process_share(conf)
    except ValueError as exc:
        raise ProcessDefinitionError(str(exc)) from None


def _function_memory(conf: Optional[Mapping[str, str]], confs: Mapping[str, str],
                     engine: EngineLike) -> Optional[memory.FunctionMemory]:
    """What a task sets from its executor's part of the budget: the options neither the session's
    confs nor ``engine=`` set (none for an :class:`EngineConfig`, which replaces them all)."""
    if conf is None or isinstance(engine, EngineConfig):
        return None
    given = {k[len(C.CONF_PREFIX):] for k in keyed_session_options(confs)} | {str(k) for k in dict(engine or {})}
    defaulted = memory.budget_defaults(dict.fromkeys(given, ""))
    return memory.FunctionMemory(tuple(sorted(conf.items())), defaulted) if defaulted else None


def _engine(confs: Mapping[str, str], engine: EngineLike,
            storage_options: Optional[Mapping[str, str]], memory_share: Optional[int] = None) -> EngineConfig:
    """The engine configuration of a keyed function: the session's spark-state ``confs`` (full
    names) overridden by ``engine=`` and ``storage_options=`` (see the module docstring); its
    ``storage_options`` are the ones the function's checkpoint storage is opened with. The memory
    options the confs leave unset come from ``memory_share``, the process's part of the budget."""
    relative = {k[len(C.CONF_PREFIX):]: v for k, v in keyed_session_options(confs).items()}
    session = {C.CONF_PREFIX + k: v for k, v in memory.with_process_defaults(relative, memory_share).items()}
    try:
        base = EngineConfig.from_options(session, prefix=C.CONF_PREFIX)
    except ConfigError as exc:
        raise ProcessDefinitionError(f"the session's spark-state confs: {exc}") from None
    if isinstance(engine, EngineConfig):
        config = engine
        storage = {**base.storage_options, **engine.storage_options}
    else:
        given = {str(k): str(v) for k, v in dict(engine or {}).items()}
        merged = {k[len(C.CONF_PREFIX):]: v for k, v in session.items()}
        merged.update(given)
        try:
            config = EngineConfig.from_options(merged)
        except ConfigError as exc:
            raise ProcessDefinitionError(f"engine= over the session's spark-state confs: {exc}") from None
        storage = dict(config.storage_options)
    if storage_options:
        given_storage = {str(k): str(v) for k, v in storage_options.items()}
        try:
            check_storage_options({**storage, **given_storage})
        except ConfigError as exc:
            raise ProcessDefinitionError(f"storage_options=: {exc}") from None
        storage.update(given_storage)
    if storage == config.storage_options:
        return config
    return config.replace(storage_options=storage)


def _location(df: DataFrame, function: Any, name: Optional[str], state_location: Optional[str],
              state_root: Optional[str], storage_options: Mapping[str, str]) -> LocationSpec:
    op_name = name or type(function).__name__
    if "/" in op_name or op_name in (".", ".."):
        raise ProcessDefinitionError(f"name {op_name!r} must not contain '/'")
    root = state_root or df.sparkSession.conf.get(ROOT_CONF, None) or None
    if root is not None and "://" not in root:
        root = os.path.abspath(root)
    # the former default root: state a query kept there is still found (see .location)
    return LocationSpec(explicit=state_location, root=root, name=op_name, storage_options=dict(storage_options),
                        legacy_root=os.path.abspath(DEFAULT_ROOT_DIR))
